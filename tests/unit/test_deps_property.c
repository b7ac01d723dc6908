/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_deps_property.c - dependency inference checked as a property over random task graphs
 * (the engine in tests/common/deps_property_engine.h), on host devices: tasks are spread over
 * 1, 2 and 4 host devices, several threads per device (a task may be split into chunks of
 * work-groups) and every built-in policy. The conformance suite runs the same engine on each
 * backend.
 *
 * $ODX_TEST_SCALE shrinks the number of graphs (e.g. 0.1 under ThreadSanitizer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "deps_property_engine.h"
#include "odx/odx.h"
#include "test_util.h"

#define NGRAPHS 300 /* graphs per configuration at scale 1 */

/* ---- one configuration ------------------------------------------------------------------- */

struct prop_config {
	const char *name;
	const char *devices;
	const char *threads;
	const char *policy; /* NULL: default */
	uint64_t seed;
	bool async; /* host.async: asynchronous, in-order compute lanes (tasks launched behind
		     * their unfinished predecessor) */
};

static void run_config(const struct prop_config *cfg)
{
	const char *kv[] = {
		"host.devices",
		cfg->devices,
		"host.threads",
		cfg->threads,
		"host.bind",
		"false",
		"host.async",
		cfg->async ? "true" : "false",
		cfg->policy ? "policy" : NULL,
		cfg->policy,
		NULL,
	};
	dpe_options opt = {
		.name = cfg->name,
		.seed = cfg->seed,
		.graphs = test_scaled(NGRAPHS, 10),
	};
	odx_context *ctx = test_open_ctx(kv);

	assert_int_equal(odx_device_count(ctx), atoi(cfg->devices));
	dpe_run(ctx, &opt);
	assert_ok(odx_close(ctx));
}

/* ---- the configurations ------------------------------------------------------------------ */

static void test_one_device(void **state)
{
	(void)state;
	run_config(&(struct prop_config){"1 device", "1", "1", NULL, 11, false});
}

static void test_two_devices(void **state)
{
	(void)state;
	run_config(&(struct prop_config){"2 devices", "2", "1", NULL, 12, false});
}

static void test_four_devices(void **state)
{
	(void)state;
	run_config(&(struct prop_config){"4 devices", "4", "1", NULL, 13, false});
}

static void test_threads_per_device(void **state)
{
	(void)state;
	/* several threads per device: tasks with many groups run as concurrent chunks */
	run_config(&(struct prop_config){"2 devices x 2 threads", "2", "2", NULL, 14, false});
}

static void test_async_one_device(void **state)
{
	(void)state;
	run_config(&(struct prop_config){"1 asynchronous device", "1", "1", NULL, 21, true});
}

static void test_async_two_devices(void **state)
{
	(void)state;
	run_config(&(struct prop_config){"2 asynchronous devices x 2 threads", "2", "2", NULL, 22,
					 true});
}

static void test_policy_least_loaded(void **state)
{
	(void)state;
	run_config(&(struct prop_config){"least_loaded", "3", "1", "least_loaded", 15, false});
}

static void test_policy_eager(void **state)
{
	(void)state;
	run_config(&(struct prop_config){"eager", "3", "1", "eager", 16, false});
}

static void test_policy_round_robin(void **state)
{
	(void)state;
	run_config(&(struct prop_config){"round_robin", "3", "1", "round_robin", 17, false});
}

static void test_policy_eager_threads(void **state)
{
	(void)state;
	run_config(
		&(struct prop_config){"eager, 2 devices x 2 threads", "2", "2", "eager", 18, false});
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_device),
		cmocka_unit_test(test_two_devices),
		cmocka_unit_test(test_four_devices),
		cmocka_unit_test(test_threads_per_device),
		cmocka_unit_test(test_async_one_device),
		cmocka_unit_test(test_async_two_devices),
		cmocka_unit_test(test_policy_least_loaded),
		cmocka_unit_test(test_policy_eager),
		cmocka_unit_test(test_policy_round_robin),
		cmocka_unit_test(test_policy_eager_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
