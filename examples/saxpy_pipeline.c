/* SPDX-License-Identifier: Apache-2.0 */
/*
 * saxpy_pipeline.c - a chain of tasks over blocks of two vectors.
 *
 * x and y are split into B blocks, one ODX buffer each. Every block goes through its own
 * pipeline
 *
 *	init (x W, y W) -> S x saxpy: y = a*x + y (x R, y RW) -> scale: y = s*y (y RW)
 *
 * ODX infers the dependencies from the access modes, so the B pipelines run side by side on
 * every device while the tasks of one block run in order. At the end y is read back and every
 * element is checked against the same computation done sequentially on the host.
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
#define GROUP_ELEMS 65536	/* elements per work-group: the unit a host thread takes */

/* Prints what failed and why, then exits: the error handling every example needs. */
static void check(odx_context *ctx, int rc, const char *what)
{
	if (rc >= 0)
		return;
	fprintf(stderr, "%s: %s failed: %s (%s)%s%s\n", PROGRAM, what, odx_err_name(rc),
		odx_strerror(rc), ctx ? ": " : "", ctx ? odx_last_error(ctx) : "");
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

/* The initial values of element i (a global index), shared by the kernel and the check. */
static inline float x_init(uint64_t i)
{
	return (float)(i % 1024) * 0.001f;
}

static inline float y_init(uint64_t i)
{
	return (float)(i % 7) - 3.0f;
}

/*
 * A block of n elements is cut into grid[0] work-groups; a call covers groups
 * [group_first, group_first + group_count). This gives its element range [*lo, *hi).
 */
static void group_range(const odx_host_launch *l, size_t n, size_t *lo, size_t *hi)
{
	size_t per_group = (n + l->grid[0] - 1) / l->grid[0];
	size_t first = l->group_first * per_group;
	size_t last = (l->group_first + l->group_count) * per_group;

	*lo = first < n ? first : n;
	*hi = last < n ? last : n;
}

/* init(x W, y W, offset i64): fills the block that starts at global element `offset`. */
static int init_kernel(const odx_host_launch *l)
{
	float *x = l->buffers[0];
	float *y = l->buffers[1];
	uint64_t offset = *(const int64_t *)l->scalars[2];
	size_t lo, hi;

	group_range(l, l->buffer_sizes[0] / sizeof(float), &lo, &hi);
	for (size_t i = lo; i < hi; i++) {
		x[i] = x_init(offset + i);
		y[i] = y_init(offset + i);
	}
	return 0;
}

/* saxpy(x R, y RW, a f32): y = a*x + y. */
static int saxpy_kernel(const odx_host_launch *l)
{
	const float *x = l->buffers[0];
	float *y = l->buffers[1];
	float a = *(const float *)l->scalars[2];
	size_t lo, hi;

	group_range(l, l->buffer_sizes[1] / sizeof(float), &lo, &hi);
	for (size_t i = lo; i < hi; i++)
		y[i] = a * x[i] + y[i];
	return 0;
}

/* scale(y RW, s f32): y = s*y. */
static int scale_kernel(const odx_host_launch *l)
{
	float *y = l->buffers[0];
	float s = *(const float *)l->scalars[1];
	size_t lo, hi;

	group_range(l, l->buffer_sizes[0] / sizeof(float), &lo, &hi);
	for (size_t i = lo; i < hi; i++)
		y[i] = s * y[i];
	return 0;
}

/* Registers a kernel that has only a host variant. */
static odx_kernel *host_kernel(odx_context *ctx, const char *name, const odx_param *params,
			       int nparams, odx_host_fn fn)
{
	odx_kernel_variant variant = {
		.backend = ODX_BACKEND_HOST,
		.format = ODX_FORMAT_HOST_FN,
		.host_fn = fn,
	};
	odx_kernel *kernel;

	check(ctx, odx_kernel_create(ctx, name, params, nparams, &variant, 1, &kernel),
	      "odx_kernel_create");
	return kernel;
}

int main(int argc, char **argv)
{
	size_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 16777216;
	int nblocks = argc > 2 ? atoi(argv[2]) : 16;
	int steps = argc > 3 ? atoi(argv[3]) : 4;

	if (n == 0 || nblocks < 1 || (size_t)nblocks > n || steps < 0) {
		fprintf(stderr, "usage: %s [N [BLOCKS [STEPS]]]  (N >= BLOCKS >= 1, STEPS >= 0)\n",
			argv[0]);
		return 2;
	}

	/* The environment (ODX_HOST_DEVICES=2, ...) and odx.conf decide the devices. */
	odx_context *ctx = open_context();

	const odx_param init_params[] = {
		{ODX_ARG_BUFFER, ODX_W, "x"},
		{ODX_ARG_BUFFER, ODX_W, "y"},
		{ODX_ARG_I64, 0, "offset"},
	};
	const odx_param saxpy_params[] = {
		{ODX_ARG_BUFFER, ODX_R, "x"},
		{ODX_ARG_BUFFER, ODX_RW, "y"},
		{ODX_ARG_F32, 0, "a"},
	};
	const odx_param scale_params[] = {{ODX_ARG_BUFFER, ODX_RW, "y"}, {ODX_ARG_F32, 0, "s"}};
	odx_kernel *init = host_kernel(ctx, "init", init_params, 3, init_kernel);
	odx_kernel *saxpy = host_kernel(ctx, "saxpy", saxpy_params, 3, saxpy_kernel);
	odx_kernel *scale = host_kernel(ctx, "scale", scale_params, 2, scale_kernel);

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

	/* Submit every pipeline; nothing waits until odx_wait_all. */
	double t0 = now_s();
	for (int b = 0; b < nblocks; b++) {
		size_t len = first[b + 1] - first[b];
		char tag[64]; /* copied by odx_submit, so one array serves every task */
		odx_task_opts opts = {
			.tag = tag,
			.grid = {(uint32_t)((len + GROUP_ELEMS - 1) / GROUP_ELEMS), 1, 1},
		};
		const odx_arg init_args[] = {
			ODX_BUF(x[b], ODX_W), ODX_BUF(y[b], ODX_W), ODX_I64((int64_t)first[b]),
		};
		const odx_arg saxpy_args[] = {
			ODX_BUF(x[b], ODX_R), ODX_BUF(y[b], ODX_RW), ODX_F32(SAXPY_A),
		};
		const odx_arg scale_args[] = {ODX_BUF(y[b], ODX_RW), ODX_F32(SCALE_S)};

		snprintf(tag, sizeof(tag), "init[%d]", b);
		check(ctx, odx_submit(ctx, init, init_args, 3, &opts, NULL), "odx_submit");
		for (int s = 0; s < steps; s++) {
			snprintf(tag, sizeof(tag), "saxpy[%d] step %d", b, s);
			check(ctx, odx_submit(ctx, saxpy, saxpy_args, 3, &opts, NULL),
			      "odx_submit");
		}
		snprintf(tag, sizeof(tag), "scale[%d]", b);
		check(ctx, odx_submit(ctx, scale, scale_args, 2, &opts, NULL), "odx_submit");
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

	/* Bytes the kernels touch: init writes x and y, a saxpy reads x and y and writes y,
	 * scale reads and writes y. init also pays the page faults of fresh memory, so more
	 * steps bring the figure closer to the memory bandwidth. */
	double bytes = (double)n * sizeof(float) * (2 + 3.0 * steps + 2);
	long ntasks = (long)nblocks * (steps + 2);
	printf("saxpy_pipeline: n=%zu blocks=%d steps=%d devices=%d\n", n, nblocks, steps,
	       odx_device_count(ctx));
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
	free(first);
	free(y);
	free(x);
	return bad ? 1 : 0;
}
