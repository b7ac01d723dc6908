/* SPDX-License-Identifier: Apache-2.0 */
/*
 * combine.c - odx.hash_combine's host code for u32 keys and f32 values on one thread, without
 * the runtime: the kernel body (src/hash_combine.cl, one table of 256 slots per group, as every
 * backend runs it) against the host's own table (kernels/host_combine.c, one table per call),
 * over the group-by benchmark's rows (bench/shuffle_common.h), alternated, thread CPU time per
 * row. Both files are compiled in here as they are into libodx. Not a test.
 *
 *	usage: combine [-n ROWS] [-k KEYS] [-z ZIPF_S] [-g GROUPS] [-p PARTS] [-r ROUNDS]
 *
 * -g is the kernel body's groups (its tables of 256 slots; examples/groupby's grid before
 * 2026-11-26 was 4), -s the host table's slots (default 8192: what 32 groups on one thread
 * give). Prints per round the ns per row of both, the share of rows combined, and a pass that
 * only hashes each row to its partition (the floor); then one JSON line with the medians.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <getopt.h>

#include "host_combine.c"
#include "src/hash_combine.cl"
#include "shuffle_common.h"

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint32_t n = 16000000, nkeys = 1000000, groups = 4, parts = 2, slots = 8192, rounds = 5;
	double zipf = 1.1;
	int opt;

	while ((opt = getopt(argc, argv, "n:k:z:g:p:s:r:")) != -1) {
		switch (opt) {
		case 'n': n = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'k': nkeys = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'z': zipf = strtod(optarg, NULL); break;
		case 'g': groups = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'p': parts = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 's': slots = (uint32_t)strtoul(optarg, NULL, 0); break;
		case 'r': rounds = (uint32_t)strtoul(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: combine [-n ROWS] [-k KEYS] [-z ZIPF_S] [-g GROUPS] "
					"[-p PARTS] [-s SLOTS] [-r ROUNDS]\n");
			return 2;
		}
	}
	if (n == 0 || n > INT32_MAX || groups < 1 || parts < 1 || rounds < 1 || slots < CB_WAYS ||
	    (slots & (slots - 1)) != 0) {
		fprintf(stderr, "combine: bad sizes (SLOTS: a power of two >= %d)\n", CB_WAYS);
		return 2;
	}

	sc_keys ks;
	uint32_t *keys = malloc(4ull * n), *pids = malloc(4ull * n);
	float *vals = malloc(4ull * n);
	uint32_t *rk = calloc((size_t)groups * ODX_COMBINE_SLOTS, 4);
	uint32_t *rv = calloc((size_t)groups * ODX_COMBINE_SLOTS * 8, 4);
	uint32_t *rp = calloc((size_t)groups * ODX_COMBINE_SLOTS, 4);
	double *tb = calloc(rounds, 8), *th = calloc(rounds, 8), *tp = calloc(rounds, 8);
	double share_b = 0, share_h = 0;
	cb_table t;

	if (sc_keys_init(&ks, nkeys, zipf) || !keys || !pids || !vals || !rk || !rv || !rp ||
	    !tb || !th || !tp || cb_table_alloc(&t, slots)) {
		fprintf(stderr, "combine: out of memory\n");
		return 1;
	}
	sc_rows(&ks, 42, 0, 0, n, keys, vals);
	for (uint32_t r = 0; r < rounds; r++) {
		odx_item it = {{0}, {0}, {1, 1, 1}, {groups, 1, 1}};
		uint64_t passed = 0;
		double t0 = cpu_s();

		for (uint32_t g = 0; g < groups; g++) {
			it.group[0] = g;
			odx_hash_combine(&it, keys, (const uint32_t *)vals, pids, rk, rv, rp, (int)n,
					 (int)parts, 1, 0);
		}
		tb[r] = (cpu_s() - t0) * 1e9 / n;
		for (uint32_t i = 0; i < n; i++)
			passed += pids[i] != ODX_NO_PART;
		share_b = 1.0 - (double)passed / n;

		t0 = cpu_s();
		cb_stream(&t, slots, keys, vals, pids, 0, n, parts);
		th[r] = (cpu_s() - t0) * 1e9 / n;
		passed = 0;
		for (uint32_t i = 0; i < n; i++)
			passed += pids[i] != ODX_NO_PART;
		share_h = 1.0 - (double)passed / n;

		t0 = cpu_s();
		cb_pass(keys, pids, 0, n, parts);
		tp[r] = (cpu_s() - t0) * 1e9 / n;
		printf("round %u: kernel body %.2f ns/row (%.1f%% combined), host table %.2f ns/row "
		       "(%.1f%% combined), hash only %.2f ns/row\n", r, tb[r], 100 * share_b, th[r],
		       100 * share_h, tp[r]);
	}
	qsort(tb, rounds, 8, cmp_d);
	qsort(th, rounds, 8, cmp_d);
	qsort(tp, rounds, 8, cmp_d);
	printf("{\"bench\":\"combine\",\"rows\":%u,\"keys\":%u,\"zipf_s\":%g,\"groups\":%u,"
	       "\"slots\":%u,\"body_ns\":%.2f,\"host_ns\":%.2f,\"hash_ns\":%.2f,"
	       "\"body_combined\":%.3f,\"host_combined\":%.3f}\n", n, nkeys, zipf, groups, slots,
	       tb[rounds / 2], th[rounds / 2], tp[rounds / 2], share_b, share_h);
	cb_table_free(&t);
	sc_keys_free(&ks);
	free(keys);
	free(pids);
	free(vals);
	free(rk);
	free(rv);
	free(rp);
	free(tb);
	free(th);
	free(tp);
	return 0;
}
