/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_onecall.c - one-call host variants (ODX_FORMAT_HOST_CALL): called once per task with the
 * whole grid and the device's thread count; their fork-join helper runs every index exactly once
 * on up to that many threads at once (an atomic maximum of concurrent runners, and a rendezvous
 * that needs them all, bounded by a timeout: no timing); results with 1 and 2 host devices and
 * host.threads 1 and 2; the helper in order where the device's threads are taken; failures;
 * registration errors; the kernel's thread widened to the device's cores; and, when
 * ODX_TEST_ONECALL_OPENCL is set (meson does where the OpenCL backend is built), one kernel with
 * a one-call host variant and an OpenCL variant run on each kind of device.
 */
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

#define MAXDEV 4
#define N 257 /* fork-join indices per task: more than threads, not a multiple of them */

/* What one device's one-call runs saw. */
typedef struct dev_seen {
	atomic_int calls;       /* kernel calls */
	atomic_int threads;     /* l->threads, last seen */
	atomic_int bad;         /* a check inside the kernel failed (see the bits below) */
	atomic_int running;     /* fork-join runners inside fn now */
	atomic_int max_running; /* the most at once */
	atomic_uint thread_mask; /* fork-join thread indices seen in this run */
} dev_seen;

static dev_seen seen[MAXDEV];
static atomic_int hits[N];

enum { BAD_RANGE = 1, BAD_THREAD = 2, BAD_RUN = 4, BAD_RENDEZVOUS = 8, BAD_STATE = 16 };

typedef struct fork_arg {
	const odx_host_launch *l;
	dev_seen *s;
	uint64_t *out;
	uint64_t seed;
} fork_arg;

