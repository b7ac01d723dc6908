/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_util.h - helpers shared by the unit tests: contexts from key/value pairs, host kernels,
 * error-code assertions that print names, a deterministic random generator and the test scale.
 *
 * Include after <cmocka.h> (and its prerequisites). Everything here is static inline so that a test
 * file may use any subset without warnings.
 */
#ifndef ODX_TESTS_TEST_UTIL_H
#define ODX_TESTS_TEST_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "odx/odx.h"

/* Every wait in a test uses this bound: far above any honest run time, never reached. */
#define TEST_TIMEOUT_MS 60000

/* Asserts that an ODX call returned `want`, naming both codes on failure. */
#define assert_rc(expr, want)                                                                      \
	do {                                                                                       \
		int got_ = (expr);                                                                 \
		int want_ = (want);                                                                \
		if (got_ != want_)                                                                 \
			fail_msg("%s returned %d (%s), expected %d (%s)", #expr, got_,             \
				 odx_err_name(got_), want_, odx_err_name(want_));                  \
	} while (0)

#define assert_ok(expr) assert_rc((expr), 0)

/* Asserts that `haystack` contains `needle`, printing both on failure. */
#define assert_contains(haystack, needle)                                                          \
	do {                                                                                       \
		const char *h_ = (haystack);                                                       \
		const char *n_ = (needle);                                                         \
		if (h_ == NULL || strstr(h_, n_) == NULL)                                          \
			fail_msg("'%s' does not contain '%s' (%s)", h_ ? h_ : "(null)", n_,        \
				 #haystack);                                                       \
	} while (0)

/*
 * Opens a context from NULL-terminated key/value pairs ("host.devices", "2", ..., NULL).
 * Fails the test, with the configuration's message, when a key is refused or open fails.
 */
static inline odx_context *test_open_ctx(const char *const *kv)
{
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	int rc;

	assert_ok(odx_config_create(&cfg));
	for (int i = 0; kv && kv[i]; i += 2) {
		rc = odx_config_set(cfg, kv[i], kv[i + 1]);
		if (rc != 0)
			fail_msg("odx_config_set(%s, %s): %s: %s", kv[i], kv[i + 1],
				 odx_err_name(rc), odx_config_error(cfg));
	}
	rc = odx_open(&ctx, cfg);
	if (rc != 0)
		fail_msg("odx_open: %s: %s", odx_err_name(rc), odx_config_error(cfg));
	odx_config_destroy(cfg);
	assert_non_null(ctx);
	return ctx;
}

/* Registers a kernel with a single host variant. */
static inline odx_kernel *test_host_kernel(odx_context *ctx, const char *name,
					   const odx_param *params, int nparams, odx_host_fn fn)
{
	odx_kernel *k = NULL;
	odx_kernel_variant v = {
		.backend = ODX_BACKEND_HOST,
		.format = ODX_FORMAT_HOST_FN,
		.host_fn = fn,
	};

	assert_ok(odx_kernel_create(ctx, name, params, nparams, &v, 1, &k));
	assert_non_null(k);
	return k;
}

/* A multiplier for the sizes of long tests: $ODX_TEST_SCALE (e.g. 0.1 under TSan), default 1. */
static inline double test_scale(void)
{
	const char *s = getenv("ODX_TEST_SCALE");
	double v;

	if (s == NULL || *s == '\0')
		return 1.0;
	v = strtod(s, NULL);
	return v > 0 ? v : 1.0;
}

/* `n` scaled by test_scale(), at least `min`. */
static inline long test_scaled(long n, long min)
{
	long v = (long)((double)n * test_scale());

	return v < min ? min : v;
}

/* splitmix64: deterministic, seedable, good enough to draw test graphs. */
static inline uint64_t test_rand(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* A value in [0, n). */
static inline unsigned test_rand_below(uint64_t *state, unsigned n)
{
	return (unsigned)(test_rand(state) % n);
}

/* A 64-bit mixing function for checksums and patterns. */
static inline uint64_t test_mix(uint64_t a, uint64_t b)
{
	uint64_t s = a ^ (b * 0x9e3779b97f4a7c15ull);

	return test_rand(&s);
}

/* ---- what the log and ODX_STATS said --------------------------------------------------------
 * test_log_sink (odx_config_set_log(cfg, test_log_sink, NULL)) keeps every message, one a line;
 * ODX threads write it while the test reads, so the readers take its lock. */
typedef struct test_log {
	pthread_mutex_t lock;
	size_t len;
	char text[1 << 16];
} test_log;

static inline test_log *test_log_get(void)
{
	static test_log log = {.lock = PTHREAD_MUTEX_INITIALIZER};

	return &log;
}

static inline void test_log_sink(void *user, odx_log_level level, const char *msg)
{
	test_log *g = test_log_get();
	size_t n = strlen(msg);

	(void)user;
	(void)level;
	pthread_mutex_lock(&g->lock);
	if (g->len + n + 2 < sizeof(g->text)) {
		memcpy(g->text + g->len, msg, n);
		g->len += n;
		g->text[g->len++] = '\n';
		g->text[g->len] = '\0';
	}
	pthread_mutex_unlock(&g->lock);
}

static inline void test_log_reset(void)
{
	test_log *g = test_log_get();

	pthread_mutex_lock(&g->lock);
	g->len = 0;
	g->text[0] = '\0';
	pthread_mutex_unlock(&g->lock);
}

static inline bool test_log_has(const char *text)
{
	test_log *g = test_log_get();
	bool has;

	pthread_mutex_lock(&g->lock);
	has = strstr(g->text, text) != NULL;
	pthread_mutex_unlock(&g->lock);
	return has;
}

/* What was logged, for reading once ODX's threads are gone (after odx_close). */
static inline const char *test_log_text(void)
{
	return test_log_get()->text;
}

/*
 * Like test_open_ctx, with the context's log captured by test_log_sink (emptied once open) and a
 * second list of pairs applied after the first (the test's defaults, then a case's own).
 */
static inline odx_context *test_open_logged(const char *const *kv, const char *const *extra)
{
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	int rc;

	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set_log(cfg, test_log_sink, NULL));
	for (int i = 0; kv && kv[i]; i += 2)
		assert_ok(odx_config_set(cfg, kv[i], kv[i + 1]));
	for (int i = 0; extra && extra[i]; i += 2)
		assert_ok(odx_config_set(cfg, extra[i], extra[i + 1]));
	rc = odx_open(&ctx, cfg);
	if (rc)
		fail_msg("odx_open: %s: %s", odx_err_name(rc), odx_config_error(cfg));
	odx_config_destroy(cfg);
	test_log_reset();
	return ctx;
}

/* The sum of the numbers right before `word` on the logged lines containing `what` (counters of
 * the ODX_STATS lines, read after odx_close). */
static inline unsigned long long test_stat_sum(const char *what, const char *word)
{
	unsigned long long sum = 0;
	const char *line = test_log_text();

	while (line && *line) {
		const char *end = strchr(line, '\n');
		const char *w, *p;
		char buf[1024];
		size_t n = end ? (size_t)(end - line) : strlen(line);

		if (n >= sizeof(buf))
			n = sizeof(buf) - 1;
		memcpy(buf, line, n);
		buf[n] = '\0';
		if (strstr(buf, what) && (w = strstr(buf, word)) != NULL) {
			p = w;
			while (p > buf && p[-1] == ' ')
				p--;
			while (p > buf && p[-1] >= '0' && p[-1] <= '9')
				p--;
			sum += strtoull(p, NULL, 10);
		}
		line = end ? end + 1 : NULL;
	}
	return sum;
}

/* A gate: test_gate_fn, as a host kernel, holds its device until the test opens the gate
 * (atomic_store(test_gate(), 1)); after TEST_TIMEOUT_MS it fails the task instead of hanging. */
static inline atomic_int *test_gate(void)
{
	static atomic_int open;

	return &open;
}

static inline int test_gate_fn(const odx_host_launch *l)
{
	for (int i = 0; i < TEST_TIMEOUT_MS * 10 && !atomic_load(test_gate()); i++)
		usleep(100);
	if (!atomic_load(test_gate())) {
		snprintf(l->error, l->error_size, "the gate was never opened");
		return 1;
	}
	return 0;
}

/* Resident set size of this process in bytes, from /proc/self/status (0 if unknown). */
static inline uint64_t test_rss_bytes(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	uint64_t kib = 0;

	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "VmRSS:", 6) == 0) {
			kib = strtoull(line + 6, NULL, 10);
			break;
		}
	}
	fclose(f);
	return kib * 1024;
}

#endif /* ODX_TESTS_TEST_UTIL_H */
