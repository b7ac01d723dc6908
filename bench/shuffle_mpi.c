/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shuffle_mpi.c - the anchor of bench/shuffle: a distributed hash group-by written as a plain MPI
 * program, the way a user would without ODX. Same rows (generator), same partition of keys and
 * same hash table algorithm as examples/groupby.c (bench/shuffle_common.h):
 *
 *   every rank: its rows (untimed) -> barrier, clock starts ->
 *     partition by fmix32(key) % P: count, prefix sum, scatter keys and values into send buffers
 *     -> MPI_Alltoall of the counts -> MPI_Alltoallv of keys, then of values
 *     -> group-by (count, f64 sum of the f32 values) into an open-addressing table
 *     -> barrier, clock stops.
 *
 * One thread per rank, no pre-aggregation (a plain program: the combiner is ODX's to show).
 * The table starts at sc_capacity's size and grows at half full, so it never fails. With -r, the
 * table and the receive buffers are kept between repetitions, as the ODX side keeps its buffers,
 * and the table is emptied before the clock starts, as ODX resets its table untimed.
 * Rank 0 prints one line of text and one JSON line with the median time of the repetitions and
 * the digest of the result (key count, rows, checksum: bench/shuffle.sh checks that ODX prints the
 * same), and every run checks that the rows it aggregated are the rows it generated.
 *
 *	usage: mpirun -n P shuffle_mpi [-n ROWS_PER_RANK] [-k KEYS] [-z ZIPF_S] [-s SEED] [-r REPS]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "shuffle_common.h"

#define PROGRAM "shuffle_mpi"

static void die(const char *what)
{
	fprintf(stderr, "%s: %s\n", PROGRAM, what);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

static void *xmalloc(size_t size)
{
	void *p = malloc(size ? size : 1);

	if (!p)
		die("out of memory");
	return p;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint64_t rows = 1u << 20, nkeys = 1000000, seed = 42;
	double zipf_s = 0;
	int reps = 1, rank, size, opt;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	while ((opt = getopt(argc, argv, "n:k:z:s:r:")) != -1) {
		switch (opt) {
		case 'n': rows = strtoull(optarg, NULL, 0); break;
		case 'k': nkeys = strtoull(optarg, NULL, 0); break;
		case 'z': zipf_s = strtod(optarg, NULL); break;
		case 's': seed = strtoull(optarg, NULL, 0); break;
		case 'r': reps = atoi(optarg); break;
		default:
			if (rank == 0)
				fprintf(stderr, "usage: %s [-n ROWS_PER_RANK] [-k KEYS] [-z ZIPF_S] "
						"[-s SEED] [-r REPS]\n", PROGRAM);
			MPI_Finalize();
			return 2;
		}
	}
	/* MPI counts are ints: keep every count and displacement below 2^31 */
	if (rows == 0 || rows * (uint64_t)size > INT32_MAX || nkeys == 0 || nkeys > UINT32_MAX ||
	    reps < 1)
		die("bad sizes: 1 <= rows x ranks < 2^31, 1 <= keys < 2^32, reps >= 1");

	sc_keys ks;
	if (sc_keys_init(&ks, (uint32_t)nkeys, zipf_s))
		die("out of memory");
	uint32_t *keys = xmalloc(rows * sizeof(*keys));
	float *vals = xmalloc(rows * sizeof(*vals));
	uint32_t *skeys = xmalloc(rows * sizeof(*skeys));
	float *svals = xmalloc(rows * sizeof(*svals));
	int *scount = xmalloc(size * sizeof(int)), *sdisp = xmalloc(size * sizeof(int));
	int *rcount = xmalloc(size * sizeof(int)), *rdisp = xmalloc(size * sizeof(int));
	int *fill = xmalloc(size * sizeof(int));
	double *times = xmalloc(reps * sizeof(double));
	sc_digest total = {0, 0, 0};

	/* what the ODX side keeps between repetitions too: the table (emptied untimed, as ODX
	 * resets its own) and the receive buffers (grown when a repetition needs more) */
	sc_table table;
	uint32_t *rkeys = NULL;
	float *rvals = NULL;
	long rcap = 0;

	if (sc_table_init(&table, sc_capacity(nkeys, rows * size, (uint32_t)size)))
		die("out of memory");
	sc_rows(&ks, seed, (uint32_t)rank, 0, rows, keys, vals);
	for (int rep = 0; rep < reps; rep++) {
		long recv = 0;

		memset(table.slots, 0, table.capacity * sizeof(*table.slots));
		table.used = 0;
		MPI_Barrier(MPI_COMM_WORLD);
		double t0 = MPI_Wtime();

		/* partition: counts, their prefix sum, then each row to its place (stable) */
		memset(scount, 0, size * sizeof(int));
		for (uint64_t i = 0; i < rows; i++)
			scount[sc_part(keys[i], (uint32_t)size)]++;
		for (int d = 0, at = 0; d < size; d++) {
			sdisp[d] = fill[d] = at;
			at += scount[d];
		}
		for (uint64_t i = 0; i < rows; i++) {
			int at = fill[sc_part(keys[i], (uint32_t)size)]++;

			skeys[at] = keys[i];
			svals[at] = vals[i];
		}

		/* the exchange: counts first, then each column */
		MPI_Alltoall(scount, 1, MPI_INT, rcount, 1, MPI_INT, MPI_COMM_WORLD);
		for (int s = 0; s < size; s++) {
			rdisp[s] = (int)recv;
			recv += rcount[s];
		}
		if (recv > rcap) {
			free(rkeys);
			free(rvals);
			rkeys = xmalloc(recv * sizeof(*rkeys));
			rvals = xmalloc(recv * sizeof(*rvals));
			rcap = recv;
		}
		MPI_Alltoallv(skeys, scount, sdisp, MPI_UINT32_T, rkeys, rcount, rdisp,
			      MPI_UINT32_T, MPI_COMM_WORLD);
		MPI_Alltoallv(svals, scount, sdisp, MPI_FLOAT, rvals, rcount, rdisp, MPI_FLOAT,
			      MPI_COMM_WORLD);

		/* the group-by */
		for (long i = 0; i < recv; i++)
			if (sc_table_add(&table, rkeys[i], 1, (double)rvals[i]))
				die("out of memory");

		MPI_Barrier(MPI_COMM_WORLD);
		times[rep] = MPI_Wtime() - t0;

		sc_digest mine = sc_table_digest(&table), all;
		MPI_Reduce(&mine, &all, 3, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rep == 0)
			total = all;
		else if (rank == 0 && memcmp(&all, &total, sizeof(all)) != 0)
			die("the repetitions disagree");
	}
	sc_table_free(&table);
	free(rkeys);
	free(rvals);

	if (rank == 0) {
		qsort(times, reps, sizeof(*times), cmp_double);
		double t = times[reps / 2];
		double rate = (double)rows * size / t;
		bool ok = total.rows == rows * (uint64_t)size;

		printf("%s: %d ranks x %llu rows, %llu keys, %s: %.4f s (median of %d), "
		       "%.1f Mrows/s, %llu groups, checksum %016llx, rows %s\n", PROGRAM, size,
		       (unsigned long long)rows, (unsigned long long)nkeys,
		       zipf_s > 0 ? "zipf" : "uniform", t, reps, rate / 1e6,
		       (unsigned long long)total.keys, (unsigned long long)total.checksum,
		       ok ? "ok" : "LOST");
		printf("{\"bench\":\"shuffle\",\"side\":\"mpi\",\"ranks\":%d,\"rows_per_rank\":%llu,"
		       "\"keys\":%llu,\"zipf_s\":%g,\"seed\":%llu,\"seconds\":%.6f,"
		       "\"rows_per_s\":%.0f,\"groups\":%llu,\"rows\":%llu,"
		       "\"checksum\":\"%016llx\",\"verified\":%s}\n", size,
		       (unsigned long long)rows, (unsigned long long)nkeys, zipf_s,
		       (unsigned long long)seed, t, rate, (unsigned long long)total.keys,
		       (unsigned long long)total.rows, (unsigned long long)total.checksum,
		       ok ? "true" : "false");
		fflush(stdout);
		if (!ok)
			die("rows were lost in the exchange");
	}
	sc_keys_free(&ks);
	free(keys);
	free(vals);
	free(skeys);
	free(svals);
	free(scount);
	free(sdisp);
	free(rcount);
	free(rdisp);
	free(fill);
	free(times);
	MPI_Finalize();
	return 0;
}
