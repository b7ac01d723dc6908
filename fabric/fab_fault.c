/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_fault.c - the fault-injection spec and the small helpers (RNG, hash, clock, appending to a
 * text buffer) fabric/ shares.
 *
 * Faults are injected in our own layer, so that tests need no tc netem (root and a kernel module):
 * delays and reordering hold operations back before they reach the provider, forced EAGAIN makes
 * the posting loop behave as if the provider pushed back, forced completion errors run the
 * retry path as a real provider error would (cqerr short of the bound, cqfail up to it), and
 * forced FI_ENOMEM completions run the throttle path of a provider out of resources.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fab_internal.h"
#include "odx/odx.h"

uint64_t fab_rand(uint64_t *state)
{
	/* splitmix64: tiny, good enough for fault decisions, seedable for reproducible runs */
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

bool fab_chance(uint64_t *state, double p)
{
	if (p <= 0.0)
		return false;
	return (double)(fab_rand(state) >> 11) * (1.0 / 9007199254740992.0) < p;
}

uint64_t fab_hash64(const void *data, size_t len)
{
	const unsigned char *b = data;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

int64_t fab_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

bool fab_appendf(char *buf, size_t n, size_t *used, const char *fmt, ...)
{
	if (*used >= n)
		return false;
	va_list ap;
	va_start(ap, fmt);
	int w = vsnprintf(buf + *used, n - *used, fmt, ap);
	va_end(ap);
	if (w < 0 || (size_t)w >= n - *used) {
		*used = n; /* full: what did not fit is cut, later appends do nothing */
		return false;
	}
	*used += (size_t)w;
	return true;
}

static int parse_probability(const char *key, const char *val, double *out, char *err,
			     size_t errlen)
{
	char *end;
	errno = 0;
	double p = strtod(val, &end);
	if (errno || end == val || *end || p < 0.0 || p > 1.0) {
		snprintf(err, errlen, "fabric.fault: %s=%s is not a probability in [0, 1]", key,
			 val);
		return ODX_EINVAL;
	}
	*out = p;
	return 0;
}

/* Decimal digits up to `stop` (which must follow them): their count, or 0 when there are none,
 * something else follows, or the value does not fit. */
static int parse_uint(const char *text, unsigned long long *out, char stop)
{
	char *end;
	int n = 0;

	while (text[n] >= '0' && text[n] <= '9')
		n++;
	if (!n || text[n] != stop)
		return 0;
	errno = 0;
	*out = strtoull(text, &end, 10);
	return errno || end != text + n ? 0 : n;
}

/*
 * The one parser of the fabric.fault grammar (see fabric.h): odx_fab_open uses it, and so does
 * the configuration check at odx_open (odx_fab_fault_check), whether the fabric is used or not.
 */
int fab_fault_parse(struct fab_fault *ft, const char *spec, char *err, size_t errlen)
{
	memset(ft, 0, sizeof(*ft));
	ft->rng = 0x0d1f00d5eedull;
	if (!spec || !*spec)
		return 0;
	char *copy = strdup(spec);
	if (!copy)
		return ODX_ENOMEM;
	int ret = 0;
	char *save = NULL;
	for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(item, '=');
		if (!eq) {
			snprintf(err, errlen, "fabric.fault: '%s' is not key=value", item);
			ret = ODX_EINVAL;
			break;
		}
		*eq = '\0';
		const char *key = item, *val = eq + 1;
		if (!strcmp(key, "delay_us")) {
			unsigned long long a = 0, b = 0;
			/* A or A-B, digits only: sscanf's %u would take "-5" or "5x" */
			int n = parse_uint(val, &a, '-');
			if (n > 0 && parse_uint(val + n + 1, &b, '\0') <= 0)
				n = 0;
			else if (n == 0 && (n = parse_uint(val, &a, '\0')) > 0)
				b = a;
			if (n < 1 || a > b || b > 10000000) {
				snprintf(
					err, errlen,
					"fabric.fault: delay_us=%s is not A-B microseconds (B <= 10 s)",
					val);
				ret = ODX_EINVAL;
				break;
			}
			ft->delay_min_us = (unsigned)a;
			ft->delay_max_us = (unsigned)b;
		} else if (!strcmp(key, "reorder")) {
			ret = parse_probability(key, val, &ft->reorder, err, errlen);
		} else if (!strcmp(key, "eagain")) {
			ret = parse_probability(key, val, &ft->eagain, err, errlen);
		} else if (!strcmp(key, "cqerr")) {
			ret = parse_probability(key, val, &ft->cqerr, err, errlen);
		} else if (!strcmp(key, "cqfail")) {
			ret = parse_probability(key, val, &ft->cqfail, err, errlen);
		} else if (!strcmp(key, "enomem")) {
			ret = parse_probability(key, val, &ft->enomem, err, errlen);
		} else if (!strcmp(key, "seed")) {
			unsigned long long seed;

			if (parse_uint(val, &seed, '\0') <= 0) {
				snprintf(
					err, errlen,
					"fabric.fault: seed=%s is not a decimal integer below 2^64",
					val);
				ret = ODX_EINVAL;
				break;
			}
			ft->rng = seed * 0x9e3779b97f4a7c15ull + 1;
		} else {
			snprintf(
				err, errlen,
				"fabric.fault: unknown key '%s' (delay_us, reorder, eagain, cqerr, cqfail, "
				"enomem, seed)",
				key);
			ret = ODX_EINVAL;
		}
		if (ret)
			break;
	}
	free(copy);
	ft->on = !ret && (ft->delay_max_us || ft->reorder > 0 || ft->eagain > 0 || ft->cqerr > 0 ||
			  ft->cqfail > 0 || ft->enomem > 0);
	return ret;
}

int odx_fab_fault_check(const char *spec, char *err, size_t errlen)
{
	struct fab_fault ft;

	return fab_fault_parse(&ft, spec, err, errlen);
}
