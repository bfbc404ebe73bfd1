/* SPDX-License-Identifier: Apache-2.0 */
#include "benchutil.h"
#include "cliarg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

uint64_t
bu_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double
bu_process_cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

double
bu_machine_busy_s(void)
{
	unsigned long long v[8] = {0};
	FILE *f = fopen("/proc/stat", "r");
	long hz = sysconf(_SC_CLK_TCK);
	int n;

	if (f == NULL) {
		return -1;
	}
	/* cpu  user nice system idle iowait irq softirq steal */
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
	           &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n < 5 || hz <= 0) {
		return -1;
	}
	return (double)(v[0] + v[1] + v[2] + v[5] + v[6]) / (double)hz;
}

static int
cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double
bu_median(const double *v, uint32_t n)
{
	double s[BU_MAX_VALUES];

	if (n == 0 || n > BU_MAX_VALUES) {
		return 0;
	}
	memcpy(s, v, n * sizeof(*s));
	qsort(s, n, sizeof(*s), cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

void
bu_sort(double *v, uint32_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
}

double
bu_percentile(const double *sorted, uint32_t n, double p)
{
	/* rank = ceil(p / 100 * n), in 1..n; computed in integers of hundredths so that p 99 of
	 * 100 values is the 99th and not the 100th through rounding. */
	uint64_t hundredths = (uint64_t)(p * 100 + 0.5), rank = (hundredths * n + 9999) / 10000;

	if (n == 0) {
		return 0;
	}
	rank = rank < 1 ? 1 : rank > n ? n : rank;
	return sorted[rank - 1];
}

uint64_t
bu_splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void
bu_shuffle(uint32_t *ids, uint32_t n, uint64_t seed)
{
	for (uint32_t i = 0; i < n; i++) {
		ids[i] = i;
	}
	for (uint32_t i = n; i-- > 1;) {
		uint32_t j = (uint32_t)(bu_splitmix(&seed) % (i + 1)), t = ids[i];

		ids[i] = ids[j];
		ids[j] = t;
	}
}

void
bu_fill_random(uint8_t *p, uint64_t bytes, uint64_t seed)
{
	for (uint64_t i = 0; i < bytes / 8; i++) {
		uint64_t v = bu_splitmix(&seed);

		memcpy(p + i * 8, &v, 8);
	}
}

uint64_t
bu_number(const char *prog, const char *opt, const char *s, uint64_t min, uint64_t max)
{
	uint64_t v;

	if (cliarg_u64(prog, opt, s, min, max, &v) < 0) {
		exit(2);
	}
	return v;
}
