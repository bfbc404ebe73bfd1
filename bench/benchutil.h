/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Small helpers shared by the GPU store benchmarks (tutti-gpu-store-bench,
 * tutti-stripe-bench): clocks, medians, a seeded generator and shuffled block tables, so
 * that both draw their data and block tables the same way.
 */
#ifndef TUTTI_BENCH_BENCHUTIL_H
#define TUTTI_BENCH_BENCHUTIL_H

#include <stdint.h>

/* Most values bu_median() takes. */
#define BU_MAX_VALUES 64

uint64_t bu_now_ns(void);
/* User + system seconds of the whole process (every thread, io_uring's kernel threads too). */
double bu_process_cpu_s(void);
/* Seconds every CPU of the machine spent busy (/proc/stat: user, nice, system, irq
 * and softirq; not idle, iowait or a hypervisor's steal), summed over
 * the CPUs; -1 where it cannot be read. Differences over a span, divided by its wall time, give
 * how many cores the whole machine kept busy, this process and every other. */
double bu_machine_busy_s(void);
/* Median of \p n (1..BU_MAX_VALUES) values; \p v is left as it was. */
double bu_median(const double *v, uint32_t n);
/* Sort \p n values in place, ascending. */
void bu_sort(double *v, uint32_t n);
/* The \p p-th percentile (0 < p <= 100) of \p n >= 1 values sorted ascending, by nearest rank:
 * the smallest value with at least p% of the values at or below it (p 50 of 100 values is the
 * 50th, p 99 the 99th, p 100 the largest), always one of the values, never an interpolation. */
double bu_percentile(const double *sorted, uint32_t n, double p);
/* SplitMix64: the next value of the sequence whose state is \p x. */
uint64_t bu_splitmix(uint64_t *x);
/* ids = a permutation of 0..n-1 drawn from \p seed (Fisher-Yates). */
void bu_shuffle(uint32_t *ids, uint32_t n, uint64_t seed);
/* Fill \p bytes (a multiple of 8) at \p p from the generator state \p seed. */
void bu_fill_random(uint8_t *p, uint64_t bytes, uint64_t seed);
/* The value \p s of option \p opt: a whole decimal number in [min, max] (tools/common/cliarg.h),
 * or an error on stderr naming \p prog, the option and the range, and exit status 2. */
uint64_t bu_number(const char *prog, const char *opt, const char *s, uint64_t min, uint64_t max);

#endif /* TUTTI_BENCH_BENCHUTIL_H */
