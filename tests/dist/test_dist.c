/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_dist.c - distributed execution, run as every rank of a job (scripts/odx-run).
 *
 * Each workload runs twice in the same job: once with every buffer owned by rank 0 (so every task
 * runs there: the single-rank computation) and once with the buffers spread over the ranks (so
 * tasks run everywhere and bytes move between ranks). Every rank reads every result (reads are
 * collective) and checks that both runs are bit-identical. Workloads: a tiled GEMM (owners by
 * block of C tiles), a streaming pipeline (cyclic owners), a random task graph (random owners,
 * host writes and reads in between). Exit 0 on success; every wait has a deadline.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "odx/odx.h"

#define TIMEOUT_MS 60000

static int rank_ = -1;

#include "dist_check.h"

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void submit(odx_context *ctx, odx_kernel *k, odx_arg *args, int n, uint32_t items)
{
	odx_task_opts o = {.grid = {(items + 63) / 64, 1, 1}, .block = {64, 1, 1}};

	CHECK(ctx, odx_submit(ctx, k, args, n, &o, NULL));
}

enum { TS = 32, T = 4 };

/* C = A * B over T x T tiles; C tile (i, j) and its partial product live on `owner(i, j)`. */
static void gemm(odx_context *ctx, bool spread, float *out)
{
	odx_kernel *kg, *ka;
	odx_buffer *a[T * T], *b[T * T], *c[T * T], *tmp[T * T];
	float tile[TS * TS];
	int i, j, k, e, n = odx_size(ctx);

	CHECK(ctx, odx_kernel_builtin(ctx, "odx.gemm_f32", &kg));
	CHECK(ctx, odx_kernel_builtin(ctx, "odx.axpy_f32", &ka));
	for (i = 0; i < T * T; i++) {
		CHECK(ctx, odx_buffer_create(ctx, sizeof(tile), 0, &a[i]));
		CHECK(ctx, odx_buffer_create(ctx, sizeof(tile), 0, &b[i]));
		CHECK(ctx, odx_buffer_create(ctx, sizeof(tile), 0, &c[i]));
		CHECK(ctx, odx_buffer_create(ctx, sizeof(tile), 0, &tmp[i]));
		if (spread) {
			int owner = odx_owner_block(i, T * T, n);

			CHECK(ctx, odx_buffer_set_owner(c[i], owner));
			CHECK(ctx, odx_buffer_set_owner(tmp[i], owner));
			CHECK(ctx, odx_buffer_set_owner(a[i], odx_owner_cyclic(i, n)));
		}
		for (e = 0; e < TS * TS; e++)
			tile[e] = (float)((i * 17 + e * 3) % 7) - 3.0f;
		CHECK(ctx, odx_buffer_write(a[i], 0, tile, sizeof(tile), TIMEOUT_MS));
		for (e = 0; e < TS * TS; e++)
			tile[e] = (float)((i * 5 + e) % 5) - 2.0f;
		CHECK(ctx, odx_buffer_write(b[i], 0, tile, sizeof(tile), TIMEOUT_MS));
	}
	for (i = 0; i < T; i++)
		for (j = 0; j < T; j++)
			for (k = 0; k < T; k++) {
				odx_task_opts o = {.grid = {TS / 16, TS / 16, 1}, .block = {16, 16, 1}};

				CHECK(ctx, odx_submit(ctx, kg,
						      (odx_arg[]){ODX_BUF(a[i * T + k], ODX_R),
								  ODX_BUF(b[k * T + j], ODX_R),
								  ODX_BUF(tmp[i * T + j], ODX_W),
								  ODX_I32(TS), ODX_I32(TS), ODX_I32(TS)},
						      6, &o, NULL));
				submit(ctx, ka,
				       (odx_arg[]){ODX_BUF(tmp[i * T + j], ODX_R),
						   ODX_BUF(c[i * T + j], ODX_RW), ODX_F32(1.0f),
						   ODX_I32(TS * TS)},
				       4, TS * TS);
			}
	for (i = 0; i < T * T; i++) {
		CHECK(ctx, odx_buffer_read(c[i], 0, out + i * TS * TS, sizeof(tile), TIMEOUT_MS));
		odx_buffer_destroy(a[i]);
		odx_buffer_destroy(b[i]);
		odx_buffer_destroy(c[i]);
		odx_buffer_destroy(tmp[i]);
	}
}

enum { CH = 8192, NCH = 12 };

