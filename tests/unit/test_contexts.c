/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_contexts.c - contexts are independent objects, usable from several threads.
 *
 * Two contexts with different device counts run their own task streams from their own threads
 * at the same time; several threads share one context; contexts are opened and closed in a loop.
 * Also the process-wide functions (error names, version, backend kind names) and the enumeration
 * of backends, devices and memory nodes.
 */
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

#define N 256        /* uint64 elements per buffer */
#define NSTREAMBUF 4 /* buffers per stream */

/* step(RW buf, i64 k): x = x * 31 + k + i, order-sensitive. */
static int step_kernel(const odx_host_launch *l)
{
	uint64_t *p = l->buffers[0];
	uint64_t k = (uint64_t)*(const int64_t *)l->scalars[1];

	for (size_t i = 0; i < l->buffer_sizes[0] / sizeof(uint64_t); i++)
		p[i] = p[i] * 31 + k + i;
	return 0;
}

/* mixin(R src, RW dst): dst[i] ^= src[i] * 3. */
static int mixin_kernel(const odx_host_launch *l)
{
	const uint64_t *s = l->buffers[0];
	uint64_t *d = l->buffers[1];

	for (size_t i = 0; i < l->buffer_sizes[1] / sizeof(uint64_t); i++)
		d[i] ^= s[i] * 3;
	return 0;
}

/* add(RW buf, i64 v): commutative, for streams whose order is not program order. */
static int add_kernel(const odx_host_launch *l)
{
	uint64_t *p = l->buffers[0];
	uint64_t v = (uint64_t)*(const int64_t *)l->scalars[1];

	for (size_t i = 0; i < l->buffer_sizes[0] / sizeof(uint64_t); i++)
		p[i] += v;
	return 0;
}

static const odx_param step_params[] = {{ODX_ARG_BUFFER, ODX_RW, "buf"}, {ODX_ARG_I64, 0, "k"}};
static const odx_param mixin_params[] = {{ODX_ARG_BUFFER, ODX_R, "src"},
					 {ODX_ARG_BUFFER, ODX_RW, "dst"}};

static odx_kernel_variant host_variant(odx_host_fn fn)
{
	return (odx_kernel_variant){
		.backend = ODX_BACKEND_HOST, .format = ODX_FORMAT_HOST_FN, .host_fn = fn};
}

/* ---- streams that run without cmocka (from threads): errors go into `err` ---------------- */

struct stream {
	const char *devices;
	uint64_t seed;
	int ntasks;
	odx_context *ctx;           /* open: own context; else shared one given */
	pthread_barrier_t *barrier; /* every stream's context is open before any runs */
	char err[512];
};

static int stream_open(struct stream *s)
{
	odx_config *cfg = NULL;
	int rc = odx_config_create(&cfg);

	if (rc == 0)
		rc = odx_config_set(cfg, "host.devices", s->devices);
	if (rc == 0)
		rc = odx_config_set(cfg, "host.threads", "1");
	if (rc == 0)
		rc = odx_config_set(cfg, "host.bind", "false");
	if (rc == 0)
		rc = odx_open(&s->ctx, cfg);
	if (rc != 0)
		snprintf(s->err, sizeof(s->err), "open with %s devices: %s: %s", s->devices,
			 odx_err_name(rc), cfg ? odx_config_error(cfg) : "");
	odx_config_destroy(cfg);
	return rc;
}

#define STREAM_CHECK(s, expr)                                                                      \
	do {                                                                                       \
		int rc_ = (expr);                                                                  \
		if (rc_ != 0) {                                                                    \
			snprintf((s)->err, sizeof((s)->err), "%s: %s: %s", #expr,                 \
				 odx_err_name(rc_), odx_last_error((s)->ctx));                     \
			goto out;                                                                  \
		}                                                                                  \
	} while (0)

