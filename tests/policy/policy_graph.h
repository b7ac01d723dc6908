/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_graph.h - what the end-to-end policy tests share (test_policy_bad_input,
 * test_policy_hostile): a policy file written to a scratch directory, a context of two host
 * devices running it with the log captured, and a small task graph whose outputs are exact.
 * Each test program includes it once; `policy_log_hook`, when set (only while no context is
 * open), sees every log line.
 */
#ifndef ODX_TESTS_POLICY_GRAPH_H
#define ODX_TESTS_POLICY_GRAPH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "odx/odx.h"
#include "test_util.h"

#define WORDS 64
#define CHAIN 12
#define SIDE 8

static char dir[256];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char log_text[1 << 16];
static _Atomic int ran_on[2];

static void (*policy_log_hook)(const char *msg);

static void capture_log(void *user, odx_log_level level, const char *msg)
{
	size_t n;

	(void)user;
	(void)level;
	pthread_mutex_lock(&log_lock);
	n = strlen(log_text);
	snprintf(log_text + n, sizeof(log_text) - n, "%s\n", msg);
	pthread_mutex_unlock(&log_lock);
	if (policy_log_hook)
		policy_log_hook(msg);
}

/* inc(RW a): adds 1 to every word; counts the device it ran on. */
static int inc_kernel(const odx_host_launch *l)
{
	uint32_t *a = l->buffers[0];

	for (size_t i = 0; i < l->buffer_sizes[0] / 4; i++)
		a[i]++;
	if (l->device >= 0 && l->device < 2)
		atomic_fetch_add(&ran_on[l->device], 1);
	return 0;
}

static const odx_param inc_params[] = {{ODX_ARG_BUFFER, ODX_RW, "a"}};

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

/* A context of two host devices running `policy` with a call budget of `budget_us`. Work stealing
 * is off: the tests check where the policy placed each task, and an idle device sharing the
 * memory would otherwise take some (sched.steal, a default for users). */
static odx_context *open_with(const char *policy, const char *budget_us, odx_config **cfgp)
{
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	int rc;

	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "host.devices", "2"));
	assert_ok(odx_config_set(cfg, "host.bind", "false"));
	assert_ok(odx_config_set(cfg, "sched.steal", "false"));
	assert_ok(odx_config_set(cfg, "policy", policy));
	assert_ok(odx_config_set(cfg, "policy.budget", budget_us));
	assert_ok(odx_config_set(cfg, "log", "warn"));
	assert_ok(odx_config_set_log(cfg, capture_log, NULL));
	pthread_mutex_lock(&log_lock);
	log_text[0] = '\0';
	pthread_mutex_unlock(&log_lock);
	rc = odx_open(&ctx, cfg);
	if (rc)
		fail_msg("odx_open(policy = %s): %s: %s", policy, odx_err_name(rc),
			 odx_config_error(cfg));
	*cfgp = cfg;
	return ctx;
}

/* A chain of CHAIN increments on one buffer and SIDE independent ones: outputs are exact. */
static void run_graph(odx_context *ctx)
{
	odx_kernel *k = test_host_kernel(ctx, "inc", inc_params, 1, inc_kernel);
	odx_buffer *chain, *side[SIDE];
	uint32_t got[WORDS];
	int i, j;

	assert_ok(odx_buffer_create(ctx, sizeof(got), 0, &chain));
	for (j = 0; j < SIDE; j++)
		assert_ok(odx_buffer_create(ctx, sizeof(got), 0, &side[j]));
	for (i = 0; i < CHAIN; i++) {
		odx_arg arg = ODX_BUF(chain, ODX_RW);

		assert_ok(odx_submit(ctx, k, &arg, 1, NULL, NULL));
		if (i < SIDE) {
			arg = ODX_BUF(side[i], ODX_RW);
			assert_ok(odx_submit(ctx, k, &arg, 1, NULL, NULL));
		}
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(chain, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (i = 0; i < WORDS; i++)
		assert_int_equal(got[i], CHAIN);
	for (j = 0; j < SIDE; j++) {
		assert_ok(odx_buffer_read(side[j], 0, got, sizeof(got), TEST_TIMEOUT_MS));
		for (i = 0; i < WORDS; i++)
			assert_int_equal(got[i], 1);
		assert_ok(odx_buffer_destroy(side[j]));
	}
	assert_ok(odx_buffer_destroy(chain));
}

#endif