static void streaming(odx_context *ctx, bool spread, float *out)
{
	odx_kernel *ka, *ks;
	odx_buffer *x[NCH], *y[NCH];
	float host[CH];
	int i, j, n = odx_size(ctx);

	CHECK(ctx, odx_kernel_builtin(ctx, "odx.axpy_f32", &ka));
	CHECK(ctx, odx_kernel_builtin(ctx, "odx.scale_f32", &ks));
	for (i = 0; i < NCH; i++) {
		CHECK(ctx, odx_buffer_create(ctx, sizeof(host), 0, &x[i]));
		CHECK(ctx, odx_buffer_create(ctx, sizeof(host), 0, &y[i]));
		if (spread) {
			/* x on one rank, y on the next: every axpy needs a transfer */
			CHECK(ctx, odx_buffer_set_owner(x[i], odx_owner_cyclic(i, n)));
			CHECK(ctx, odx_buffer_set_owner(y[i], odx_owner_cyclic(i + 1, n)));
		}
		for (j = 0; j < CH; j++)
			host[j] = (float)((i * 131 + j * 7) % 1000);
		CHECK(ctx, odx_buffer_write(x[i], 0, host, sizeof(host), TIMEOUT_MS));
		submit(ctx, ks, (odx_arg[]){ODX_BUF(x[i], ODX_RW), ODX_F32(0.25f), ODX_I32(CH)}, 3, CH);
		submit(ctx, ka,
		       (odx_arg[]){ODX_BUF(x[i], ODX_R), ODX_BUF(y[i], ODX_RW), ODX_F32(3.0f),
				   ODX_I32(CH)},
		       4, CH);
		if (i > 0) /* and a chain across chunks */
			submit(ctx, ka,
			       (odx_arg[]){ODX_BUF(y[i - 1], ODX_R), ODX_BUF(y[i], ODX_RW),
					   ODX_F32(0.5f), ODX_I32(CH)},
			       4, CH);
	}
	for (i = 0; i < NCH; i++) {
		CHECK(ctx, odx_buffer_read(y[i], 0, out + i * CH, sizeof(host), TIMEOUT_MS));
		odx_buffer_destroy(x[i]);
		odx_buffer_destroy(y[i]);
	}
}

enum { RB = 16, RW = 4096 };

static void random_graph(odx_context *ctx, bool spread, uint32_t *out)
{
	odx_kernel *kc, *kf, *ka;
	odx_buffer *b[RB];
	uint32_t host[RW];
	uint64_t seed = 12345, oseed = 777;
	int i, j, n = odx_size(ctx);

	CHECK(ctx, odx_kernel_builtin(ctx, "odx.copy_u32", &kc));
	CHECK(ctx, odx_kernel_builtin(ctx, "odx.fill_u32", &kf));
	CHECK(ctx, odx_kernel_builtin(ctx, "odx.axpy_f32", &ka));
	for (i = 0; i < RB; i++) {
		CHECK(ctx, odx_buffer_create(ctx, sizeof(host), 0, &b[i]));
		/* b[0] on the last rank: with more than 64 ranks, a holder beyond the first word */
		if (spread)
			CHECK(ctx, odx_buffer_set_owner(b[i],
							i == 0 ? n - 1
							       : (int)(rnd(&oseed) % (uint64_t)n)));
	}
	for (i = 0; i < 300; i++) {
		int x = (int)(rnd(&seed) % RB), y = (int)(rnd(&seed) % RB);

		if (y == x)
			y = (x + 1) % RB;
		switch (rnd(&seed) % 6) {
		case 0:
			submit(ctx, kc, (odx_arg[]){ODX_BUF(b[x], ODX_R), ODX_BUF(b[y], ODX_W), ODX_I32(RW)},
			       3, RW);
			break;
		case 1:
			submit(ctx, kf,
			       (odx_arg[]){ODX_BUF(b[y], ODX_W), ODX_I32(i * 2654435), ODX_I32(RW)}, 3,
			       RW);
			break;
		case 2:
		case 3:
			submit(ctx, ka,
			       (odx_arg[]){ODX_BUF(b[x], ODX_R), ODX_BUF(b[y], ODX_RW), ODX_F32(0.75f),
					   ODX_I32(RW)},
			       4, RW);
			break;
		case 4:
			for (j = 0; j < RW; j++)
				host[j] = (uint32_t)(i * 7 + j) & 0x3fffffff;
			/* a partial write: the rest must be the latest everywhere */
			CHECK(ctx, odx_buffer_write(b[y], 64, host, sizeof(host) / 2, TIMEOUT_MS));
			break;
		default:
			CHECK(ctx, odx_buffer_read(b[x], 0, host, sizeof(host), TIMEOUT_MS));
			break;
		}
	}
	for (i = 0; i < RB; i++) {
		CHECK(ctx, odx_buffer_read(b[i], 0, out + i * RW, sizeof(host), TIMEOUT_MS));
		odx_buffer_destroy(b[i]);
	}
}

