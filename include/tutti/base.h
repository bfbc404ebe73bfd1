/* SPDX-License-Identifier: Apache-2.0 */
/** \file
 * Basics shared by the whole API: export macro, version, the error convention and logging.
 *
 * Error convention: every fallible function returns 0 (or a non-negative count) on success and a
 * negative errno on failure. docs/errors.md lists what each errno means in this library.
 */
#ifndef TUTTI_BASE_H
#define TUTTI_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TUTTI_API __attribute__((visibility("default")))

#define TUTTI_VERSION_MAJOR 0
#define TUTTI_VERSION_MINOR 3
#define TUTTI_VERSION_PATCH 0

/**
 * The library version as "MAJOR.MINOR.PATCH". Static storage. This function can't fail.
 */
TUTTI_API const char *tutti_version(void);

/**
 * A static, thread-safe description of the error code \p rc (a negative errno, as every function
 * of this library returns). Positive values are treated like their negation. This function can't
 * fail.
 */
TUTTI_API const char *tutti_strerror(int rc);

enum tutti_log_level {
	TUTTI_LOG_ERR = 0,
	TUTTI_LOG_WARN = 1,
	TUTTI_LOG_INFO = 2,
	TUTTI_LOG_DEBUG = 3,
};

/**
 * Receives the library's log messages. \p msg is a NUL-terminated line without a trailing newline,
 * valid only during the call. May be called from any thread that calls into the library; never
 * from a thread the library owns. The library prints nothing by itself.
 */
typedef void (*tutti_log_fn)(void *arg, int level, const char *msg);

#ifdef __cplusplus
}
#endif

#endif /* TUTTI_BASE_H */
