/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_loader.c - the backend loader against deliberately broken modules (see
 * broken_backend.c) and the host backend built as a module. LOADER_DIR holds the broken ones.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "odx/odx.h"

static odx_context *open_with(const char *backends, int *rc, char *err, size_t n)
{
	odx_context *ctx = NULL;
	odx_config *cfg;

	assert_int_equal(odx_config_create(&cfg), 0);
	assert_int_equal(odx_config_set(cfg, "backends", backends), 0);
	*rc = odx_open(&ctx, cfg);
	snprintf(err, n, "%s", odx_config_error(cfg));
	odx_config_destroy(cfg);
	return ctx;
}

/* Each broken module, asked for by name, is refused with its own reason. */
static void test_named_broken_modules(void **state)
{
	static const struct {
		const char *name, *reason;
	} cases[] = {
		{"badabi", "implements backend ABI 2.0"},
		{"noentry", "exports no odx_backend_entry"},
		{"refuse", "refused backend ABI"},
		{"noops", "lacks the required 'device_open'"},
		{"short", "lacks the required 'mem_alloc'"},
		{"wrongname", "calls itself 'somebody-else'"},
		{"failopen", "the fake device is unplugged"},
		{"nosuch", "no libodx-backend-nosuch.so"},
	};
	char err[1024];
	int rc;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		odx_context *ctx = open_with(cases[i].name, &rc, err, sizeof(err));

		assert_null(ctx);
		assert_int_equal(rc, ODX_EUNAVAIL);
		if (!strstr(err, cases[i].reason))
			fail_msg("backend %s: reason '%s' lacks '%s'", cases[i].name, err,
				 cases[i].reason);
	}
}

/* Under auto the broken modules are listed with their reasons and host still works. */
static void test_auto_skips_broken(void **state)
{
	odx_backend_info info;
	char err[1024];
	int rc, n, seen = 0, host = 0;
	odx_context *ctx = open_with("auto", &rc, err, sizeof(err));

	(void)state;
	assert_int_equal(rc, 0);
	n = odx_backend_count(ctx);
	for (int i = 0; i < n; i++) {
		assert_int_equal(odx_backend_get_info(ctx, i, &info), 0);
		if (strcmp(info.name, "host") == 0) {
			host = info.available;
			continue;
		}
		if (strcmp(info.name, "badabi") == 0 || strcmp(info.name, "failopen") == 0 ||
		    strcmp(info.name, "noentry") == 0) {
			assert_false(info.available);
			assert_true(strlen(info.reason) > 0);
			seen++;
		}
	}
	assert_int_equal(seen, 3);
	assert_true(host);
	assert_true(odx_device_count(ctx) >= 1);
	assert_int_equal(odx_close(ctx), 0);
}

/* A named list opens in the user's order; a broken one anywhere in it is an error. */
static void test_list_with_broken_member(void **state)
{
	char err[1024];
	int rc;
	odx_context *ctx = open_with("host,failopen", &rc, err, sizeof(err));

	(void)state;
	assert_null(ctx);
	assert_int_equal(rc, ODX_EUNAVAIL);
	assert_non_null(strstr(err, "failopen"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_named_broken_modules),
		cmocka_unit_test(test_auto_skips_broken),
		cmocka_unit_test(test_list_with_broken_member),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
