/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_opencl_unavailable.c - the OpenCL backend says clearly why it cannot be used: only CPU
 * devices without opencl.allow_cpu, or no OpenCL platform at all. Each case runs in its own
 * process (the ICD loader reads its environment once): argv[1] names it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

/* Opens with backends = opencl and the given allow_cpu; returns the code and the reason. */
static int open_opencl(const char *allow_cpu, char *reason, size_t size)
{
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	int rc;

	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "backends", "opencl"));
	assert_ok(odx_config_set(cfg, "opencl.allow_cpu", allow_cpu));
	rc = odx_open(&ctx, cfg);
	snprintf(reason, size, "%s", odx_config_error(cfg));
	odx_config_destroy(cfg);
	if (rc == 0)
		odx_close(ctx);
	return rc;
}

/* PoCL has only CPU devices: refused unless allowed, with the key to set. */
static void test_cpu_not_allowed(void **state)
{
	char reason[1024];

	(void)state;
	assert_rc(open_opencl("false", reason, sizeof(reason)), ODX_EUNAVAIL);
	assert_contains(reason, "opencl.allow_cpu");
	assert_contains(reason, "only CPU OpenCL devices");
	assert_ok(open_opencl("true", reason, sizeof(reason)));
}

/* OCL_ICD_VENDORS points at an empty directory: the loader finds no platform. */
static void test_no_platform(void **state)
{
	char reason[1024];

	(void)state;
	assert_rc(open_opencl("true", reason, sizeof(reason)), ODX_EUNAVAIL);
	assert_contains(reason, "no OpenCL platform");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest cpu[] = {cmocka_unit_test(test_cpu_not_allowed)};
	const struct CMUnitTest none[] = {cmocka_unit_test(test_no_platform)};

	if (argc > 1 && strcmp(argv[1], "no_platform") == 0)
		return cmocka_run_group_tests(none, NULL, NULL);
	return cmocka_run_group_tests(cpu, NULL, NULL);
}
