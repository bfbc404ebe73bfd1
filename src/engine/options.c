/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Engine options: the one parser of tutti_store_opts.engine_opts, a string of key=value pairs
 * separated by commas, checked against the table of the engine the store opens with. Every
 * engine refuses alike: an unknown key, a pair that is not key=value, a key given twice, a value
 * outside its range or choices, each with one log line naming the engine, the key, the value
 * and what is allowed (docs/design.md, "Engines", says why options are a string).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "tutti/engine.h"

/* Longest value shown in a log line: the rest of a runaway string is left out. */
#define SHOWN 64

static bool
key_is(const struct tt_engine_opt *o, const char *key, size_t len)
{
	return strlen(o->name) == len && memcmp(o->name, key, len) == 0;
}

/* What \p o allows, for a log line: "1..64", or "auto, sqpoll, host". */
static void
allowed(const struct tt_engine_opt *o, char *buf, size_t len)
{
	size_t used = 0;

	if (o->kind == TUTTI_ENGINE_OPTION_INT) {
		snprintf(buf, len, "%u..%u", o->min, o->max);
		return;
	}
	buf[0] = '\0';
	for (uint32_t k = 0; o->choices[k] != NULL && used < len; k++) {
		int n = snprintf(buf + used, len - used, "%s%s", k > 0 ? ", " : "", o->choices[k]);

		used += n > 0 ? (size_t)n : 0;
	}
}

/* The keys \p ops takes, for a log line. */
static void
keys(const struct tt_engine_ops *ops, char *buf, size_t len)
{
	size_t used = 0;

	snprintf(buf, len, "it takes none");
	for (uint32_t i = 0; i < ops->nr_opts && used < len; i++) {
		int n = snprintf(buf + used, len - used, "%s%s",
		                 i > 0 ? ", " : "its options: ", ops->opts[i]->name);

		used += n > 0 ? (size_t)n : 0;
	}
}

/* A decimal whole number, digits only, in \p o's range. */
static int
parse_int(const struct tt_engine_opt *o, const char *v, size_t len, uint32_t *out)
{
	unsigned long long x = 0;

	if (len == 0 || len > 10) {
		return -EINVAL; /* more digits than any uint32_t */
	}
	for (size_t i = 0; i < len; i++) {
		if (v[i] < '0' || v[i] > '9') {
			return -EINVAL;
		}
		x = x * 10 + (unsigned long long)(v[i] - '0');
	}
	if (x < o->min || x > o->max) {
		return -ERANGE;
	}
	*out = (uint32_t)x;
	return 0;
}

static int
parse_choice(const struct tt_engine_opt *o, const char *v, size_t len, uint32_t *out)
{
	for (uint32_t k = 0; o->choices[k] != NULL; k++) {
		if (strlen(o->choices[k]) == len && memcmp(o->choices[k], v, len) == 0) {
			*out = k;
			return 0;
		}
	}
	return -EINVAL;
}

/* One pair, \p len bytes at \p p, into vals[]; \p seen marks the keys given so far. */
static int
parse_pair(const struct tt_engine_ops *ops, const char *p, size_t len, const struct tt_log *log,
           uint32_t *vals, uint32_t *seen)
{
	const char *eq = memchr(p, '=', len);
	const struct tt_engine_opt *o = NULL;
	char what[256];
	size_t klen, vlen;
	uint32_t i;
	int rc;

	if (eq == NULL || eq == p) {
		tt_log_err(
		    log,
		    "engine %s: option '%.*s' is not key=value (engine_opts: key=value pairs "
		    "separated by commas)",
		    ops->name, (int)TT_MIN(len, SHOWN), p);
		return -EINVAL;
	}
	klen = (size_t)(eq - p);
	vlen = len - klen - 1;
	for (i = 0; i < ops->nr_opts; i++) {
		if (key_is(ops->opts[i], p, klen)) {
			o = ops->opts[i];
			break;
		}
	}
	if (o == NULL) {
		keys(ops, what, sizeof(what));
		tt_log_err(log, "engine %s: unknown option '%.*s' (%s)", ops->name,
		           (int)TT_MIN(klen, SHOWN), p, what);
		return -EINVAL;
	}
	if (*seen & (1u << i)) {
		tt_log_err(log, "engine %s: option %s is given twice", ops->name, o->name);
		return -EINVAL;
	}
	*seen |= 1u << i;
	rc = o->kind == TUTTI_ENGINE_OPTION_INT ? parse_int(o, eq + 1, vlen, &vals[i])
	                                        : parse_choice(o, eq + 1, vlen, &vals[i]);
	if (rc < 0) {
		allowed(o, what, sizeof(what));
		tt_log_err(log, "engine %s: %s=%.*s is %s %s", ops->name, o->name,
		           (int)TT_MIN(vlen, SHOWN), eq + 1,
		           o->kind == TUTTI_ENGINE_OPTION_CHOICE ? "not one of"
		           : rc == -ERANGE                       ? "out of its range"
		                                                 : "not a whole number in",
		           what);
		return -EINVAL;
	}
	return 0;
}

int
tt_engine_opts_parse(const struct tt_engine_ops *ops, const char *text, const struct tt_log *log,
                     uint32_t *vals)
{
	uint32_t seen = 0;

	_Static_assert(TT_ENGINE_MAX_OPTS <= 32, "seen has a bit per option");
	for (uint32_t i = 0; i < ops->nr_opts; i++) {
		vals[i] = ops->opts[i]->def;
	}
	if (text == NULL || text[0] == '\0') {
		return 0;
	}
	for (const char *p = text;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
		int rc = parse_pair(ops, p, len, log, vals, &seen);

		if (rc < 0) {
			return rc;
		}
		if (comma == NULL) {
			return 0;
		}
		p = comma + 1;
	}
}