static void atomic_max(atomic_int *m, int v)
{
	int cur = atomic_load(m);

	while (v > cur && !atomic_compare_exchange_weak(m, &cur, v))
		;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* One index: out[i] = mix(seed, i). Index 0 waits (bounded) until every thread of the device has
 * taken an index: passes only if the helper really runs the indices on `threads` threads. */
static int fork_fn(void *arg, uint64_t i, int thread)
{
	fork_arg *a = arg;
	dev_seen *s = a->s;
	int now = atomic_fetch_add(&s->running, 1) + 1;

	atomic_max(&s->max_running, now);
	if (thread < 0 || thread >= a->l->threads)
		atomic_fetch_or(&s->bad, BAD_THREAD);
	else
		atomic_fetch_or(&s->thread_mask, 1u << thread);
	if (i >= N)
		atomic_fetch_or(&s->bad, BAD_RANGE);
	else
		atomic_fetch_add(&hits[i], 1);
	if (i == 0) {
		unsigned want = (1u << a->l->threads) - 1;
		uint64_t t0 = now_ms();

		while ((atomic_load(&s->thread_mask) & want) != want) {
			if (now_ms() - t0 > TEST_TIMEOUT_MS) {
				atomic_fetch_or(&s->bad, BAD_RENDEZVOUS);
				break;
			}
			sched_yield();
		}
	}
	a->out[i] = test_mix(a->seed, i);
	atomic_fetch_sub(&s->running, 1);
	return 0;
}

/* onecall(W out u64[N], i64 seed) */
static int onecall_kernel(const odx_host_launch *l)
{
	dev_seen *s = &seen[l->device];
	uint64_t groups = (uint64_t)l->grid[0] * l->grid[1] * l->grid[2];
	fork_arg a = {.l = l, .s = s, .out = l->buffers[0], .seed = *(const int64_t *)l->scalars[1]};
	int rc;

	atomic_fetch_add(&s->calls, 1);
	atomic_store(&s->threads, l->threads);
	if (l->group_first != 0 || l->group_count != groups || l->thread != 0)
		atomic_fetch_or(&s->bad, BAD_RANGE);
	if (l->threads < 1 || l->threads > 32 || !l->run || l->buffer_sizes[0] < N * 8)
		atomic_fetch_or(&s->bad, BAD_STATE);
	atomic_store(&s->thread_mask, 0);
	rc = l->run(l, N, fork_fn, &a);
	if (rc != 0)
		atomic_fetch_or(&s->bad, BAD_RUN);
	return rc;
}

static const odx_param onecall_params[] = {
	{ODX_ARG_BUFFER, ODX_W, "out"},
	{ODX_ARG_I64, 0, "seed"},
};

static odx_kernel *onecall_create(odx_context *ctx)
{
	odx_kernel_variant v = {
		.backend = ODX_BACKEND_HOST,
		.format = ODX_FORMAT_HOST_CALL,
		.host_fn = onecall_kernel,
	};
	odx_kernel *k = NULL;

	assert_ok(odx_kernel_create(ctx, "onecall", onecall_params, 2, &v, 1, &k));
	return k;
}

static void reset_seen(void)
{
	memset(seen, 0, sizeof(seen));
	for (int i = 0; i < N; i++)
		atomic_store(&hits[i], 0);
}

/* Runs one task on device `dev` with `seed` and checks what it computed and saw. */
static void run_on(odx_context *ctx, odx_kernel *k, int dev, int threads, uint64_t seed)
{
	odx_buffer *buf = NULL;
	uint64_t out[N];
	odx_arg args[2];
	odx_task_opts opts = {.flags = ODX_SUBMIT_ON_DEVICE, .on_device = dev, .grid = {3, 2, 1}};
	odx_event *ev = NULL;
	dev_seen *s = &seen[dev];

	reset_seen();
	assert_ok(odx_buffer_create(ctx, sizeof(out), 0, &buf));
	args[0] = ODX_BUF(buf, ODX_W);
	args[1] = ODX_I64((int64_t)seed);
	assert_ok(odx_submit(ctx, k, args, 2, &opts, &ev));
	assert_ok(odx_event_wait(ev, TEST_TIMEOUT_MS));
	odx_event_release(ev);
	assert_ok(odx_buffer_read(buf, 0, out, sizeof(out), TEST_TIMEOUT_MS));
	for (int i = 0; i < N; i++) {
		if (out[i] != test_mix(seed, (uint64_t)i))
			fail_msg("device %d: out[%d] wrong", dev, i);
		if (atomic_load(&hits[i]) != 1)
			fail_msg("device %d: index %d ran %d times", dev, i, atomic_load(&hits[i]));
	}
	assert_int_equal(atomic_load(&s->calls), 1);
	assert_int_equal(atomic_load(&s->bad), 0);
	assert_int_equal(atomic_load(&s->threads), threads);
	/* At most `threads` at once, and (the rendezvous) all of them. */
	assert_int_equal(atomic_load(&s->max_running), threads);
	assert_int_equal(atomic_load(&s->thread_mask), (1u << threads) - 1);
	assert_ok(odx_buffer_destroy(buf));
}

static void run_config(const char *devices, const char *threads)
{
	const char *kv[] = {"backends", "host",   "host.devices", devices, "host.threads",
			    threads,    "host.bind", "false",       NULL};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *k = onecall_create(ctx);
	int ndev = odx_device_count(ctx), nthreads = atoi(threads);

	assert_int_equal(ndev, atoi(devices));
	for (int round = 0; round < 3; round++)
		for (int d = 0; d < ndev; d++)
			run_on(ctx, k, d, nthreads, 1000 * (uint64_t)round + (uint64_t)d);
	assert_ok(odx_close(ctx));
}

static void test_1dev_1thread(void **state)
{
	(void)state;
	run_config("1", "1");
}

static void test_1dev_2threads(void **state)
{
	(void)state;
	run_config("1", "2");
}

static void test_2dev_1thread(void **state)
{
	(void)state;
	run_config("2", "1");
}

static void test_2dev_2threads(void **state)
{
	(void)state;
	run_config("2", "2");
}

/* Without host.threads a host device has the process's cores (one device): a one-call kernel
 * gets all of them, not one. */
static void test_default_threads(void **state)
{
	const char *kv[] = {"backends", "host", "host.bind", "false", NULL};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *k = onecall_create(ctx);
	odx_device_info info;
	cpu_set_t mine;

	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
	assert_ok(odx_device_get_info(ctx, 0, &info));
	assert_int_equal(info.threads, CPU_COUNT(&mine));
	if (info.threads < 32) /* the rendezvous mask holds 31 threads */
		run_on(ctx, k, 0, info.threads, 5);
	assert_ok(odx_close(ctx));
}

static atomic_int warnings;

static void count_log(void *user, odx_log_level level, const char *msg)
{
	(void)user;
	if (level == ODX_LOG_WARN && strstr(msg, "one-call kernel runs on 1 thread"))
		atomic_fetch_add(&warnings, 1);
}

/* host.threads = 1 where the device could have more cores: the one-call kernel runs, on one
 * thread, and the log says so once (not per task). */
static void test_one_thread_warns(void **state)
{
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	odx_kernel *k;
	cpu_set_t mine;

	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "backends", "host"));
	assert_ok(odx_config_set(cfg, "host.threads", "1"));
	assert_ok(odx_config_set(cfg, "host.bind", "false"));
	assert_ok(odx_config_set(cfg, "log", "warn"));
	assert_ok(odx_config_set_log(cfg, count_log, NULL));
	assert_ok(odx_open(&ctx, cfg));
	odx_config_destroy(cfg);
	k = onecall_create(ctx);
	atomic_store(&warnings, 0);
	run_on(ctx, k, 0, 1, 1);
	run_on(ctx, k, 0, 1, 2);
	assert_int_equal(atomic_load(&warnings), CPU_COUNT(&mine) > 1 ? 1 : 0);
	assert_ok(odx_close(ctx));
}

