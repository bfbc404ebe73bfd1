/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small helpers every module uses: logging through the caller's hook, allocation wrappers,
 * clocks and integer arithmetic.
 */
#ifndef TT_COMMON_H
#define TT_COMMON_H

#include <stddef.h>
#include <stdint.h>

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