/* Runs a random stream of order-sensitive tasks and checks the results against a model. */
static void stream_run(struct stream *s)
{
	static const size_t bytes = N * sizeof(uint64_t);
	uint64_t model[NSTREAMBUF][N], got[N];
	odx_buffer *bufs[NSTREAMBUF] = {NULL};
	odx_kernel *step = NULL, *mixin = NULL;
	odx_kernel_variant v_step = host_variant(step_kernel), v_mixin = host_variant(mixin_kernel);
	uint64_t rng = s->seed;
	int ndev = odx_device_count(s->ctx);
	char step_name[32], mixin_name[32];

	/* streams sharing a context register their kernels under their own names */
	snprintf(step_name, sizeof(step_name), "step_%llu", (unsigned long long)s->seed);
	snprintf(mixin_name, sizeof(mixin_name), "mixin_%llu", (unsigned long long)s->seed);

	if (ndev < 1) {
		snprintf(s->err, sizeof(s->err), "odx_device_count: %d", ndev);
		return;
	}
	STREAM_CHECK(s, odx_kernel_create(s->ctx, step_name, step_params, 2, &v_step, 1, &step));
	STREAM_CHECK(s, odx_kernel_create(s->ctx, mixin_name, mixin_params, 2, &v_mixin, 1, &mixin));
	for (int b = 0; b < NSTREAMBUF; b++) {
		for (int i = 0; i < N; i++)
			model[b][i] = test_rand(&rng);
		STREAM_CHECK(s, odx_buffer_create(s->ctx, bytes, 0, &bufs[b]));
		STREAM_CHECK(s, odx_buffer_write(bufs[b], 0, model[b], bytes, TEST_TIMEOUT_MS));
	}
	for (int t = 0; t < s->ntasks; t++) {
		int b = (int)test_rand_below(&rng, NSTREAMBUF);
		int c = (b + 1 + (int)test_rand_below(&rng, NSTREAMBUF - 1)) % NSTREAMBUF;
		odx_task_opts opts = {.flags = ODX_SUBMIT_ON_DEVICE,
				      .on_device = (int)test_rand_below(&rng, (unsigned)ndev)};

		if (test_rand_below(&rng, 2) == 0) {
			STREAM_CHECK(s, odx_submit(s->ctx, step,
						   (odx_arg[]){ODX_BUF(bufs[b], 0), ODX_I64(t)},
						   2, &opts, NULL));
			for (int i = 0; i < N; i++)
				model[b][i] = model[b][i] * 31 + (uint64_t)t + (uint64_t)i;
		} else {
			STREAM_CHECK(s, odx_submit(s->ctx, mixin,
						   (odx_arg[]){ODX_BUF(bufs[c], 0),
							       ODX_BUF(bufs[b], 0)},
						   2, &opts, NULL));
			for (int i = 0; i < N; i++)
				model[b][i] ^= model[c][i] * 3;
		}
	}
	STREAM_CHECK(s, odx_wait_all(s->ctx, TEST_TIMEOUT_MS));
	for (int b = 0; b < NSTREAMBUF; b++) {
		STREAM_CHECK(s, odx_buffer_read(bufs[b], 0, got, bytes, TEST_TIMEOUT_MS));
		for (int i = 0; i < N; i++) {
			if (got[i] != model[b][i]) {
				snprintf(s->err, sizeof(s->err),
					 "stream %llu: buffer %d element %d is %016llx, expected "
					 "%016llx",
					 (unsigned long long)s->seed, b, i,
					 (unsigned long long)got[i],
					 (unsigned long long)model[b][i]);
				goto out;
			}
		}
	}
out:
	for (int b = 0; b < NSTREAMBUF; b++) {
		if (bufs[b])
			odx_buffer_destroy(bufs[b]);
	}
	if (step)
		odx_kernel_destroy(step);
	if (mixin)
		odx_kernel_destroy(mixin);
}

/* A thread with its own context: open, wait for the other, run, close. */
static void *own_context_thread(void *arg)
{
	struct stream *s = arg;
	int rc = stream_open(s);

	pthread_barrier_wait(s->barrier);
	if (rc != 0)
		return NULL;
	stream_run(s);
	rc = odx_close(s->ctx);
	if (rc != 0 && s->err[0] == '\0')
		snprintf(s->err, sizeof(s->err), "odx_close: %s", odx_err_name(rc));
	return NULL;
}