/* Many one-call tasks at once on two devices, each writing its own buffer: results are right
 * whatever the devices interleave. */
static void test_many_tasks(void **state)
{
	const char *kv[] = {"backends",     "host", "host.devices", "2", "host.threads", "2",
			    "host.bind", "false", NULL};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *k = onecall_create(ctx);
	enum { TASKS = 16 };
	odx_buffer *bufs[TASKS];
	uint64_t out[N];

	(void)state;
	reset_seen();
	for (int t = 0; t < TASKS; t++) {
		odx_arg args[2];

		assert_ok(odx_buffer_create(ctx, sizeof(out), 0, &bufs[t]));
		args[0] = ODX_BUF(bufs[t], ODX_W);
		args[1] = ODX_I64(77 + t);
		assert_ok(odx_submit(ctx, k, args, 2, NULL, NULL));
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	for (int t = 0; t < TASKS; t++) {
		assert_ok(odx_buffer_read(bufs[t], 0, out, sizeof(out), TEST_TIMEOUT_MS));
		for (int i = 0; i < N; i++)
			if (out[i] != test_mix(77 + (uint64_t)t, (uint64_t)i))
				fail_msg("task %d: out[%d] wrong", t, i);
	}
	assert_int_equal(atomic_load(&seen[0].calls) + atomic_load(&seen[1].calls), TASKS);
	for (int i = 0; i < N; i++)
		assert_int_equal(atomic_load(&hits[i]), TASKS);
	assert_int_equal(atomic_load(&seen[0].bad) | atomic_load(&seen[1].bad), 0);
	assert_ok(odx_close(ctx));
}

/* ---- the helper in order, failures ----------------------------------------------------------- */

static atomic_int wg_bad, wg_calls;

typedef struct order_arg {
	int thread;     /* the caller's thread index */
	uint64_t next;  /* the index expected next */
	int fail_at;    /* return 7 at this index (-1: never) */
	atomic_int ran; /* indices run */
} order_arg;

static int order_fn(void *arg, uint64_t i, int thread)
{
	order_arg *a = arg;

	if (i != a->next++ || thread != a->thread)
		atomic_store(&wg_bad, 1);
	atomic_fetch_add(&a->ran, 1);
	return (int64_t)i == a->fail_at ? 7 : 0;
}

/* A work-group variant split over two threads: each chunk's run goes in order on its thread. */
static int wg_kernel(const odx_host_launch *l)
{
	order_arg a = {.thread = l->thread, .fail_at = -1};

	atomic_fetch_add(&wg_calls, 1);
	if (l->threads != 2 || l->run(l, 5, order_fn, &a) != 0 || atomic_load(&a.ran) != 5)
		atomic_store(&wg_bad, 1);
	return 0;
}

/* Inside a fork-join index, a nested run goes in order on the same thread index. */
static int nested_fn(void *arg, uint64_t i, int thread)
{
	const odx_host_launch *l = arg;
	order_arg a = {.thread = thread, .fail_at = -1};

	(void)i;
	if (l->run(l, 3, order_fn, &a) != 0 || atomic_load(&a.ran) != 3)
		atomic_store(&wg_bad, 1);
	return 0;
}

static int nested_kernel(const odx_host_launch *l)
{
	atomic_fetch_add(&wg_calls, 1);
	return l->run(l, 8, nested_fn, (void *)l);
}

/* A fork-join run whose index 5 fails: the run returns 7, the kernel passes it on. */
static int failing_fn(void *arg, uint64_t i, int thread)
{
	(void)arg;
	(void)thread;
	return i == 5 ? 7 : 0;
}

static int failing_kernel(const odx_host_launch *l)
{
	int rc = l->run(l, 64, failing_fn, NULL);

	snprintf(l->error, l->error_size, "run returned %d", rc);
	return rc;
}

static void submit_wait(odx_context *ctx, odx_kernel *k, uint32_t groups, int want)
{
	odx_task_opts opts = {.grid = {groups}};
	odx_event *ev = NULL;

	assert_ok(odx_submit(ctx, k, NULL, 0, &opts, &ev));
	assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), want);
	odx_event_release(ev);
}

