/* SPDX-License-Identifier: Apache-2.0 */
/*
 * saxpy_pipeline.c - a chain of tasks over blocks of two vectors.
 *
 * x and y are split into B blocks, one ODX buffer each. Every block goes through its own
 * pipeline
 *
 *	write x, y from the host -> S x saxpy: y = a*x + y (x R, y RW) -> scale: y = s*y (y RW)
 *
 * with the standard kernels odx.axpy_f32 and odx.scale_f32, which have a variant for every
 * backend: the same binary runs on host devices, Vulkan, OpenCL or CUDA by configuration alone
 * (ODX_BACKENDS=opencl saxpy_pipeline). ODX infers the dependencies from the access modes, so the
 * B pipelines run side by side on every device while the tasks of one block run in order. At the
 * end y is read back and every element is checked against the same computation done
 * sequentially on the host.
 *
 *	usage: saxpy_pipeline [N [BLOCKS [STEPS]]]	(default 16777216 16 4)
 *	       ODX_HOST_DEVICES=2 saxpy_pipeline	(any ODX_* variable or odx.conf applies)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <odx/odx.h>

#define PROGRAM "saxpy_pipeline"

#define SAXPY_A 0.5f		/* a of y = a*x + y */
#define SCALE_S 0.25f		/* s of the final y = s*y */
#define BLOCK 256		/* work-items per group */
#define MAX_GROUPS 4096		/* the standard kernels loop with a grid stride beyond this */

/* Prints what failed and why, then exits: the error handling every example needs. */
static void check(odx_context *ctx, int rc, const char *what)
{
	if (rc >= 0)
		return;
	/* with ctx NULL: why odx_open failed, if it did */
	const char *why = odx_last_error(ctx);

	fprintf(stderr, "%s: %s failed: %s (%s)%s%s\n", PROGRAM, what, odx_err_name(rc),
		odx_strerror(rc), why[0] ? ": " : "", why);
	exit(1);
}

/*
 * Opens a context from the environment (ODX_*) and the config file, as odx_open(&ctx, NULL)
 * would; the empty odx_config is only there to say why opening failed.
 */
