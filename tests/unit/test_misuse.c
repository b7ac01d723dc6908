/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_misuse.c - misuse of the API is refused, never followed (issue 18, item 3): every entry
 * given a destroyed buffer, kernel or released event returns ODX_EINVAL with a message (run under
 * ASan: no freed memory is read); grids and blocks whose counts overflow are refused at
 * submission, a huge legal grid on the host finishes correctly or fails with a reason; a kernel
 * that fills its error text with no NUL gets a truncated message, not an overread.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

static odx_context *open_host(const char *threads)
{
	const char *kv[] = {"host.devices", "1", "host.threads", threads, "host.bind", "false",
			    NULL};

	return test_open_ctx(kv);
}

/* Every buffer entry point refuses `b` (destroyed) with ODX_EINVAL and says so. */
static void assert_buffer_refused(odx_context *ctx, odx_buffer *b, odx_kernel *fill)
{
	uint32_t word = 7;
	odx_arg args[3] = {ODX_BUF(b, ODX_W), ODX_I32(1), ODX_I32(1)};

	assert_rc(odx_buffer_write(b, 0, &word, 4, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_contains(odx_last_error(ctx), "was destroyed");
	assert_rc(odx_buffer_read(b, 0, &word, 4, TEST_TIMEOUT_MS), ODX_EINVAL);
	assert_contains(odx_last_error(ctx), "odx_buffer_read");
	assert_int_equal(odx_buffer_size(b), 0);
	assert_rc(odx_buffer_prefetch(b, 0, ODX_PREFETCH_NOW), ODX_EINVAL);
	assert_rc(odx_buffer_wont_use(b), ODX_EINVAL);
	assert_rc(odx_buffer_set_label(b, "x"), ODX_EINVAL);
	assert_rc(odx_buffer_set_owner(b, 0), ODX_EINVAL);
	assert_rc(odx_buffer_owner(b), ODX_EINVAL);
	assert_rc(odx_submit(ctx, fill, args, 3, NULL, NULL), ODX_EINVAL);
	assert_contains(odx_last_error(ctx), "was destroyed");
	assert_rc(odx_buffer_destroy(b), ODX_EINVAL);
	assert_contains(odx_last_error(ctx), "already destroyed");
}

static void test_buffer_destroyed_idle(void **state)
{
	odx_context *ctx = open_host("1");
	odx_kernel *fill = NULL;
	odx_buffer *b[100];

	(void)state;
	assert_ok(odx_kernel_builtin(ctx, "fill_u32", &fill));
	for (int i = 0; i < 100; i++) {
		assert_ok(odx_buffer_create(ctx, 64, 0, &b[i]));
		assert_ok(odx_buffer_destroy(b[i]));
	}
	/* The destructions have run: the structs are released (quarantined), not live. */
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	for (int i = 0; i < 100; i++)
		assert_buffer_refused(ctx, b[i], fill);
	assert_ok(odx_close(ctx));
}

/* A host kernel that holds its device until `gate` opens (bounded: 60 s). */
static atomic_int gate;

static int wait_gate(const odx_host_launch *l)
{
	struct timespec ms = {0, 1000000};

	(void)l;
	for (int i = 0; i < 60000 && !atomic_load(&gate); i++)
		nanosleep(&ms, NULL);
	return 0;
}

static void test_buffer_destroyed_pending(void **state)
{
	odx_context *ctx = open_host("1");
	odx_param p = {.kind = ODX_ARG_BUFFER, .access = ODX_RW, .name = "buf"};
	odx_kernel *k = test_host_kernel(ctx, "wait_gate", &p, 1, wait_gate);
	odx_kernel *fill = NULL;
	odx_buffer *b = NULL;
	odx_arg a;

	(void)state;
	atomic_store(&gate, 0);
	assert_ok(odx_kernel_builtin(ctx, "fill_u32", &fill));
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	a = ODX_BUF(b, ODX_RW);
	assert_ok(odx_submit(ctx, k, &a, 1, NULL, NULL));
	/* Destroyed while its task is pending: the release is deferred, the handle dead now. */
	assert_ok(odx_buffer_destroy(b));
	assert_buffer_refused(ctx, b, fill);
	atomic_store(&gate, 1);
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_buffer_refused(ctx, b, fill);
	assert_ok(odx_close(ctx));
}

/* Many more buffers than the quarantine holds: structs are recycled, memory stays bounded. */
static void test_buffer_churn(void **state)
{
	odx_context *ctx = open_host("1");
	long n = test_scaled(20000, 5000);
	uint32_t v = 0;

	(void)state;
	for (long i = 0; i < n; i++) {
		odx_buffer *b = NULL;
		uint32_t w = (uint32_t)i;

		assert_ok(odx_buffer_create(ctx, 4, 0, &b));
		assert_ok(odx_buffer_write(b, 0, &w, 4, TEST_TIMEOUT_MS));
		assert_ok(odx_buffer_read(b, 0, &v, 4, TEST_TIMEOUT_MS));
		assert_int_equal(v, (uint32_t)i);
		assert_ok(odx_buffer_destroy(b));
		if (i % 1000 == 999)
			assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	}
	assert_ok(odx_close(ctx));
}

static int noop(const odx_host_launch *l)
{
	(void)l;
	return 0;
}

/* Labels: NULL refused; long ones cut; relabelling while tasks use the buffer keeps every old
 * label alive until the buffer goes (ASan's leak check sees them freed then). */
static void test_buffer_label(void **state)
{
	odx_context *ctx = open_host("1");
	odx_kernel *fill = NULL;
	odx_buffer *b;
	char longer[3 * ODX_LABEL_MAX];
	odx_task_opts o = {.grid = {1, 1, 1}, .block = {16, 1, 1}};

	(void)state;
	assert_ok(odx_kernel_builtin(ctx, "fill_u32", &fill));
	assert_ok(odx_buffer_create(ctx, 64, 0, &b));
	assert_rc(odx_buffer_set_label(b, NULL), ODX_EINVAL);
	memset(longer, 'x', sizeof(longer) - 1);
	longer[sizeof(longer) - 1] = '\0';
	assert_ok(odx_buffer_set_label(b, longer));
	for (int i = 0; i < 200; i++) {
		char name[32];

		snprintf(name, sizeof(name), "tile %d", i);
		assert_ok(odx_buffer_set_label(b, name));
		assert_ok(odx_submit(ctx, fill,
				     (odx_arg[]){ODX_BUF(b, ODX_W), ODX_I32(i), ODX_I32(16)}, 3, &o,
				     NULL));
	}
	assert_ok(odx_buffer_destroy(b));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	odx_close(ctx);
}

static void test_kernel_destroyed(void **state)
{
	odx_context *ctx = open_host("1");
	odx_kernel *k = test_host_kernel(ctx, "noop", NULL, 0, noop);
	odx_event *ev = NULL;

	(void)state;
	assert_ok(odx_submit(ctx, k, NULL, 0, NULL, &ev));
	assert_ok(odx_kernel_destroy(k));
	assert_rc(odx_submit(ctx, k, NULL, 0, NULL, NULL), ODX_EINVAL);
	assert_contains(odx_last_error(ctx), "was destroyed");
	assert_rc(odx_kernel_destroy(k), ODX_EINVAL);
	assert_contains(odx_last_error(ctx), "destroyed twice");
	/* The task submitted before still ran. */
	assert_ok(odx_event_wait(ev, TEST_TIMEOUT_MS));
	odx_event_release(ev);
	assert_ok(odx_close(ctx));
}

static void test_event_released(void **state)
{
	odx_context *ctx = open_host("1");
	odx_kernel *k = test_host_kernel(ctx, "noop", NULL, 0, noop);
	odx_event *ev[50];

	(void)state;
	for (int i = 0; i < 50; i++) {
		assert_ok(odx_submit(ctx, k, NULL, 0, NULL, &ev[i]));
		assert_ok(odx_event_wait(ev[i], TEST_TIMEOUT_MS));
		odx_event_release(ev[i]);
	}
	/* More tasks: a released event's task is not reused for them. */
	for (int i = 0; i < 1000; i++)
		assert_ok(odx_submit(ctx, k, NULL, 0, NULL, NULL));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	for (int i = 0; i < 50; i++) {
		assert_rc(odx_event_query(ev[i]), ODX_EINVAL);
		assert_contains(odx_last_error(ctx), "released");
		assert_rc(odx_event_wait(ev[i], 0), ODX_EINVAL);
		assert_string_equal(odx_event_message(ev[i]), "");
		odx_event_release(ev[i]); /* a second release is refused, not a second drop */
		assert_contains(odx_last_error(ctx), "already released");
	}
	assert_ok(odx_close(ctx));
}

/* fill_u32 over `n` words with the given grid and block: the submission's status. */
static int fill(odx_context *ctx, odx_kernel *k, odx_buffer *b, int n, const uint32_t grid[3],
		const uint32_t block[3], odx_event **ev)
{
	odx_arg args[3] = {ODX_BUF(b, ODX_W), ODX_I32(0x5a5a), ODX_I32(n)};
	odx_task_opts o = {0};

	memcpy(o.grid, grid, sizeof(o.grid));
	memcpy(o.block, block, sizeof(o.block));
	return odx_submit(ctx, k, args, 3, &o, ev);
}

static void test_grid_overflow(void **state)
{
	static const struct {
		uint32_t grid[3], block[3];
	} bad[] = {
		{{0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu, 0xffffffffu}},
		{{65536, 1, 1}, {65536, 1, 1}},          /* 2^32 work-items in x */
		{{65537, 1, 1}, {65536, 1, 1}},          /* just over 2^32 */
		{{1u << 16, 1, 1}, {1u << 15, 1, 1}},    /* 2^31: one over what an int numbers */
		{{0xffffffffu, 0xffffffffu, 2}, {1, 1, 1}}, /* groups just over 2^64 */
		{{0xffffffffu, 0xffffffffu, 1}, {2, 1, 1}}, /* work-items just over 2^64 */
		{{1, 1, 1}, {0xffffffffu, 0xffffffffu, 2}}, /* one block just over 2^64 */
	};
	odx_context *ctx = open_host("2");
	odx_kernel *k = NULL, *user = test_host_kernel(ctx, "noop", NULL, 0, noop);
	odx_buffer *b = NULL;
	odx_task_opts o = {0};
	odx_event *ev = NULL;

	(void)state;
	assert_ok(odx_kernel_builtin(ctx, "fill_u32", &k));
	assert_ok(odx_buffer_create(ctx, 4096, 0, &b));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_rc(fill(ctx, k, b, 16, bad[i].grid, bad[i].block, NULL), ODX_EINVAL);
		assert_contains(odx_last_error(ctx), "odx_submit");
	}
	/* A user kernel walks its own groups: only counts that overflow 64 bits are refused ... */
	for (size_t i = 4; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memcpy(o.grid, bad[i].grid, sizeof(o.grid));
		memcpy(o.block, bad[i].block, sizeof(o.block));
		assert_rc(odx_submit(ctx, user, NULL, 0, &o, NULL), ODX_EINVAL);
		assert_contains(odx_last_error(ctx), "overflows 64 bits");
	}
	/* ... and a group count just under 2^64 reaches it, in chunks that add up. */
	o = (odx_task_opts){.grid = {0xffffffffu, 0xffffffffu, 1}};
	assert_ok(odx_submit(ctx, user, NULL, 0, &o, &ev));
	assert_ok(odx_event_wait(ev, TEST_TIMEOUT_MS));
	odx_event_release(ev);
	assert_ok(odx_close(ctx));
}

static void test_large_legal_grid(void **state)
{
	odx_context *ctx = open_host("2");
	odx_kernel *k = NULL;
	odx_buffer *b = NULL, *big = NULL;
	odx_event *ev = NULL;
	uint32_t out[1000];
	/* A mistaken but legal grid: 65536 x 65536 groups for 1000 words. Groups past the data
	 * are skipped on the host, so it ends soon, and correctly. */
	static const uint32_t grid[3] = {65536, 65536, 1}, block[3] = {1, 1, 1};
	static const uint32_t grid2[3] = {1u << 20, 64, 1}, block2[3] = {256, 1, 1};
	/* Over 2^32 work-items that would touch data: refused by the host variant, not run. */
	static const uint32_t grid3[3] = {65535, 65535, 1}, block3[3] = {256, 1, 1};

	(void)state;
	assert_ok(odx_kernel_builtin(ctx, "fill_u32", &k));
	assert_ok(odx_buffer_create(ctx, sizeof(out), 0, &b));
	assert_ok(fill(ctx, k, b, 1000, grid, block, NULL));
	assert_ok(odx_buffer_read(b, 0, out, sizeof(out), TEST_TIMEOUT_MS));
	for (int i = 0; i < 1000; i++)
		assert_int_equal(out[i], 0x5a5a);
	assert_ok(fill(ctx, k, b, 1000, grid2, block2, NULL));
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_create(ctx, 4u << 20, 0, &big));
	assert_ok(fill(ctx, k, big, 1 << 20, grid3, block3, &ev));
	assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_EKERNEL);
	assert_contains(odx_event_message(ev), "more than 2^32 work-items");
	odx_event_release(ev);
	odx_wait_all(ctx, TEST_TIMEOUT_MS);
	assert_ok(odx_close(ctx));
}