static void test_run_in_order(void **state)
{
	const char *kv[] = {"host.threads", "2", "host.bind", "false", NULL};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *wg = test_host_kernel(ctx, "wg", NULL, 0, wg_kernel);
	odx_kernel_variant nv = {.backend = ODX_BACKEND_HOST,
				 .format = ODX_FORMAT_HOST_CALL,
				 .host_fn = nested_kernel};
	odx_kernel_variant fv = nv;
	odx_kernel *nested = NULL, *failing = NULL;

	(void)state;
	fv.host_fn = failing_kernel;
	assert_ok(odx_kernel_create(ctx, "nested", NULL, 0, &nv, 1, &nested));
	assert_ok(odx_kernel_create(ctx, "failing", NULL, 0, &fv, 1, &failing));
	atomic_store(&wg_bad, 0);
	atomic_store(&wg_calls, 0);
	submit_wait(ctx, wg, 4, 0);
	assert_int_equal(atomic_load(&wg_calls), 2); /* two chunks: the launch was split */
	submit_wait(ctx, nested, 1, 0);
	assert_int_equal(atomic_load(&wg_calls), 3);
	assert_int_equal(atomic_load(&wg_bad), 0);
	submit_wait(ctx, failing, 1, ODX_EKERNEL);
	assert_contains(odx_last_error(ctx), "run returned 7");
	assert_ok(odx_close(ctx));
}

/* One thread: the helper runs in order on the kernel's thread. */
static void test_run_one_thread(void **state)
{
	const char *kv[] = {"host.threads", "1", "host.bind", "false", NULL};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel_variant v = {.backend = ODX_BACKEND_HOST,
				.format = ODX_FORMAT_HOST_CALL,
				.host_fn = nested_kernel};
	odx_kernel *k = NULL;

	(void)state;
	atomic_store(&wg_bad, 0);
	assert_ok(odx_kernel_create(ctx, "nested1", NULL, 0, &v, 1, &k));
	submit_wait(ctx, k, 1, 0);
	assert_int_equal(atomic_load(&wg_bad), 0);
	assert_ok(odx_close(ctx));
}

