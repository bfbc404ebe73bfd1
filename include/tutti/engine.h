/* SPDX-License-Identifier: Apache-2.0 */
/** \file
 * The I/O engines that move a store's objects between its files and paged KV memory: their names,
 * and the options each takes. A store is opened with one of them (tutti_store_opts.engine) and
 * its options (tutti_store_opts.engine_opts). Callers such as a command line or a language
 * binding list them from here rather than keeping lists of their own.
 */
#ifndef TUTTI_ENGINE_H
#define TUTTI_ENGINE_H

#include "tutti/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/** I/O engines. */
enum tutti_engine {
	TUTTI_ENGINE_URING =
	    0, /**< io_uring through liburing: batched submission, registered buffers */
	TUTTI_ENGINE_POSIX = 1, /**< a thread pool issuing pread/pwrite */
	/** A GPU-drivable io_uring (NO_MMAP; SQPOLL or a host thread issues what is queued, see
	 *  its option submit) whose submissions and completions are
	 *  produced by a driver, not by system calls: a CUDA kernel for GPU KV, a host thread
	 *  following the same protocol otherwise. Objects move through object-sized bounce slots of
	 *  the staging memory. Recovery, headers and flushes use the uring engine. */
	TUTTI_ENGINE_GPU_URING = 2,
	/** NVIDIA cuFile (GPUDirect Storage), loaded at run time: GPU KV moves between the files
	 *  and device staging by cuFile (batched where the library can), checked and scattered by
	 *  one kernel launch per layer run; host KV uses the uring engine. Opening fails with
	 *  -EOPNOTSUPP where libcufile is not installed or refuses the store's files, -EIO where
	 *  its driver does not open. */
	TUTTI_ENGINE_GDS = 3,
	/** The engine for where the KV lives: gpu-uring for GPU KV, the CPU-driven uring for host
	 *  KV (posix where io_uring is refused). gpu-uring is set up at the first call with GPU KV;
	 *  where it cannot be (no CUDA device, layer blocks of at most 240 bytes, a GPU with no
	 *  more SMs than its option sms, no such io_uring, memory that cannot be mapped for the
	 * GPU) GPU KV moves through the CPU-driven engine too, and one line of the log (level WARN)
	 *  says why. tutti_store_engine() tells which engine moves a kv. */
	TUTTI_ENGINE_AUTO = 4,
};

/**
 * Parse an engine name ("uring", "posix", "gpu-uring", "gds" or "auto").
 * \return the enum tutti_engine value, or -EINVAL for an unknown name or NULL.
 */
TUTTI_API int tutti_engine_parse(const char *name);

/**
 * The name of engine \p engine (enum tutti_engine), as tutti_engine_parse() takes it.
 * \return a static string, or NULL for an unknown value.
 */
TUTTI_API const char *tutti_engine_name(uint32_t engine);

/**
 * How many engines there are: the values of enum tutti_engine are 0 .. tutti_engine_count() - 1,
 * in the order tutti_engine_info() lists them. This function can't fail.
 */
TUTTI_API uint32_t tutti_engine_count(void);

/** One engine, as tutti_engine_info() describes it. */
struct tutti_engine_info {
	uint32_t size;           /**< = sizeof(struct tutti_engine_info), set by the caller */
	uint32_t engine;         /**< enum tutti_engine */
	const char *name;        /**< as tutti_engine_parse() takes it; static */
	const char *description; /**< one line; static */
	uint32_t nr_options;     /**< the keys it takes in engine_opts (tutti_engine_option()) */
	uint32_t reserved;       /**< 0 */
};

/**
 * Describe engine \p engine (enum tutti_engine): its name, one line on what it is, and how many
 * options it takes.
 * \return 0, -EINVAL (\p out NULL, or out->size not sizeof(struct tutti_engine_info)) or -ENOENT
 *         (no such engine: \p engine >= tutti_engine_count()).
 */
TUTTI_API int tutti_engine_info(uint32_t engine, struct tutti_engine_info *out);

/** What the value of an engine option is. */
enum tutti_engine_option_kind {
	TUTTI_ENGINE_OPTION_INT = 0,    /**< a whole number in decimal, from min to max */
	TUTTI_ENGINE_OPTION_CHOICE = 1, /**< one of nr_choices names */
};

/**
 * One option of an engine: a key of tutti_store_opts.engine_opts.
 *
 * engine_opts is a string of key=value pairs separated by commas, such as
 * "workers=29,sms=5,submit=host" for gpu-uring or "threads=8" for posix; a key not given takes
 * its default, and NULL or "" takes every default. The engine a store opens with checks its own
 * options: an unknown key, a pair that is not key=value, a key given twice or a value outside
 * its range or choices fails tutti_store_open() with -EINVAL, and one line of the log names the
 * engine, the key, the value and what is allowed.
 */
struct tutti_engine_option {
	uint32_t size;              /**< = sizeof(struct tutti_engine_option), set by the caller */
	uint32_t kind;              /**< enum tutti_engine_option_kind */
	const char *name;           /**< the key; static */
	const char *help;           /**< one line; static */
	uint64_t min;               /**< INT: the smallest value accepted; CHOICE: 0 */
	uint64_t max;               /**< INT: the largest value accepted; CHOICE: nr_choices - 1 */
	uint64_t def;               /**< the default: INT the value, CHOICE the index of its name */
	const char *const *choices; /**< CHOICE: nr_choices static names; INT: NULL */
	uint32_t nr_choices;        /**< CHOICE: the names; INT: 0 */
	uint32_t reserved;          /**< 0 */
};

/**
 * Describe option \p index (0 .. nr_options - 1 of tutti_engine_info()) of engine \p engine.
 * \return 0, -EINVAL (\p out NULL, or out->size not sizeof(struct tutti_engine_option)) or
 *         -ENOENT (no such engine, or no such option of it).
 */
TUTTI_API int tutti_engine_option(uint32_t engine, uint32_t index, struct tutti_engine_option *out);

#ifdef __cplusplus
}
#endif

#endif /* TUTTI_ENGINE_H */
