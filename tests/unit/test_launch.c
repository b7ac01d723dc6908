/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_launch.c - what a host variant receives: buffers in signature order, scalars by parameter
 * position, kinds, grid and block (0 read as 1), the device, the tag (63 characters kept), and
 * work-group chunks that cover the grid exactly once.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

#define MAXGROUPS 64

/* Everything the kernel saw, across its calls. */
static struct {
	pthread_mutex_t lock;
	int calls;
	int nparams;
	odx_arg_kind kinds[6];
	bool scalar_null[6];
	int32_t i32;
	int64_t i64;
	float f32;
	double f64;
	size_t sizes[2];
	uint8_t a[24];
	uint32_t grid[3], block[3];
	int device;
	int bad_thread;
	char tag[128];
	int covered[MAXGROUPS];
	bool bad_range;
} seen = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int threads_per_device = 2;

/* probe(R a, i32, W b, i64, f32, f64) */
static int probe_kernel(const odx_host_launch *l)
{
	uint64_t groups = (uint64_t)l->grid[0] * l->grid[1] * l->grid[2];

	pthread_mutex_lock(&seen.lock);
	seen.calls++;
	seen.nparams = l->nparams;
	for (int i = 0; i < l->nparams && i < 6; i++) {
		seen.kinds[i] = l->kinds[i];
		seen.scalar_null[i] = l->scalars[i] == NULL;
	}
	seen.i32 = *(const int32_t *)l->scalars[1];
	seen.i64 = *(const int64_t *)l->scalars[3];
	seen.f32 = *(const float *)l->scalars[4];
	seen.f64 = *(const double *)l->scalars[5];
	seen.sizes[0] = l->buffer_sizes[0];
	seen.sizes[1] = l->buffer_sizes[1];
	memcpy(seen.a, l->buffers[0], sizeof(seen.a));
	memcpy(seen.grid, l->grid, sizeof(seen.grid));
	memcpy(seen.block, l->block, sizeof(seen.block));
	seen.device = l->device;
	if (l->thread < 0 || l->thread >= threads_per_device)
		seen.bad_thread = 1;
	snprintf(seen.tag, sizeof(seen.tag), "%s", l->tag ? l->tag : "(null)");
	if (l->group_count == 0 || l->group_first + l->group_count > groups ||
	    groups > MAXGROUPS)
		seen.bad_range = true;
	else
		for (uint64_t g = l->group_first; g < l->group_first + l->group_count; g++)
			seen.covered[g]++;
	pthread_mutex_unlock(&seen.lock);

	/* W buffer: whole, split by groups so concurrent chunks write disjoint bytes */
	{
		uint8_t *b = l->buffers[1];
		size_t n = l->buffer_sizes[1];

		for (uint64_t g = l->group_first; g < l->group_first + l->group_count; g++)
			for (size_t i = g * n / groups; i < (g + 1) * n / groups; i++)
				b[i] = (uint8_t)(i ^ 0x5a);
	}
	return 0;
}

static const odx_param probe_params[] = {
	{ODX_ARG_BUFFER, ODX_R, "a"}, {ODX_ARG_I32, 0, "i"},  {ODX_ARG_BUFFER, ODX_W, "b"},
	{ODX_ARG_I64, 0, "l"},	      {ODX_ARG_F32, 0, "f"}, {ODX_ARG_F64, 0, "d"},
};

struct fixture {
	odx_context *ctx;
	odx_kernel *probe;
	odx_buffer *a, *b;
};

static int setup(void **state)
{
	static struct fixture f;
	static const char *const kv[] = {
		"host.devices", "2", "host.threads", "2", "host.bind", "false", NULL,
	};
	uint8_t init[24];

	for (size_t i = 0; i < sizeof(init); i++)
		init[i] = (uint8_t)(100 + i);
	f.ctx = test_open_ctx(kv);
	f.probe = test_host_kernel(f.ctx, "probe", probe_params, 6, probe_kernel);
	assert_ok(odx_buffer_create(f.ctx, 24, 0, &f.a));
	assert_ok(odx_buffer_create(f.ctx, 40, 0, &f.b));
	assert_ok(odx_buffer_write(f.a, 0, init, sizeof(init), TEST_TIMEOUT_MS));
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	assert_ok(odx_buffer_destroy(f->a));
	assert_ok(odx_buffer_destroy(f->b));
	assert_ok(odx_close(f->ctx));
	return 0;
}

static void reset_seen(void)
{
	pthread_mutex_lock(&seen.lock);
	seen.calls = 0;
	seen.bad_thread = 0;
	seen.bad_range = false;
	memset(seen.covered, 0, sizeof(seen.covered));
	pthread_mutex_unlock(&seen.lock);
}

