/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small helpers every module uses: logging through the caller's hook, allocation wrappers,
 * opening paths of the kind meant, clocks and integer arithmetic.
 */
#ifndef TT_COMMON_H
#define TT_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tutti/base.h"

#define TT_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define TT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TT_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Times are nanoseconds inside the library; these convert the seconds and milliseconds of options
 * and clocks. */
#define TT_NS_PER_S 1000000000ull
#define TT_NS_PER_MS 1000000ull

/* Where a handle's log lines go. Every handle carries its own: there is no global logger. */
struct tt_log {
	tutti_log_fn fn;
	void *arg;
	int level;
};

void tt_log_msg(const struct tt_log *log, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define tt_log_err(log, ...) tt_log_msg((log), TUTTI_LOG_ERR, __VA_ARGS__)
#define tt_log_warn(log, ...) tt_log_msg((log), TUTTI_LOG_WARN, __VA_ARGS__)
#define tt_log_info(log, ...) tt_log_msg((log), TUTTI_LOG_INFO, __VA_ARGS__)
#define tt_log_debug(log, ...) tt_log_msg((log), TUTTI_LOG_DEBUG, __VA_ARGS__)

/* Ordinary memory. Pair tt_malloc/tt_calloc with tt_free. */
void *tt_malloc(size_t bytes);
void *tt_calloc(size_t nr, size_t bytes);
void tt_free(void *p);

/* I/O memory for O_DIRECT: aligned to TUTTI_ALIGN, zeroed. Pair with tt_aligned_free. */
void *tt_aligned_alloc(size_t bytes);
void tt_aligned_free(void *p);

/* Signal words shared with another thread or the GPU, one writer each: the writer publishes
 * with a release store, after what the word announces; readers acquire. */
static inline uint32_t
tt_word_load_acquire(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void
tt_word_store_release(uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/*
 * Opening paths. Every file the library opens by a name it was given is opened through
 * tt_open_kind(), which refuses anything but the kind meant: a FIFO (whose open blocks until a
 * peer comes), a device (whose open may act on it), a socket, or a directory where a file is
 * meant, or the converse.
 */
enum tt_kind {
	TT_KIND_FILE, /* a regular file */
	TT_KIND_DIR,  /* a directory */
};

/* What \p mode's file type is, as a phrase: "a FIFO", "a regular file", ... */
const char *tt_kind_name(mode_t mode);

/*
 * Whether \p name (relative to \p dir_fd, or AT_FDCWD) is of \p kind, or missing; a symbolic
 * link is followed when \p follow, and passes when not (the caller's open refuses it, or its
 * rename replaces it). Returns 0, or \p refused (a negative errno) for another kind, logged
 * with \p path (the name to show) and what it is. For paths that are replaced rather than opened.
 */
int tt_check_kind(int dir_fd, const char *name, bool follow, enum tt_kind kind, int refused,
                  const char *path, const struct tt_log *log);

/*
 * openat(\p dir_fd, \p name, \p flags, \p mode), refused unless what it opens is of \p kind: an
 * existing \p name is looked at first (tt_check_kind; followed unless O_NOFOLLOW), so that
 * nothing of another kind is opened at all, and the open itself is made with O_NONBLOCK (a FIFO
 * put there since then opens at once, or fails) and the descriptor checked (fstat), so that
 * what was checked is what is used; O_NONBLOCK is then cleared unless \p flags has it, and
 * O_CLOEXEC is always set. Returns the descriptor, or a negative errno: \p refused for another
 * kind (logged with \p path and what it is), else the open's own error (not logged).
 */
int tt_open_kind(int dir_fd, const char *name, int flags, mode_t mode, enum tt_kind kind,
                 int refused, const char *path, const struct tt_log *log);

/* Monotonic time in nanoseconds. */
uint64_t tt_now_ns(void);

static inline uint64_t
tt_round_up(uint64_t v, uint64_t align)
{
	return (v + align - 1) / align * align;
}

static inline uint64_t
tt_div_round_up(uint64_t v, uint64_t d)
{
	return (v + d - 1) / d;
}

#endif /* TT_COMMON_H */