/* A thread that shares a context. */
static void *shared_context_thread(void *arg)
{
	stream_run(arg);
	return NULL;
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_two_contexts_two_threads(void **state)
{
	pthread_barrier_t barrier;
	struct stream s[2] = {
		{.devices = "1", .seed = 101, .barrier = &barrier},
		{.devices = "3", .seed = 202, .barrier = &barrier},
	};
	pthread_t th[2];

	(void)state;
	assert_int_equal(pthread_barrier_init(&barrier, NULL, 2), 0);
	for (int i = 0; i < 2; i++) {
		s[i].ntasks = (int)test_scaled(2000, 100);
		assert_int_equal(pthread_create(&th[i], NULL, own_context_thread, &s[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	pthread_barrier_destroy(&barrier);
	for (int i = 0; i < 2; i++) {
		if (s[i].err[0])
			fail_msg("context %d (%s devices): %s", i, s[i].devices, s[i].err);
	}
}

/* Two contexts open at once keep their own devices, kernels and error state. */
static void test_contexts_independent(void **state)
{
	static const char *const kv1[] = {"host.devices", "1", "host.bind", "false", NULL};
	static const char *const kv3[] = {"host.devices", "3", "host.bind", "false", NULL};
	odx_context *a = test_open_ctx(kv1), *b = test_open_ctx(kv3);
	odx_kernel *ka, *kb;
	odx_buffer *bb;
	uint64_t got[N];

	(void)state;
	assert_int_equal(odx_device_count(a), 1);
	assert_int_equal(odx_device_count(b), 3);
	ka = test_host_kernel(a, "step", step_params, 2, step_kernel);
	kb = test_host_kernel(b, "step", step_params, 2, add_kernel);
	/* an error on one context is not seen on the other */
	assert_rc(odx_buffer_create(a, 0, 0, &bb), ODX_EINVAL);
	assert_true(odx_last_error(a)[0] != '\0');
	assert_string_equal(odx_last_error(b), "");
	/* the same kernel name runs each context's own function */
	assert_ok(odx_buffer_create(b, sizeof(got), 0, &bb));
	assert_ok(odx_submit(b, kb, (odx_arg[]){ODX_BUF(bb, 0), ODX_I64(4)}, 2,
			     &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 2},
			     NULL));
	assert_ok(odx_wait_all(b, TEST_TIMEOUT_MS));
	assert_ok(odx_buffer_read(bb, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (int i = 0; i < N; i++)
		assert_int_equal(got[i], 4);
	/* device 3 exists in b, not in a */
	assert_ok(odx_buffer_destroy(bb));
	assert_ok(odx_buffer_create(a, sizeof(got), 0, &bb));
	assert_rc(odx_submit(a, ka, (odx_arg[]){ODX_BUF(bb, 0), ODX_I64(4)}, 2,
			     &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 2}, NULL),
		  ODX_EINVAL);
	assert_ok(odx_buffer_destroy(bb));
	/* closing one leaves the other running */
	assert_ok(odx_close(a));
	assert_ok(odx_buffer_create(b, sizeof(got), 0, &bb));
	assert_ok(odx_submit(b, kb, (odx_arg[]){ODX_BUF(bb, 0), ODX_I64(6)}, 2, NULL, NULL));
	assert_ok(odx_buffer_read(bb, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	assert_int_equal(got[N - 1], 6);
	assert_ok(odx_buffer_destroy(bb));
	assert_ok(odx_close(b));
}

/* Several threads submit to one context: each stream's own program order holds. */
static void test_threads_share_context(void **state)
{
	static const char *const kv[] = {
		"host.devices", "2", "host.threads", "1", "host.bind", "false", NULL,
	};
	struct stream s[4];
	pthread_t th[4];
	odx_context *ctx = test_open_ctx(kv);

	(void)state;
	for (int i = 0; i < 4; i++) {
		s[i] = (struct stream){.seed = 300 + (uint64_t)i, .ctx = ctx};
		s[i].ntasks = (int)test_scaled(1000, 50);
		assert_int_equal(pthread_create(&th[i], NULL, shared_context_thread, &s[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(pthread_join(th[i], NULL), 0);
	for (int i = 0; i < 4; i++) {
		if (s[i].err[0])
			fail_msg("thread %d: %s", i, s[i].err);
	}
	assert_ok(odx_close(ctx));
}

struct adder {
	odx_context *ctx;
	odx_kernel *add;
	odx_buffer *shared;
	int n;
	int rc;
};

static void *adder_thread(void *arg)
{
	struct adder *a = arg;

	for (int i = 0; i < a->n && a->rc == 0; i++)
		a->rc = odx_submit(a->ctx, a->add, (odx_arg[]){ODX_BUF(a->shared, 0), ODX_I64(1)},
				   2, NULL, NULL);
	return NULL;
}

/* Several threads append to the dependency chain of one buffer at once. */
static void test_threads_share_buffer(void **state)
{
	static const char *const kv[] = {
		"host.devices", "2", "host.threads", "1", "host.bind", "false", NULL,
	};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel *add = test_host_kernel(ctx, "add", step_params, 2, add_kernel);
	odx_buffer *shared;
	struct adder a[4];
	pthread_t th[4];
	uint64_t got[N];
	int n = (int)test_scaled(500, 50);

	(void)state;
	assert_ok(odx_buffer_create(ctx, sizeof(got), 0, &shared));
	for (int i = 0; i < 4; i++) {
		a[i] = (struct adder){.ctx = ctx, .add = add, .shared = shared, .n = n};
		assert_int_equal(pthread_create(&th[i], NULL, adder_thread, &a[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_ok(a[i].rc);
	}
	assert_ok(odx_buffer_read(shared, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (int i = 0; i < N; i++)
		assert_int_equal(got[i], 4 * (uint64_t)n);
	assert_ok(odx_buffer_destroy(shared));
	assert_ok(odx_close(ctx));
}

/* Opening and closing in a loop, with work in between, leaks no state across contexts. */
static void test_open_close_loop(void **state)
{
	(void)state;
	for (int i = 0; i < 20; i++) {
		char devices[8];
		const char *kv[] = {"host.devices", devices, "host.bind", "false", NULL};
		odx_context *ctx;
		odx_kernel *add;
		odx_buffer *b;
		uint64_t got[N];

		snprintf(devices, sizeof(devices), "%d", 1 + i % 4);
		ctx = test_open_ctx(kv);
		assert_int_equal(odx_device_count(ctx), 1 + i % 4);
		add = test_host_kernel(ctx, "add", step_params, 2, add_kernel);
		assert_ok(odx_buffer_create(ctx, sizeof(got), 0, &b));
		for (int d = 0; d < 1 + i % 4; d++)
			assert_ok(odx_submit(ctx, add, (odx_arg[]){ODX_BUF(b, 0), ODX_I64(i)}, 2,
					     &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE,
							      .on_device = d},
					     NULL));
		assert_ok(odx_buffer_read(b, 0, got, sizeof(got), TEST_TIMEOUT_MS));
		assert_int_equal(got[0], (uint64_t)(i * (1 + i % 4)));
		assert_ok(odx_buffer_destroy(b));
		assert_ok(odx_close(ctx));
	}
	assert_ok(odx_close(NULL));
}

/* odx_last_error(NULL): why this thread's last odx_open failed, "" once one succeeds. */
static void test_open_error(void **state)
{
	odx_config *cfg;
	odx_context *ctx = NULL;
	const char *kv[] = {"host.devices", "1", "host.bind", "false", NULL};

	(void)state;
	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "policy", "lua:/nonexistent/odx-test-policy.lua"));
	assert_int_not_equal(odx_open(&ctx, cfg), 0);
	assert_null(ctx);
	assert_non_null(strstr(odx_last_error(NULL), "odx-test-policy.lua"));
	assert_string_equal(odx_last_error(NULL), odx_config_error(cfg));
	odx_config_destroy(cfg);
	ctx = test_open_ctx(kv);
	assert_string_equal(odx_last_error(NULL), "");
	assert_ok(odx_close(ctx));
}

/* Every code of the table has its name and message; unknown codes get a placeholder. */
static void test_error_names(void **state)
{
	static const int unknown[] = {-3, -4000, -4010, -9999, 1, 4001, INT_MIN, INT_MAX};

	(void)state;
#define CHECK_CODE(name, value, msg)                                                               \
	assert_int_equal(ODX_##name, value);                                                       \
	assert_string_equal(odx_err_name(value), "ODX_" #name);                                    \
	assert_string_equal(odx_strerror(value), msg);
	ODX_ERRNO_MAP(CHECK_CODE)
#undef CHECK_CODE
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
		const char *msg = odx_strerror(unknown[i]);

		assert_non_null(msg);
		assert_true(msg[0] != '\0');
		assert_string_equal(odx_err_name(unknown[i]), "ODX_E?");
	}
	assert_non_null(odx_strerror(0));
	assert_non_null(odx_err_name(0));
}

static void test_version(void **state)
{
	char want[32];

	(void)state;
	snprintf(want, sizeof(want), "%d.%d.%d", ODX_VERSION_MAJOR, ODX_VERSION_MINOR,
		 ODX_VERSION_PATCH);
	assert_non_null(odx_version());
	assert_string_equal(odx_version(), want);
	assert_int_equal(odx_version_number(), ODX_VERSION_NUMBER);
	assert_int_equal(ODX_VERSION_NUMBER,
			 ODX_VERSION_MAJOR * 10000 + ODX_VERSION_MINOR * 100 + ODX_VERSION_PATCH);
#if ODX_VERSION_NUMBER < 100
#error "ODX_VERSION_NUMBER must be usable in #if"
#endif
}

static void test_backend_kind_names(void **state)
{
	(void)state;
	assert_string_equal(odx_backend_kind_name(ODX_BACKEND_HOST), "host");
	assert_string_equal(odx_backend_kind_name(ODX_BACKEND_CUDA), "cuda");
	assert_string_equal(odx_backend_kind_name(ODX_BACKEND_HIP), "hip");
	assert_string_equal(odx_backend_kind_name(ODX_BACKEND_VULKAN), "vulkan");
	assert_string_equal(odx_backend_kind_name(ODX_BACKEND_OPENCL), "opencl");
	assert_string_equal(odx_backend_kind_name(ODX_BACKEND_KIND_COUNT), "?");
	assert_string_equal(odx_backend_kind_name(ODX_BACKEND_OTHER), "?");
	assert_string_equal(odx_backend_kind_name((odx_backend_kind)-1), "?");
	assert_string_equal(odx_backend_kind_name((odx_backend_kind)77), "?");
}

/* Variants name their backend kind by backend_name, which takes precedence over the legacy
 * enum; a kind no open backend has matches no device; devices say their kind by name. */
static void test_backend_names(void **state)
{
	static const char *const kv[] = {"host.devices", "2", "host.bind", "false", NULL};
	odx_context *ctx = test_open_ctx(kv);
	odx_kernel_variant by_name = {.backend_name = "host",
				      .format = ODX_FORMAT_HOST_FN,
				      .host_fn = add_kernel};
	odx_kernel_variant name_wins = by_name, absent = by_name, empty = by_name, other = by_name;
	odx_kernel *k = NULL;
	odx_buffer *b = NULL;
	odx_device_info info;
	uint64_t got[4] = {0};

	(void)state;
	assert_ok(odx_device_get_info(ctx, 1, &info));
	assert_string_equal(info.kind_name, "host");
	assert_int_equal(info.kind, ODX_BACKEND_HOST);
	assert_ok(odx_buffer_create(ctx, sizeof(got), 0, &b));
	/* by name alone, and by name over a contradicting enum value: both run, on device 1 */
	name_wins.backend = ODX_BACKEND_CUDA;
	assert_ok(odx_kernel_create(ctx, "by_name", step_params, 2, &by_name, 1, &k));
	assert_ok(odx_submit(ctx, k, (odx_arg[]){ODX_BUF(b, 0), ODX_I64(1)}, 2,
			     &(odx_task_opts){.flags = ODX_SUBMIT_ON_DEVICE, .on_device = 1},
			     NULL));
	assert_ok(odx_kernel_create(ctx, "name_wins", step_params, 2, &name_wins, 1, &k));
	assert_ok(odx_submit(ctx, k, (odx_arg[]){ODX_BUF(b, 0), ODX_I64(2)}, 2, NULL, NULL));
	assert_ok(odx_buffer_read(b, 0, got, sizeof(got), TEST_TIMEOUT_MS));
	for (int i = 0; i < 4; i++)
		assert_int_equal(got[i], 3);
	/* a kind without a constant, not open here: registered, runs nowhere */
	absent.backend_name = "nosuch-vendor";
	assert_ok(odx_kernel_create(ctx, "absent", step_params, 2, &absent, 1, &k));
	assert_rc(odx_submit(ctx, k, (odx_arg[]){ODX_BUF(b, 0), ODX_I64(1)}, 2, NULL, NULL),
		  ODX_ENOVARIANT);
	/* an empty name, and the "other" constant without a name, name nothing */
	empty.backend_name = "";
	assert_rc(odx_kernel_create(ctx, "empty", step_params, 2, &empty, 1, &k), ODX_EINVAL);
	other.backend_name = NULL;
	other.backend = ODX_BACKEND_OTHER;
	assert_rc(odx_kernel_create(ctx, "other", step_params, 2, &other, 1, &k), ODX_EINVAL);
	assert_contains(odx_last_error(ctx), "backend_name");
	assert_ok(odx_buffer_destroy(b));
	assert_ok(odx_close(ctx));
}

/* Devices, memory nodes and backends as configured. */
static void test_enumeration(void **state)
{
	static const char *const kv[] = {
		"host.devices", "3", "host.threads", "2", "host.memory", "64MiB",
		"host.bind", "false", NULL,
	};
	odx_context *ctx = test_open_ctx(kv);
	odx_device_info dev, dev_sentinel;
	odx_memnode_info mem;
	odx_backend_info be;
	int ndev = odx_device_count(ctx), nmem = odx_memnode_count(ctx);
	int nbackends = odx_backend_count(ctx), host_backends = 0;
	bool node_seen[16] = {false};

	(void)state;
	assert_int_equal(ndev, 3);
	assert_int_equal(nmem, ndev + 1);

	assert_ok(odx_memnode_get_info(ctx, 0, &mem));
	assert_int_equal(mem.index, 0);
	assert_int_equal(mem.kind, ODX_MEMNODE_HOST);
	assert_int_equal(mem.device, -1);
	assert_true(mem.capacity_bytes > 0);
	node_seen[0] = true;

	for (int d = 0; d < ndev; d++) {
		assert_ok(odx_device_get_info(ctx, d, &dev));
		assert_int_equal(dev.index, d);
		assert_int_equal(dev.kind, ODX_BACKEND_HOST);
		assert_string_equal(dev.kind_name, "host");
		assert_non_null(dev.name);
		assert_true(dev.name[0] != '\0');
		assert_int_equal(dev.memory_bytes, 64ull * 1024 * 1024);
		assert_true(dev.compute_lanes >= 1);
		assert_true(dev.copy_lanes >= 1);
		assert_int_equal(dev.threads, 2);
		assert_in_range(dev.memnode, 1, nmem - 1);
		assert_false(node_seen[dev.memnode]);
		node_seen[dev.memnode] = true;
		for (int e = 0; e < d; e++) {
			odx_device_info other;

			assert_ok(odx_device_get_info(ctx, e, &other));
			assert_true(strcmp(other.name, dev.name) != 0);
		}

		assert_ok(odx_memnode_get_info(ctx, dev.memnode, &mem));
		assert_int_equal(mem.index, dev.memnode);
		assert_int_equal(mem.kind, ODX_MEMNODE_DEVICE);
		assert_int_equal(mem.device, d);
		assert_int_equal(mem.capacity_bytes, dev.memory_bytes);
		assert_int_equal(mem.used_bytes, 0);
	}

	/* out of range: refused, out untouched */
	memset(&dev_sentinel, 0x5a, sizeof(dev_sentinel));
	dev = dev_sentinel;
	assert_true(odx_device_get_info(ctx, ndev, &dev) < 0);
	assert_true(odx_device_get_info(ctx, -1, &dev) < 0);
	assert_memory_equal(&dev, &dev_sentinel, sizeof(dev));
	assert_true(odx_memnode_get_info(ctx, nmem, &mem) < 0);
	assert_true(odx_memnode_get_info(ctx, -1, &mem) < 0);
	assert_true(odx_device_get_info(ctx, 0, NULL) < 0);

	/* the host backend is listed, available, with our devices */
	assert_true(nbackends >= 1);
	for (int i = 0; i < nbackends; i++) {
		assert_ok(odx_backend_get_info(ctx, i, &be));
		assert_non_null(be.name);
		assert_non_null(be.reason);
		if (strcmp(be.name, "host") == 0) {
			host_backends++;
			assert_int_equal(be.available, 1);
			assert_string_equal(be.reason, "");
			assert_int_equal(be.device_count, 3);
		} else if (!be.available) {
			/* an unavailable backend says why */
			assert_true(be.reason[0] != '\0');
			assert_int_equal(be.device_count, 0);
		}
	}
	assert_int_equal(host_backends, 1);
	assert_true(odx_backend_get_info(ctx, nbackends, &be) < 0);
	assert_true(odx_backend_get_info(ctx, -1, &be) < 0);
	assert_ok(odx_close(ctx));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_contexts_two_threads),
		cmocka_unit_test(test_contexts_independent),
		cmocka_unit_test(test_threads_share_context),
		cmocka_unit_test(test_threads_share_buffer),
		cmocka_unit_test(test_open_close_loop),
		cmocka_unit_test(test_open_error),
		cmocka_unit_test(test_error_names),
		cmocka_unit_test(test_version),
		cmocka_unit_test(test_backend_kind_names),
		cmocka_unit_test(test_backend_names),
		cmocka_unit_test(test_enumeration),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
