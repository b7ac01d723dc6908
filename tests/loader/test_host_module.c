/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_host_module.c - the host backend loaded as a module (libodx-backend-host.so found on
 * ODX_BACKEND_PATH) instead of the built-in copy, running real tasks: the backend ABI end to end.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "odx/odx.h"

static int k_twice(const odx_host_launch *l)
{
	int32_t *x = l->buffers[0];

	for (size_t i = 0; i < l->buffer_sizes[0] / sizeof(*x); i++)
		x[i] *= 2;
	return 0;
}

static void test_tasks_through_module(void **state)
{
	odx_param p = {ODX_ARG_BUFFER, ODX_RW, "x"};
	int32_t data[257], got[257];
	odx_backend_info info;
	odx_context *ctx;
	odx_config *cfg;
	odx_kernel *k;
	odx_buffer *b;

	(void)state;
	assert_int_equal(odx_config_create(&cfg), 0);
	assert_int_equal(odx_config_set(cfg, "backends", "host"), 0);
	assert_int_equal(odx_config_set(cfg, "host.devices", "2"), 0);
	assert_int_equal(odx_open(&ctx, cfg), 0);
	odx_config_destroy(cfg);
	assert_int_equal(odx_backend_get_info(ctx, 0, &info), 0);
	assert_string_equal(info.name, "host");
	assert_true(info.available);
	/* Loaded from the module, not the copy linked into libodx. */
	assert_non_null(strstr(info.origin, "libodx-backend-host.so"));

	for (int i = 0; i < 257; i++)
		data[i] = i;
	assert_int_equal(odx_kernel_create(ctx, "twice", &p, 1,
					   &(odx_kernel_variant){.backend = ODX_BACKEND_HOST,
								 .format = ODX_FORMAT_HOST_FN,
								 .host_fn = k_twice},
					   1, &k),
			 0);
	assert_int_equal(odx_buffer_create(ctx, sizeof(data), 0, &b), 0);
	assert_int_equal(odx_buffer_write(b, 0, data, sizeof(data), 60000), 0);
	for (int d = 0; d < 4; d++)
		assert_int_equal(odx_submit(ctx, k, (odx_arg[]){ODX_BUF(b, 0)}, 1,
					    &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE,
							     .on_device = d % 2},
					    NULL),
				 0);
	assert_int_equal(odx_buffer_read(b, 0, got, sizeof(got), 60000), 0);
	for (int i = 0; i < 257; i++)
		assert_int_equal(got[i], i * 16);
	assert_int_equal(odx_close(ctx), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tasks_through_module),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