static odx_context *open_context(void)
{
	odx_config *cfg;
	odx_context *ctx;
	int rc = odx_config_create(&cfg);

	check(NULL, rc, "odx_config_create");
	rc = odx_open(&ctx, cfg);
	if (rc < 0) {
		fprintf(stderr, "%s: odx_open failed: %s (%s): %s\n", PROGRAM, odx_err_name(rc),
			odx_strerror(rc), odx_config_error(cfg));
		exit(1);
	}
	odx_config_destroy(cfg);
	return ctx;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The initial values of element i (a global index), written by the host and used by the check. */
static inline float x_init(uint64_t i)
{
	return (float)(i % 1024) * 0.001f;
}

static inline float y_init(uint64_t i)
{
	return (float)(i % 7) - 3.0f;
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 16777216;
	int nblocks = argc > 2 ? atoi(argv[2]) : 16;
	int steps = argc > 3 ? atoi(argv[3]) : 4;

	if (n == 0 || n > INT32_MAX || nblocks < 1 || (size_t)nblocks > n || steps < 0) {
		fprintf(stderr, "usage: %s [N [BLOCKS [STEPS]]]  (N >= BLOCKS >= 1, STEPS >= 0)\n",
			argv[0]);
		return 2;
	}

	/* The environment (ODX_HOST_DEVICES=2, ...) and odx.conf decide the devices. */
	odx_context *ctx = open_context();

	/* The standard kernels: one variant per backend, all built into libodx. */
	odx_kernel *saxpy, *scale;
	check(ctx, odx_kernel_builtin(ctx, "odx.axpy_f32", &saxpy), "odx_kernel_builtin");
	check(ctx, odx_kernel_builtin(ctx, "odx.scale_f32", &scale), "odx_kernel_builtin");

	/* Block b holds elements [first[b], first[b + 1]); the first n % B blocks get one more. */
	odx_buffer **x = calloc(nblocks, sizeof(*x));
	odx_buffer **y = calloc(nblocks, sizeof(*y));
	size_t *first = calloc(nblocks + 1, sizeof(*first));
	if (!x || !y || !first) {
		fprintf(stderr, "%s: out of memory\n", PROGRAM);
		return 1;
	}
	for (int b = 0; b < nblocks; b++)
		first[b + 1] = first[b] + n / nblocks + ((size_t)b < n % nblocks);
	for (int b = 0; b < nblocks; b++) {
		size_t bytes = (first[b + 1] - first[b]) * sizeof(float);

		check(ctx, odx_buffer_create(ctx, bytes, 0, &x[b]), "odx_buffer_create");
		check(ctx, odx_buffer_create(ctx, bytes, 0, &y[b]), "odx_buffer_create");
	}

	/* The initial values, block by block, as the host would have them. */
	float *xs = malloc(n * sizeof(float)), *ys = malloc(n * sizeof(float));
	if (!xs || !ys) {
		fprintf(stderr, "%s: out of memory\n", PROGRAM);
		return 1;
	}
	for (size_t i = 0; i < n; i++) {
		xs[i] = x_init(i);
		ys[i] = y_init(i);
	}

	/* Submit every pipeline; nothing waits for a kernel until odx_wait_all (a write waits
	 * only for earlier tasks on its own buffer, and there are none yet). */
	double t0 = now_s();
	for (int b = 0; b < nblocks; b++) {
		size_t len = first[b + 1] - first[b];
		size_t groups = (len + BLOCK - 1) / BLOCK;
		char tag[64]; /* copied by odx_submit, so one array serves every task */
		odx_task_opts opts = {
			.tag = tag,
			.grid = {(uint32_t)(groups < MAX_GROUPS ? groups : MAX_GROUPS), 1, 1},
			.block = {BLOCK, 1, 1},
		};
		const odx_arg saxpy_args[] = {
			ODX_BUF(x[b], ODX_R), ODX_BUF(y[b], ODX_RW), ODX_F32(SAXPY_A),
			ODX_I32((int32_t)len),
		};
		const odx_arg scale_args[] = {ODX_BUF(y[b], ODX_RW), ODX_F32(SCALE_S),
					      ODX_I32((int32_t)len)};

		check(ctx, odx_buffer_write(x[b], 0, xs + first[b], len * sizeof(float), -1),
		      "odx_buffer_write");
		check(ctx, odx_buffer_write(y[b], 0, ys + first[b], len * sizeof(float), -1),
		      "odx_buffer_write");
		for (int s = 0; s < steps; s++) {
			snprintf(tag, sizeof(tag), "saxpy[%d] step %d", b, s);
			check(ctx, odx_submit(ctx, saxpy, saxpy_args, 4, &opts, NULL),
			      "odx_submit");
		}
		snprintf(tag, sizeof(tag), "scale[%d]", b);
		check(ctx, odx_submit(ctx, scale, scale_args, 3, &opts, NULL), "odx_submit");
	}
	check(ctx, odx_wait_all(ctx, -1), "odx_wait_all");
	double elapsed = now_s() - t0;

	/* Read y back (this brings a valid copy to host memory) and check it element by element
	 * against the same float operations done sequentially. */
	float *result = malloc(n * sizeof(float));
	if (!result) {
		fprintf(stderr, "%s: out of memory\n", PROGRAM);
		return 1;
	}
	for (int b = 0; b < nblocks; b++)
		check(ctx, odx_buffer_read(y[b], 0, result + first[b],
					   (first[b + 1] - first[b]) * sizeof(float), -1),
		      "odx_buffer_read");

	size_t bad = 0;
	for (size_t i = 0; i < n; i++) {
		float xi = x_init(i), yi = y_init(i);

		for (int s = 0; s < steps; s++)
			yi = SAXPY_A * xi + yi;
		yi = SCALE_S * yi;
		/* Same operations in the same order: only a compiler contracting a*x+y into an
		 * FMA in one place and not the other could tell them apart, hence the tolerance. */
		if (fabsf(result[i] - yi) > 1e-6f * (1.0f + fabsf(yi))) {
			if (bad++ < 5)
				fprintf(stderr, "mismatch at %zu: got %.9g, expected %.9g\n", i,
					(double)result[i], (double)yi);
		}
	}

	/* Bytes the kernels touch: a saxpy reads x and y and writes y, scale reads and writes y.
	 * The time also holds the initial writes and the copies to the devices. */
	double bytes = (double)n * sizeof(float) * (3.0 * steps + 2);
	long ntasks = (long)nblocks * (steps + 1);
	odx_device_info dev;
	check(ctx, odx_device_get_info(ctx, 0, &dev), "odx_device_get_info");
	printf("saxpy_pipeline: n=%zu blocks=%d steps=%d devices=%d (%s: %s)\n", n, nblocks,
	       steps, odx_device_count(ctx), dev.kind_name, dev.name);
	printf("  time      %.3f s (first submit to odx_wait_all)\n", elapsed);
	printf("  bandwidth %.2f GB/s moved by the kernels\n", bytes / elapsed * 1e-9);
	printf("  tasks     %ld, %.0f tasks/s\n", ntasks, ntasks / elapsed);
	printf("  verify    %s (%zu of %zu elements wrong)\n", bad ? "FAILED" : "ok", bad, n);

	for (int b = 0; b < nblocks; b++) {
		check(ctx, odx_buffer_destroy(x[b]), "odx_buffer_destroy");
		check(ctx, odx_buffer_destroy(y[b]), "odx_buffer_destroy");
	}
	check(NULL, odx_close(ctx), "odx_close");
	free(result);
	free(ys);
	free(xs);
	free(first);
	free(y);
	free(x);
	return bad ? 1 : 0;
}