/* Fills its error text to the last byte, with no NUL, and fails. */
static int no_nul(const odx_host_launch *l)
{
	memset(l->error, 'x', l->error_size);
	return 3;
}

static void run_no_nul(const char *threads, uint32_t groups)
{
	odx_context *ctx = open_host(threads);
	odx_kernel *k = test_host_kernel(ctx, "no_nul", NULL, 0, no_nul);
	odx_task_opts o = {.grid = {groups, 1, 1}};
	odx_event *ev = NULL;
	const char *msg;

	assert_ok(odx_submit(ctx, k, NULL, 0, &o, &ev));
	assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_EKERNEL);
	msg = odx_event_message(ev);
	assert_contains(msg, "xxxxxxxx");
	assert_true(strlen(msg) < 4096);
	odx_event_release(ev);
	odx_wait_all(ctx, TEST_TIMEOUT_MS);
	assert_ok(odx_close(ctx));
}

static void test_error_text_without_nul(void **state)
{
	(void)state;
	run_no_nul("1", 1); /* on the worker thread */
	run_no_nul("2", 8); /* on the device's helper threads too */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buffer_destroyed_idle),
		cmocka_unit_test(test_buffer_destroyed_pending),
		cmocka_unit_test(test_buffer_churn),
		cmocka_unit_test(test_buffer_label),
		cmocka_unit_test(test_kernel_destroyed),
		cmocka_unit_test(test_event_released),
		cmocka_unit_test(test_grid_overflow),
		cmocka_unit_test(test_large_legal_grid),
		cmocka_unit_test(test_error_text_without_nul),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