static void test_create_errors(void **state)
{
	odx_context *ctx = test_open_ctx(NULL);
	odx_kernel_variant v = {.backend = ODX_BACKEND_OPENCL,
				.format = ODX_FORMAT_HOST_CALL,
				.host_fn = onecall_kernel};
	odx_kernel *k = NULL;

	(void)state;
	assert_rc(odx_kernel_create(ctx, "bad", onecall_params, 2, &v, 1, &k), ODX_EINVAL);
	assert_contains(odx_last_error(ctx), "one-call");
	v.backend = ODX_BACKEND_HOST;
	v.host_fn = NULL;
	assert_rc(odx_kernel_create(ctx, "bad", onecall_params, 2, &v, 1, &k), ODX_EINVAL);
	assert_null(k);
	assert_ok(odx_close(ctx));
}

/* ---- the kernel's thread widened to the device's cores --------------------------------------- */

static atomic_int wide_cpus, narrow_cpus;

static int wide_kernel(const odx_host_launch *l)
{
	cpu_set_t cpus;

	(void)l;
	if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0)
		atomic_store(&wide_cpus, CPU_COUNT(&cpus));
	return 0;
}

static int narrow_kernel(const odx_host_launch *l)
{
	cpu_set_t cpus;

	(void)l;
	if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0)
		atomic_store(&narrow_cpus, CPU_COUNT(&cpus));
	return 0;
}

/* With host.bind the worker is bound to one core; a one-call kernel on a two-thread device runs
 * with both threads' cores (threads a BLAS starts from it inherit them), and the worker's own
 * binding is back for the next task (a one-group work-group launch runs on the worker). */
static void test_affinity_widened(void **state)
{
	const char *kv[] = {"host.threads", "2", "host.bind", "true", NULL};
	odx_context *ctx;
	odx_kernel_variant v = {.backend = ODX_BACKEND_HOST,
				.format = ODX_FORMAT_HOST_CALL,
				.host_fn = wide_kernel};
	odx_kernel *wide = NULL, *narrow;
	cpu_set_t mine;
	int avail;

	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof(mine), &mine), 0);
	avail = CPU_COUNT(&mine);
	ctx = test_open_ctx(kv);
	assert_ok(odx_kernel_create(ctx, "wide", NULL, 0, &v, 1, &wide));
	narrow = test_host_kernel(ctx, "narrow", NULL, 0, narrow_kernel);
	atomic_store(&wide_cpus, 0);
	atomic_store(&narrow_cpus, 0);
	submit_wait(ctx, narrow, 1, 0);
	assert_int_equal(atomic_load(&narrow_cpus), 1); /* bound: the premise of the test */
	submit_wait(ctx, wide, 1, 0);
	assert_int_equal(atomic_load(&wide_cpus), avail >= 2 ? 2 : 1);
	atomic_store(&narrow_cpus, 0);
	submit_wait(ctx, narrow, 1, 0);
	assert_int_equal(atomic_load(&narrow_cpus), 1);
	assert_ok(odx_close(ctx));
}

/* ---- a one-call host variant next to an OpenCL variant --------------------------------------- */

static const char cl_source[] =
	"__kernel void onecall(__global ulong *out, long seed)\n"
	"{\n"
	"	size_t i = get_global_id(0);\n"
	"	if (i < 257) {\n"
	"		ulong x = (ulong)seed * 0x9e3779b97f4a7c15UL + i;\n"
	"		out[i] = x ^ (x >> 31);\n"
	"	}\n"
	"}\n";

static uint64_t cl_expected(uint64_t seed, uint64_t i)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ULL + i;

	return x ^ (x >> 31);
}