static int compare(const char *what, const void *a, const void *b, size_t n)
{
	if (memcmp(a, b, n) == 0) {
		printf("rank %d: %s: spread over the ranks == all on rank 0 (%zu bytes)\n", rank_,
		       what, n);
		return 0;
	}
	fprintf(stderr, "rank %d: %s: results differ between the spread run and rank 0 alone\n",
		rank_, what);
	return 1;
}

/*
 * DIST_TEST_KILL=1: the last rank vanishes (exit without closing) while the others wait for data
 * it owns. Every other rank must see the failure as an error naming that rank within the peer
 * timeout, not hang. Exit 0 when it did.
 */
static int killed_rank(void)
{
	odx_context *ctx;
	odx_buffer *x, *y;
	odx_kernel *ka;
	float host[1024];
	int rc, last;

	CHECK(NULL, odx_open(&ctx, NULL));
	rank_ = odx_rank(ctx);
	last = odx_size(ctx) - 1;
	CHECK(ctx, odx_kernel_builtin(ctx, "odx.axpy_f32", &ka));
	CHECK(ctx, odx_buffer_create(ctx, sizeof(host), 0, &x));
	CHECK(ctx, odx_buffer_create(ctx, sizeof(host), 0, &y));
	CHECK(ctx, odx_buffer_set_owner(x, last));
	/* x is written on the last rank, then needed on rank 0 */
	submit(ctx, ka, (odx_arg[]){ODX_BUF(y, ODX_R), ODX_BUF(x, ODX_RW), ODX_F32(1.0f), ODX_I32(1024)},
	       4, 1024);
	if (rank_ == last) {
		printf("rank %d: leaving without a word\n", rank_);
		fflush(stdout);
		_exit(0);
	}
	submit(ctx, ka, (odx_arg[]){ODX_BUF(x, ODX_R), ODX_BUF(y, ODX_RW), ODX_F32(1.0f), ODX_I32(1024)},
	       4, 1024);
	rc = odx_wait_all_ranks(ctx, TIMEOUT_MS);
	printf("rank %d: odx_wait_all_ranks: %s: %s\n", rank_, odx_err_name(rc), odx_last_error(ctx));
	char who[32];

	snprintf(who, sizeof(who), "rank %d", last);
	/* the message names the rank that vanished */
	if (rc == 0 || strstr(odx_last_error(ctx), who) == NULL) {
		fprintf(stderr, "rank %d: the vanished rank went unnoticed\n", rank_);
		return 1;
	}
	odx_buffer_destroy(x);
	odx_buffer_destroy(y);
	odx_close(ctx);
	return 0;
}

int main(void)
{
	odx_context *ctx;
	size_t gn = T * T * TS * TS * sizeof(float), sn = NCH * CH * sizeof(float);
	size_t rn = RB * RW * sizeof(uint32_t);
	int fails = 0;

	alarm(150); /* the whole job's deadline, whatever hangs */
	if (getenv("DIST_TEST_KILL") && strcmp(getenv("DIST_TEST_KILL"), "1") == 0)
		return killed_rank();
	float *g1 = calloc(1, gn), *g2 = calloc(1, gn), *s1 = calloc(1, sn), *s2 = calloc(1, sn);
	uint32_t *r1 = calloc(1, rn), *r2 = calloc(1, rn);
	CHECK(NULL, odx_open(&ctx, NULL));
	rank_ = odx_rank(ctx);
	printf("rank %d of %d\n", rank_, odx_size(ctx));
	gemm(ctx, false, g1);
	gemm(ctx, true, g2);
	streaming(ctx, false, s1);
	streaming(ctx, true, s2);
	random_graph(ctx, false, r1);
	random_graph(ctx, true, r2);
	CHECK(ctx, odx_wait_all_ranks(ctx, TIMEOUT_MS));
	fails += compare("tiled gemm", g1, g2, gn);
	fails += compare("streaming", s1, s2, sn);
	fails += compare("random graph", r1, r2, rn);
	CHECK(ctx, odx_close(ctx));
	free(g1);
	free(g2);
	free(s1);
	free(s2);
	free(r1);
	free(r2);
	return fails ? 1 : 0;
}