static void run_probe(struct fixture *f, const odx_task_opts *opts)
{
	odx_event *ev = NULL;
	int rc;

	reset_seen();
	assert_ok(odx_submit(f->ctx, f->probe,
			     (odx_arg[]){ODX_BUF(f->a, 0), ODX_I32(-7), ODX_BUF(f->b, 0),
					 ODX_I64(-1234567890123ll), ODX_F32(1.5f), ODX_F64(-2.25)},
			     6, opts, &ev));
	rc = odx_event_wait(ev, TEST_TIMEOUT_MS);
	if (rc != 0)
		fail_msg("probe: %s: %s", odx_err_name(rc), odx_event_message(ev));
	odx_event_release(ev);
}

static void expect_b_written(struct fixture *f)
{
	uint8_t got[40];

	assert_ok(odx_buffer_read(f->b, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (size_t i = 0; i < sizeof(got); i++)
		assert_int_equal(got[i], (uint8_t)(i ^ 0x5a));
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_arguments(void **state)
{
	struct fixture *f = *state;
	static const odx_arg_kind kinds[6] = {ODX_ARG_BUFFER, ODX_ARG_I32, ODX_ARG_BUFFER,
					      ODX_ARG_I64,    ODX_ARG_F32, ODX_ARG_F64};

	run_probe(f, &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE,
				      .on_device = 1,
				      .tag = "probe-tag"});
	assert_int_equal(seen.calls, 1);
	assert_int_equal(seen.nparams, 6);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(seen.kinds[i], kinds[i]);
		assert_int_equal(seen.scalar_null[i], kinds[i] == ODX_ARG_BUFFER);
	}
	assert_int_equal(seen.i32, -7);
	assert_true(seen.i64 == -1234567890123ll);
	assert_true(seen.f32 == 1.5f);
	assert_true(seen.f64 == -2.25);
	assert_int_equal(seen.sizes[0], 24);
	assert_int_equal(seen.sizes[1], 40);
	for (size_t i = 0; i < sizeof(seen.a); i++)
		assert_int_equal(seen.a[i], 100 + i);
	assert_int_equal(seen.device, 1);
	assert_string_equal(seen.tag, "probe-tag");
	assert_false(seen.bad_thread);
	/* no grid given: one group */
	for (int d = 0; d < 3; d++) {
		assert_int_equal(seen.grid[d], 1);
		assert_int_equal(seen.block[d], 1);
	}
	assert_int_equal(seen.covered[0], 1);
	expect_b_written(f);

	/* no tag: "" */
	run_probe(f, &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 0});
	assert_string_equal(seen.tag, "");
	assert_int_equal(seen.device, 0);
	run_probe(f, NULL);
	assert_string_equal(seen.tag, "");
	/* the legacy field (d+1), kept for one release, still pins */
	run_probe(f, &(odx_task_opts){.device = 2});
	assert_int_equal(seen.device, 1);
	run_probe(f, &(odx_task_opts){.device = 1});
	assert_int_equal(seen.device, 0);
}

static void test_grid_and_block(void **state)
{
	struct fixture *f = *state;
	static const uint32_t grids[][3] = {{3, 2, 1}, {5, 0, 0}, {0, 7, 1}, {2, 2, 2}, {1, 1, 1}};

	for (size_t t = 0; t < sizeof(grids) / sizeof(grids[0]); t++) {
		odx_task_opts opts = {.grid = {grids[t][0], grids[t][1], grids[t][2]},
				      .block = {4, 0, 2}};
		uint64_t groups = 1;

		run_probe(f, &opts);
		for (int d = 0; d < 3; d++) {
			uint32_t want = grids[t][d] ? grids[t][d] : 1;

			assert_int_equal(seen.grid[d], want);
			groups *= want;
		}
		assert_int_equal(seen.block[0], 4);
		assert_int_equal(seen.block[1], 1);
		assert_int_equal(seen.block[2], 2);
		assert_false(seen.bad_range);
		assert_false(seen.bad_thread);
		/* every group exactly once, in at most one call per thread */
		for (uint64_t g = 0; g < groups; g++) {
			if (seen.covered[g] != 1)
				fail_msg("grid %llu groups: group %llu ran %d times",
					 (unsigned long long)groups, (unsigned long long)g,
					 seen.covered[g]);
		}
		assert_in_range(seen.calls, 1, (groups < 2 ? groups : 2));
		expect_b_written(f);
	}
}

static void test_long_tag_truncated(void **state)
{
	struct fixture *f = *state;
	char tag[101], want[64];

	memset(tag, 'x', 100);
	tag[100] = '\0';
	tag[62] = 'E'; /* the last character kept */
	memcpy(want, tag, 63);
	want[63] = '\0';
	run_probe(f, &(odx_task_opts){.tag = tag});
	assert_string_equal(seen.tag, want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_arguments),
		cmocka_unit_test(test_grid_and_block),
		cmocka_unit_test(test_long_tag_truncated),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
