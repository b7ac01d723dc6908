/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_tiers.c - the memory-tier manager through the public API, on whichever backend the
 * environment selects (ODX_BACKENDS; meson runs it on host, Vulkan and OpenCL).
 *
 * Out-of-core runs: three workloads (a streaming pipeline, a tiled GEMM, a random task graph)
 * over the standard kernels, with the device tier forced to 1/2, 1/4 and 1/8 of the working set,
 * must give results bit-identical to an unlimited run, and must have evicted to get there. Then
 * the disk tier (spill and reload, an injected write failure, a corrupted block, the private
 * area's permissions and its removal), and the bad inputs: a task that can never fit, a buffer
 * larger than every tier, capacities that make progress impossible, the watchdog's dump.
 */
#include <dirent.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "test_util.h"

/* Opens a context on the environment's backend with extra settings, logging into test_log. */
static odx_context *open_ctx(const char *const *kv);

/* Host memory nodes (one per NUMA node: the tiers_numa run describes two to hwloc); the per-node
 * host limits below are chosen so that the totals are what each case needs. */
static int host_nodes(void)
{
	static int n;

	if (!n) {
		odx_context *ctx = open_ctx(NULL);
		odx_memnode_info info;

		for (int m = 0; m < odx_memnode_count(ctx); m++) {
			assert_ok(odx_memnode_get_info(ctx, m, &info));
			n += info.kind == ODX_MEMNODE_HOST;
		}
		assert_ok(odx_close(ctx));
	}
	return n;
}

static odx_context *open_ctx(const char *const *kv)
{
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	int rc;

	assert_ok(odx_config_create(&cfg));
	assert_ok(odx_config_set(cfg, "stats", "true"));
	assert_ok(odx_config_set(cfg, "log", "warn"));
	assert_ok(odx_config_set_log(cfg, test_log_sink, NULL));
	for (int i = 0; kv && kv[i]; i += 2) {
		rc = odx_config_set(cfg, kv[i], kv[i + 1]);
		if (rc)
			fail_msg("odx_config_set(%s, %s): %s", kv[i], kv[i + 1], odx_config_error(cfg));
	}
	rc = odx_open(&ctx, cfg);
	if (rc)
		fail_msg("odx_open: %s: %s", odx_err_name(rc), odx_config_error(cfg));
	odx_config_destroy(cfg);
	return ctx;
}

/* ---- workloads ------------------------------------------------------------------------------ */

typedef struct kernels {
	odx_kernel *fill, *copy, *axpy, *scale, *gemm;
} kernels;

static void kernels_get(odx_context *ctx, kernels *k)
{
	assert_ok(odx_kernel_builtin(ctx, "odx.fill_u32", &k->fill));
	assert_ok(odx_kernel_builtin(ctx, "odx.copy_u32", &k->copy));
	assert_ok(odx_kernel_builtin(ctx, "odx.axpy_f32", &k->axpy));
	assert_ok(odx_kernel_builtin(ctx, "odx.scale_f32", &k->scale));
	assert_ok(odx_kernel_builtin(ctx, "odx.gemm_f32", &k->gemm));
}

static void submit(odx_context *ctx, odx_kernel *k, odx_arg *args, int nargs, uint32_t n)
{
	odx_task_opts o = {.grid = {(n + 63) / 64, 1, 1}, .block = {64, 1, 1}};

	assert_ok(odx_submit(ctx, k, args, nargs, &o, NULL));
}

enum { CHUNK = 16384 }; /* floats per streaming chunk (64 KiB) */

/* Streaming: x_i from the host, y_i = 3 x_i + fill, scaled, over many chunks. */
static size_t streaming(odx_context *ctx, int nchunks, float *out)
{
	kernels k;
	odx_buffer **x = calloc((size_t)nchunks, sizeof(*x)), **y = calloc((size_t)nchunks, sizeof(*y));
	float *host = malloc(CHUNK * sizeof(float));
	int i, j;

	assert_non_null(x);
	assert_non_null(y);
	assert_non_null(host);
	kernels_get(ctx, &k);
	for (i = 0; i < nchunks; i++) {
		for (j = 0; j < CHUNK; j++)
			host[j] = (float)((i * 131 + j * 7) % 1000);
		assert_ok(odx_buffer_create(ctx, CHUNK * sizeof(float), 0, &x[i]));
		assert_ok(odx_buffer_create(ctx, CHUNK * sizeof(float), 0, &y[i]));
		assert_ok(odx_buffer_write(x[i], 0, host, CHUNK * sizeof(float), TEST_TIMEOUT_MS));
		submit(ctx, k.fill, (odx_arg[]){ODX_BUF(y[i], ODX_W), ODX_I32(0x3f800000), ODX_I32(CHUNK)},
		       3, CHUNK);
		submit(ctx, k.axpy,
		       (odx_arg[]){ODX_BUF(x[i], ODX_R), ODX_BUF(y[i], ODX_RW), ODX_F32(3.0f),
				   ODX_I32(CHUNK)},
		       4, CHUNK);
		submit(ctx, k.scale, (odx_arg[]){ODX_BUF(y[i], ODX_RW), ODX_F32(0.5f), ODX_I32(CHUNK)}, 3,
		       CHUNK);
		/* the input is done with: a hint that its copies can go first */
		assert_ok(odx_buffer_wont_use(x[i]));
	}
	/* The reads overlap the later chunks' kernels. Every buffer stays until the last read:
	 * destroyed right after its own read, a chunk could leave the devices before the next ones
	 * got there (a loaded machine running this thread ahead of the devices' workers), and the
	 * run would fit under any limit, with no eviction for out_of_core to see. */
	for (i = 0; i < nchunks; i++) {
		int rc = odx_buffer_read(y[i], 0, out + (size_t)i * CHUNK, CHUNK * sizeof(float),
					 TEST_TIMEOUT_MS);

		if (rc)
			fail_msg("streaming: reading chunk %d: %s", i, odx_last_error(ctx));
	}
	for (i = 0; i < nchunks; i++) {
		odx_buffer_destroy(x[i]);
		odx_buffer_destroy(y[i]);
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	free(x);
	free(y);
	free(host);
	return (size_t)nchunks * 2 * CHUNK * sizeof(float);
}

enum { TS = 32 }; /* tile edge */

/* C = A * B over t x t tiles: tmp = A_ik * B_kj, C_ij += tmp. */
static size_t tiled_gemm(odx_context *ctx, int t, float *out)
{
	kernels k;
	int nt = t * t, i, j, kk, e;
	odx_buffer **a = calloc((size_t)nt, sizeof(*a)), **b = calloc((size_t)nt, sizeof(*b));
	odx_buffer **c = calloc((size_t)nt, sizeof(*c)), **tmp = calloc((size_t)nt, sizeof(*tmp));
	float tile[TS * TS];
	size_t tb = sizeof(tile);

	kernels_get(ctx, &k);
	for (i = 0; i < nt; i++) {
		assert_ok(odx_buffer_create(ctx, tb, 0, &a[i]));
		assert_ok(odx_buffer_create(ctx, tb, 0, &b[i]));
		assert_ok(odx_buffer_create(ctx, tb, 0, &c[i]));
		assert_ok(odx_buffer_create(ctx, tb, 0, &tmp[i]));
		for (e = 0; e < TS * TS; e++)
			tile[e] = (float)((i * 17 + e * 3) % 7) - 3.0f;
		assert_ok(odx_buffer_write(a[i], 0, tile, tb, TEST_TIMEOUT_MS));
		for (e = 0; e < TS * TS; e++)
			tile[e] = (float)((i * 5 + e) % 5) - 2.0f;
		assert_ok(odx_buffer_write(b[i], 0, tile, tb, TEST_TIMEOUT_MS));
	}
	for (i = 0; i < t; i++)
		for (j = 0; j < t; j++)
			for (kk = 0; kk < t; kk++) {
				odx_task_opts o = {.grid = {TS / 16, TS / 16, 1}, .block = {16, 16, 1}};
				odx_buffer *cij = c[i * t + j], *tij = tmp[i * t + j];

				assert_ok(odx_submit(ctx, k.gemm,
						     (odx_arg[]){ODX_BUF(a[i * t + kk], ODX_R),
								 ODX_BUF(b[kk * t + j], ODX_R),
								 ODX_BUF(tij, ODX_W), ODX_I32(TS),
								 ODX_I32(TS), ODX_I32(TS)},
						     6, &o, NULL));
				submit(ctx, k.axpy,
				       (odx_arg[]){ODX_BUF(tij, ODX_R), ODX_BUF(cij, ODX_RW),
						   ODX_F32(1.0f), ODX_I32(TS * TS)},
				       4, TS * TS);
			}
	{
		int rc = odx_wait_all(ctx, TEST_TIMEOUT_MS);

		if (rc)
			fail_msg("tiled gemm: %s: %s", odx_err_name(rc), odx_last_error(ctx));
	}
	for (i = 0; i < nt; i++) {
		assert_ok(odx_buffer_read(c[i], 0, out + (size_t)i * TS * TS, tb, TEST_TIMEOUT_MS));
		odx_buffer_destroy(a[i]);
		odx_buffer_destroy(b[i]);
		odx_buffer_destroy(c[i]);
		odx_buffer_destroy(tmp[i]);
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	free(a);
	free(b);
	free(c);
	free(tmp);
	return (size_t)nt * 4 * tb;
}

enum { RBUFS = 48, RWORDS = 8192 }; /* random graph: 48 buffers of 32 KiB */

/* A random task graph over buffers: copies, fills, axpys, scales, host writes and reads. */
static size_t random_graph(odx_context *ctx, uint64_t seed, int ops, uint32_t *out)
{
	kernels k;
	odx_buffer *b[RBUFS];
	uint32_t *host = malloc(RWORDS * sizeof(uint32_t));
	int i, j;

	kernels_get(ctx, &k);
	for (i = 0; i < RBUFS; i++)
		assert_ok(odx_buffer_create(ctx, RWORDS * sizeof(uint32_t), 0, &b[i]));
	for (i = 0; i < ops; i++) {
		int x = (int)test_rand_below(&seed, RBUFS), y = (int)test_rand_below(&seed, RBUFS);

		if (y == x)
			y = (x + 1) % RBUFS;
		switch (test_rand_below(&seed, 6)) {
		case 0:
			submit(ctx, k.copy,
			       (odx_arg[]){ODX_BUF(b[x], ODX_R), ODX_BUF(b[y], ODX_W), ODX_I32(RWORDS)}, 3,
			       RWORDS);
			break;
		case 1:
			submit(ctx, k.fill,
			       (odx_arg[]){ODX_BUF(b[y], ODX_W), ODX_I32((int32_t)(i * 2654435761u >> 9)),
					   ODX_I32(RWORDS)},
			       3, RWORDS);
			break;
		case 2:
			submit(ctx, k.axpy,
			       (odx_arg[]){ODX_BUF(b[x], ODX_R), ODX_BUF(b[y], ODX_RW), ODX_F32(0.75f),
					   ODX_I32(RWORDS)},
			       4, RWORDS);
			break;
		case 3:
			submit(ctx, k.scale, (odx_arg[]){ODX_BUF(b[y], ODX_RW), ODX_F32(1.5f), ODX_I32(RWORDS)},
			       3, RWORDS);
			break;
		case 4:
			for (j = 0; j < RWORDS; j++)
				host[j] = (uint32_t)(i * 7 + j) & 0x3fffffff;
			assert_ok(odx_buffer_write(b[y], 0, host, RWORDS * sizeof(uint32_t),
						   TEST_TIMEOUT_MS));
			break;
		default: {
			int rc = odx_buffer_read(b[x], 0, host, RWORDS * sizeof(uint32_t),
						 TEST_TIMEOUT_MS);

			if (rc)
				fail_msg("random graph: op %d: %s", i, odx_last_error(ctx));
			break;
		}
		}
	}
	for (i = 0; i < RBUFS; i++) {
		assert_ok(odx_buffer_read(b[i], 0, out + (size_t)i * RWORDS, RWORDS * sizeof(uint32_t),
					  TEST_TIMEOUT_MS));
		odx_buffer_destroy(b[i]);
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	free(host);
	return (size_t)RBUFS * RWORDS * sizeof(uint32_t);
}

/* ---- out of core: bit-identical to an unlimited run ------------------------------------------ */

enum workload { STREAMING, GEMM, RANDOM };

static size_t run_workload(int w, const char *const *kv, void *out)
{
	odx_context *ctx = open_ctx(kv);
	size_t ws;

	test_log_reset();
	switch (w) {
	case STREAMING:
		ws = streaming(ctx, 32, out);
		break;
	case GEMM:
		ws = tiled_gemm(ctx, 6, out);
		break;
	default:
		ws = random_graph(ctx, 42, (int)test_scaled(600, 200), out);
		break;
	}
	assert_ok(odx_close(ctx)); /* prints the statistics into the test log */
	return ws;
}

static int ndevices(void)
{
	odx_context *ctx = open_ctx(NULL);
	int n = odx_device_count(ctx);

	assert_ok(odx_close(ctx));
	return n > 0 ? n : 1;
}

static void out_of_core(int w, size_t outbytes)
{
	void *ref = calloc(1, outbytes), *got = calloc(1, outbytes);
	static const int factors[] = {2, 4, 8};
	char limit[32];
	size_t ws;

	ws = run_workload(w, NULL, ref);
	for (size_t f = 0; f < sizeof(factors) / sizeof(factors[0]); f++) {
		const char *kv[] = {"tier.device.limit", limit, NULL};

		/* The devices' tiers together hold 1/factor of the working set. */
		snprintf(limit, sizeof(limit), "%zu", ws / (size_t)factors[f] / (size_t)ndevices());
		memset(got, 0xa5, outbytes);
		run_workload(w, kv, got);
		print_message("working set %zu bytes, device tier %s bytes: %llu copies evicted "
			      "(%llu dirty ones written back)\n",
			      ws, limit, test_stat_sum("tier node", "clean") + test_stat_sum("tier node", "dirty"),
			      test_stat_sum("tier node", "dirty"));
		if (memcmp(ref, got, outbytes) != 0) {
			size_t at = 0;

			while (((unsigned char *)ref)[at] == ((unsigned char *)got)[at])
				at++;
			fail_msg("results differ from the unlimited run with the device tier at 1/%d "
				 "of the working set, first at byte %zu (word %zu: %08x, expected %08x)",
				 factors[f], at, at / 4, ((uint32_t *)got)[at / 4],
				 ((uint32_t *)ref)[at / 4]);
		}
		/* It got there by evicting, not because the limit was never reached. */
		assert_true(test_stat_sum("tier node", "clean") + test_stat_sum("tier node", "dirty") > 0);
	}
	free(ref);
	free(got);
}

static void test_streaming(void **state)
{
	(void)state;
	out_of_core(STREAMING, 32 * CHUNK * sizeof(float));
}

static void test_tiled_gemm(void **state)
{
	(void)state;
	out_of_core(GEMM, 36 * TS * TS * sizeof(float));
}

static void test_random_graph(void **state)
{
	(void)state;
	out_of_core(RANDOM, RBUFS * RWORDS * sizeof(uint32_t));
}

/* ---- bad inputs --------------------------------------------------------------------------- */

static void test_task_larger_than_tier(void **state)
{
	const char *kv[] = {"tier.device.limit", "256KiB", NULL};
	odx_context *ctx;
	odx_buffer *x, *y;
	odx_event *ev;
	kernels k;
	char msg[1024];

	(void)state;
	ctx = open_ctx(kv);
	kernels_get(ctx, &k);
	assert_ok(odx_buffer_create(ctx, 192 << 10, 0, &x));
	assert_ok(odx_buffer_create(ctx, 192 << 10, 0, &y));
	{
		odx_arg args[] = {ODX_BUF(x, ODX_R), ODX_BUF(y, ODX_RW), ODX_F32(1.0f), ODX_I32(1024)};
		odx_task_opts o = {.grid = {16, 1, 1}, .block = {64, 1, 1}, .tag = "too-big"};

		assert_ok(odx_submit(ctx, k.axpy, args, 4, &o, &ev));
	}
	assert_rc(odx_event_wait(ev, TEST_TIMEOUT_MS), ODX_ENOSPC);
	snprintf(msg, sizeof(msg), "%s", odx_event_message(ev));
	print_message("%s\n", msg);
	assert_contains(msg, "'too-big'");
	assert_contains(msg, "needs 393216 bytes");
	assert_contains(msg, "holds 262144 bytes");
	{
		odx_device_info dev;
		char node[32];

		assert_ok(odx_device_get_info(ctx, 0, &dev));
		snprintf(node, sizeof(node), "memory node %d", dev.memnode);
		assert_contains(msg, node);
	}
	odx_event_release(ev);
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	odx_wait_all(ctx, TEST_TIMEOUT_MS);
	assert_ok(odx_close(ctx));
}

static void test_buffer_larger_than_every_tier(void **state)
{
	const char *kv[] = {"tier.device.limit", "1MiB", "tier.host.limit", "2MiB", NULL};
	odx_context *ctx;
	odx_buffer *b = NULL;

	(void)state;
	ctx = open_ctx(kv);
	assert_rc(odx_buffer_create(ctx, 3 << 20, 0, &b), ODX_ENOSPC);
	assert_null(b);
	assert_contains(odx_last_error(ctx), "3145728 bytes");
	assert_contains(odx_last_error(ctx), "largest holds 2097152 bytes");
	assert_ok(odx_buffer_create(ctx, 2 << 20, 0, &b));
	odx_buffer_destroy(b);
	assert_ok(odx_close(ctx));
}

/* Device and host RAM both too small for the dirty data, and no disk tier: explained, no hang. */
static void test_impossible_capacities(void **state)
{
	/* host RAM holds less than the two copies the device cannot keep, on every node */
	const char *kv[] = {"tier.device.limit", "1MiB", "tier.host.limit",
			    host_nodes() == 1 ? "1MiB" : "512KiB", "host.devices", "1", NULL};
	odx_context *ctx;
	odx_buffer *b[3];
	odx_event *ev[3];
	kernels k;
	char msg[1024];
	int i, failed = -1;

	(void)state;
	ctx = open_ctx(kv);
	kernels_get(ctx, &k);
	for (i = 0; i < 3; i++) {
		odx_arg args[] = {ODX_BUF(NULL, ODX_W), ODX_I32(i + 1), ODX_I32(196608)};
		odx_task_opts o = {.grid = {3072, 1, 1}, .block = {64, 1, 1}};

		assert_ok(odx_buffer_create(ctx, 768 << 10, 0, &b[i]));
		args[0] = ODX_BUF(b[i], ODX_W);
		assert_ok(odx_submit(ctx, k.fill, args, 3, &o, &ev[i]));
	}
	for (i = 0; i < 3; i++) {
		int rc = odx_event_wait(ev[i], TEST_TIMEOUT_MS);

		assert_true(rc == 0 || rc == ODX_ENOSPC);
		if (rc == ODX_ENOSPC && failed < 0) {
			failed = i;
			snprintf(msg, sizeof(msg), "%s", odx_event_message(ev[i]));
		}
		odx_event_release(ev[i]);
	}
	assert_true(failed >= 0);
	print_message("%s\n", msg);
	assert_contains(msg, "cannot get");
	assert_contains(msg, "tier.host.limit");
	for (i = 0; i < 3; i++)
		odx_buffer_destroy(b[i]);
	odx_wait_all(ctx, TEST_TIMEOUT_MS);
	assert_ok(odx_close(ctx));
}

/* ---- the disk tier -------------------------------------------------------------------------- */

static char spill_root[256];

static void make_spill_root(void)
{
	snprintf(spill_root, sizeof(spill_root), "/tmp/odx-test-tiers-XXXXXX");
	assert_non_null(mkdtemp(spill_root));
}

/* Entries in a directory, ".", ".." aside. */
static int dir_entries(const char *path, char *first, size_t n)
{
	DIR *d = opendir(path);
	struct dirent *e;
	int count = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (count++ == 0 && first)
			snprintf(first, n, "%s/%s", path, e->d_name);
	}
	closedir(d);
	return count;
}

/* Buffers written from the host, all live at once, 512 KiB more than host RAM and the devices
 * hold under kv's limits (1 MiB each): some must be on disk when they are read back. */
static void reload_all_live(const char *const *kv)
{
	enum { WORDS = 16384 }; /* 64 KiB */
	int n = 16 * (host_nodes() + 1) + 8;
	odx_buffer **b = calloc((size_t)n, sizeof(*b));
	uint32_t *host = malloc(WORDS * sizeof(uint32_t));
	odx_context *ctx;

	assert_non_null(b);
	assert_non_null(host);
	ctx = open_ctx(kv);
	test_log_reset();
	for (int i = 0; i < n; i++) {
		for (int j = 0; j < WORDS; j++)
			host[j] = (uint32_t)(i * 40503u + (unsigned)j);
		assert_ok(odx_buffer_create(ctx, WORDS * sizeof(uint32_t), 0, &b[i]));
		assert_ok(odx_buffer_write(b[i], 0, host, WORDS * sizeof(uint32_t), TEST_TIMEOUT_MS));
	}
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS));
	for (int i = 0; i < n; i++) {
		assert_ok(odx_buffer_read(b[i], 0, host, WORDS * sizeof(uint32_t), TEST_TIMEOUT_MS));
		for (int j = 0; j < WORDS; j++)
			if (host[j] != (uint32_t)(i * 40503u + (unsigned)j))
				fail_msg("buffer %d word %d: %u after the round trip", i, j, host[j]);
		odx_buffer_destroy(b[i]);
	}
	assert_ok(odx_close(ctx));
	print_message("%d live buffers of 64 KiB: spills %llu, reloads %llu\n", n,
		      test_stat_sum("disk tier", "spills"), test_stat_sum("disk tier", "reloads"));
	assert_true(test_stat_sum("disk tier", "reloads") > 0);
	free(b);
	free(host);
}

/* Host RAM below the working set: copies go to disk and come back, results unchanged. */
static void test_disk_spill_and_reload(void **state)
{
	const size_t outbytes = 32 * CHUNK * sizeof(float);
	float *ref = malloc(outbytes), *got = malloc(outbytes);
	const char *kv[] = {"tier.device.limit", "1MiB",	"tier.host.limit", "1MiB",
			    "tier.disk.limit",	 "64MiB",	"tier.disk.path",  spill_root,
			    "host.devices",	 "1",		NULL};

	(void)state;
	make_spill_root();
	run_workload(STREAMING, NULL, ref);
	run_workload(STREAMING, kv, got);
	print_message("spills %llu, reloads %llu\n", test_stat_sum("disk tier", "spills"),
		      test_stat_sum("disk tier", "reloads"));
	assert_memory_equal(ref, got, outbytes);
	assert_true(test_stat_sum("disk tier", "spills") > 0);
	/* Whether that run reloads anything depends on how far its kernels run ahead of its reads
	 * (its inputs go to disk first): the reloads are checked where they cannot be avoided. */
	reload_all_live(kv);
	/* everything removed at close */
	assert_int_equal(dir_entries(spill_root, NULL, 0), 0);
	rmdir(spill_root);
	free(ref);
	free(got);
}

/* The private area while a context is open: 0700 directory, 0600 file; gone after close. */
static void test_spill_area_permissions(void **state)
{
	const char *kv[] = {"tier.disk.limit", "16MiB", "tier.disk.path", spill_root, NULL};
	char sub[512], file[1024];
	struct stat st;
	odx_context *ctx;

	(void)state;
	make_spill_root();
	ctx = open_ctx(kv);
	assert_int_equal(dir_entries(spill_root, sub, sizeof(sub)), 1);
	assert_ok(stat(sub, &st));
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_true(dir_entries(sub, file, sizeof(file)) >= 1);
	assert_ok(stat(file, &st));
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_ok(odx_close(ctx));
	assert_int_equal(dir_entries(spill_root, NULL, 0), 0);
	rmdir(spill_root);
}

/* An I/O error while spilling: reported, the copy stays in host RAM, nothing is lost. */
static void test_spill_write_error(void **state)
{
	const size_t outbytes = 32 * CHUNK * sizeof(float);
	float *ref = malloc(outbytes), *got = malloc(outbytes);
	const char *kv[] = {"tier.device.limit", "1MiB",		"tier.host.limit", "1536KiB",
			    "tier.disk.limit",	 "64MiB",		"tier.disk.path",  spill_root,
			    "tier.disk.fault",	 "write_eio=1,write_enospc=3", "host.devices", "1",
			    NULL};

	(void)state;
	make_spill_root();
	run_workload(STREAMING, NULL, ref);
	run_workload(STREAMING, kv, got);
	print_message("spills %llu, spill errors %llu\n", test_stat_sum("disk tier", "spills"),
		      test_stat_sum("disk tier", "spill errors"));
	assert_memory_equal(ref, got, outbytes);
	assert_int_equal(test_stat_sum("disk tier", "spill errors"), 2);
	assert_contains(test_log_text(), "spilling buffer");
	assert_int_equal(dir_entries(spill_root, NULL, 0), 0);
	rmdir(spill_root);
	free(ref);
	free(got);
}

/* A corrupted spilled block is detected by its checksum and never returned as data. */
static void test_spill_corruption(void **state)
{
	/* host RAM holds two of the four copies (one per node with two nodes) */
	const char *kv[] = {"tier.host.limit", host_nodes() == 1 ? "160KiB" : "80KiB",
			    "tier.disk.limit", "16MiB",	     "tier.disk.path",
			    spill_root,	       "tier.disk.fault", "corrupt=1",
			    NULL};
	odx_context *ctx;
	odx_buffer *b[4];
	uint32_t data[16384], back[16384];
	int i, rc;

	(void)state;
	make_spill_root();
	ctx = open_ctx(kv);
	for (i = 0; i < 4; i++) {
		for (size_t j = 0; j < 16384; j++)
			data[j] = (uint32_t)(i * 100000 + j);
		assert_ok(odx_buffer_create(ctx, sizeof(data), 0, &b[i]));
		/* each write needs host RAM: the oldest copies go to disk */
		assert_ok(odx_buffer_write(b[i], 0, data, sizeof(data), TEST_TIMEOUT_MS));
	}
	/* the first spilled buffer (b[0], least recently used) was corrupted on disk */
	memset(back, 0, sizeof(back));
	rc = odx_buffer_read(b[0], 0, back, sizeof(back), TEST_TIMEOUT_MS);
	print_message("read of the corrupted buffer: %s: %s\n", odx_err_name(rc),
		      odx_last_error(ctx));
	assert_rc(rc, ODX_ECORRUPT);
	assert_contains(odx_last_error(ctx), "checksum");
	/* the others are intact */
	for (i = 1; i < 4; i++) {
		assert_ok(odx_buffer_read(b[i], 0, back, sizeof(back), TEST_TIMEOUT_MS));
		for (size_t j = 0; j < 16384; j++)
			assert_int_equal(back[j], (uint32_t)(i * 100000 + j));
	}
	for (i = 0; i < 4; i++)
		odx_buffer_destroy(b[i]);
	odx_wait_all(ctx, TEST_TIMEOUT_MS);
	assert_ok(odx_close(ctx));
	assert_int_equal(dir_entries(spill_root, NULL, 0), 0);
	rmdir(spill_root);
}

/* ---- the watchdog ------------------------------------------------------------------------ */

static atomic_bool release_kernel;

/* Holds its device until the test saw the watchdog's dump (or TEST_TIMEOUT_MS passed). */
static int blocking_kernel(const odx_host_launch *l)
{
	(void)l;
	for (int i = 0; i < TEST_TIMEOUT_MS / 10 && !atomic_load(&release_kernel); i++)
		usleep(10000);
	return 0;
}

static void test_watchdog(void **state)
{
	const char *kv[] = {"tier.watchdog_ms", "200", "host.devices", "1", NULL};
	const odx_param params[] = {{.name = "x", .kind = ODX_ARG_BUFFER, .access = ODX_RW}};
	odx_context *ctx;
	odx_kernel *k;
	odx_buffer *x;
	int i;

	(void)state;
	atomic_store(&release_kernel, false);
	ctx = open_ctx(kv);
	test_log_reset();
	k = test_host_kernel(ctx, "blocking", params, 1, blocking_kernel);
	assert_ok(odx_buffer_create(ctx, 4096, 0, &x));
	assert_ok(odx_submit(ctx, k, (odx_arg[]){ODX_BUF(x, ODX_RW)}, 1, NULL, NULL));
	assert_ok(odx_submit(ctx, k, (odx_arg[]){ODX_BUF(x, ODX_RW)}, 1, NULL, NULL));
	/* No progress while the first task holds its device: the dump comes (200 ms here; the
	 * deadline, TEST_TIMEOUT_MS, only guards against a hang). */
	for (i = 0; i < TEST_TIMEOUT_MS / 10 && !test_log_has("odx watchdog"); i++)
		usleep(10000);
	atomic_store(&release_kernel, true);
	assert_ok(odx_wait_all(ctx, TEST_TIMEOUT_MS)); /* nothing logs after this */
	print_message("%s", test_log_text());
	assert_contains(test_log_text(), "odx watchdog: no task completed and no byte moved");
	assert_contains(test_log_text(), "tasks are pending");
	assert_contains(test_log_text(), "device 0");
	assert_contains(test_log_text(), "memory node 0 (host RAM");
	odx_buffer_destroy(x);
	assert_ok(odx_close(ctx));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_streaming),
		cmocka_unit_test(test_tiled_gemm),
		cmocka_unit_test(test_random_graph),
		cmocka_unit_test(test_task_larger_than_tier),
		cmocka_unit_test(test_buffer_larger_than_every_tier),
		/* from here on: host devices only (ODX_TIERS_DISK=0 stops before) */
		cmocka_unit_test(test_impossible_capacities),
		cmocka_unit_test(test_disk_spill_and_reload),
		cmocka_unit_test(test_spill_area_permissions),
		cmocka_unit_test(test_spill_write_error),
		cmocka_unit_test(test_spill_corruption),
		cmocka_unit_test(test_watchdog),
	};
	const char *only_host = getenv("ODX_TIERS_DISK");

	/* The disk-tier and capacity cases do not depend on the device backend: run them once,
	 * on host devices. */
	if (only_host && strcmp(only_host, "0") == 0)
		return _cmocka_run_group_tests("tiers", tests, 5, NULL, NULL) ? 1 : 0;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