static int host_same_fn(void *arg, uint64_t i, int thread)
{
	fork_arg *a = arg;

	(void)thread;
	a->out[i] = cl_expected(a->seed, i);
	return 0;
}

static int host_same_kernel(const odx_host_launch *l)
{
	fork_arg a = {.l = l, .out = l->buffers[0], .seed = *(const int64_t *)l->scalars[1]};

	atomic_fetch_add(&seen[l->device].calls, 1);
	return l->run(l, N, host_same_fn, &a);
}

static void test_with_opencl(void **state)
{
	const char *kv[] = {"backends", "host,opencl", "opencl.allow_cpu", "true", "host.threads",
			    "2", "host.bind", "false", NULL};
	odx_context *ctx;
	odx_kernel_variant v[2] = {
		{.backend = ODX_BACKEND_HOST,
		 .format = ODX_FORMAT_HOST_CALL,
		 .host_fn = host_same_kernel},
		{.backend = ODX_BACKEND_OPENCL,
		 .format = ODX_FORMAT_OPENCL_C,
		 .code = cl_source,
		 .code_size = sizeof(cl_source) - 1,
		 .entry = "onecall"},
	};
	odx_kernel *k = NULL;
	bool ran_host = false, ran_cl = false;

	(void)state;
	if (!getenv("ODX_TEST_ONECALL_OPENCL"))
		skip();
	ctx = test_open_ctx(kv);
	assert_ok(odx_kernel_create(ctx, "onecall_mixed", onecall_params, 2, v, 2, &k));
	reset_seen();
	for (int d = 0; d < odx_device_count(ctx) && d < MAXDEV; d++) {
		odx_device_info info;
		odx_buffer *buf = NULL;
		uint64_t out[N];
		odx_arg args[2];
		odx_task_opts opts = {.flags = ODX_SUBMIT_ON_DEVICE,
				      .on_device = d,
				      .grid = {(N + 63) / 64},
				      .block = {64}};
		odx_event *ev = NULL;
		int64_t seed = 31 + d;

		assert_ok(odx_device_get_info(ctx, d, &info));
		assert_ok(odx_buffer_create(ctx, sizeof(out), 0, &buf));
		args[0] = ODX_BUF(buf, ODX_W);
		args[1] = ODX_I64(seed);
		assert_ok(odx_submit(ctx, k, args, 2, &opts, &ev));
		assert_ok(odx_event_wait(ev, TEST_TIMEOUT_MS));
		odx_event_release(ev);
		assert_ok(odx_buffer_read(buf, 0, out, sizeof(out), TEST_TIMEOUT_MS));
		for (int i = 0; i < N; i++)
			if (out[i] != cl_expected((uint64_t)seed, (uint64_t)i))
				fail_msg("device %d (%s): out[%d] wrong", d, info.name, i);
		/* The host variant ran once on a host device and never on the OpenCL one. */
		assert_int_equal(atomic_load(&seen[d].calls), info.kind == ODX_BACKEND_HOST);
		ran_host |= info.kind == ODX_BACKEND_HOST;
		ran_cl |= info.kind == ODX_BACKEND_OPENCL;
		assert_ok(odx_buffer_destroy(buf));
	}
	assert_true(ran_host);
	assert_true(ran_cl);
	assert_ok(odx_close(ctx));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_1dev_1thread),
		cmocka_unit_test(test_1dev_2threads),
		cmocka_unit_test(test_2dev_1thread),
		cmocka_unit_test(test_2dev_2threads),
		cmocka_unit_test(test_many_tasks),
		cmocka_unit_test(test_default_threads),
		cmocka_unit_test(test_one_thread_warns),
		cmocka_unit_test(test_run_in_order),
		cmocka_unit_test(test_run_one_thread),
		cmocka_unit_test(test_create_errors),
		cmocka_unit_test(test_affinity_widened),
		cmocka_unit_test(test_with_opencl),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
