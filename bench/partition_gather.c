/* SPDX-License-Identifier: Apache-2.0 */
/*
 * partition_gather.c - the cost of gathering a partition whose tiles were last written on a
 * device (docs/partitions.md): an n x n float matrix cut into nb x nb tiles, every tile scaled on
 * a device of the chosen backend (its latest copy then lives there, packed), then
 * odx_buffer_unpartition writes each one back into the parent with a strided copy. Prints one
 * JSON line: the median and range of the unpartition's time over the repetitions.
 *
 *   partition_gather [-b vulkan|opencl|host] [-n N] [-t NB] [-r REPS]
 *
 * A figure, not a test: the tiles' bytes are checked once at the end so that a fast wrong gather
 * cannot pass for a fast one.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "odx/odx.h"

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

#define CHECK(call)                                                                                \
	do {                                                                                       \
		int rc_ = (call);                                                                  \
		if (rc_) {                                                                         \
			fprintf(stderr, "%s: %s: %s\n", #call, odx_err_name(rc_),                  \
				odx_last_error(ctx));                                              \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

int main(int argc, char **argv)
{
	const char *backend = "vulkan";
	size_t n = 2048, nb = 256;
	int reps = 5, opt, dev = -1;
	char backends[64], key[64];
	odx_config *cfg = NULL;
	odx_context *ctx = NULL;
	odx_kernel *scale;
	odx_buffer *a, **parts;
	float *m;
	double *ms;
	size_t mt;

	while ((opt = getopt(argc, argv, "b:n:t:r:")) != -1) {
		switch (opt) {
		case 'b': backend = optarg; break;
		case 'n': n = strtoul(optarg, NULL, 10); break;
		case 't': nb = strtoul(optarg, NULL, 10); break;
		case 'r': reps = atoi(optarg); break;
		default:
			fprintf(stderr, "usage: %s [-b vulkan|opencl|host] [-n N] [-t NB] [-r REPS]\n",
				argv[0]);
			return 2;
		}
	}
	if (n == 0 || nb == 0 || n % nb || reps < 1) {
		fprintf(stderr, "N must be a multiple of NB, REPS >= 1\n");
		return 2;
	}
	mt = n / nb;
	/* "host": two host devices, the second with memory of its own (host.memnode=private). */
	snprintf(backends, sizeof(backends), strcmp(backend, "host") ? "host,%s" : "%s", backend);
	snprintf(key, sizeof(key), "%s.allow_cpu", backend);
	if (odx_config_create(&cfg) || odx_config_set(cfg, "backends", backends) ||
	    odx_config_set(cfg, "host.devices", "1") || odx_config_set(cfg, "host.bind", "false") ||
	    (strcmp(backend, "host") && odx_config_set(cfg, key, "true")) ||
	    (!strcmp(backend, "host") && odx_config_set(cfg, "host.memnode", "private")) ||
	    (!strcmp(backend, "host") && odx_config_set(cfg, "host.devices", "2"))) {
		fprintf(stderr, "config: %s\n", odx_config_error(cfg));
		return 1;
	}
	if (odx_open(&ctx, cfg)) {
		fprintf(stderr, "odx_open: %s\n", odx_last_error(NULL));
		return 77;
	}
	odx_config_destroy(cfg);
	/* The device the tiles move to: the last one (the backend's, or the second host device
	 * with memory of its own). */
	dev = odx_device_count(ctx) - 1;
	if (dev < 1) {
		fprintf(stderr, "no %s device here\n", backend);
		odx_close(ctx);
		return 77;
	}
	CHECK(odx_kernel_builtin(ctx, "odx.scale_f32", &scale));
	m = malloc(n * n * sizeof(float));
	parts = calloc(mt * mt, sizeof(*parts));
	ms = calloc((size_t)reps, sizeof(*ms));
	for (size_t e = 0; e < n * n; e++)
		m[e] = (float)(e % 1000);
	CHECK(odx_buffer_register(ctx, m, n * n * sizeof(float), 0, &a));
	for (int r = 0; r < reps; r++) {
		odx_partition p = {.kind = ODX_PART_TILES, .elem_size = sizeof(float), .rows = n,
				   .cols = n, .ld = n, .tile_rows = nb, .tile_cols = nb};
		double t0;

		CHECK(odx_buffer_partition(a, &p, (int)(mt * mt), parts, -1));
		for (size_t q = 0; q < mt * mt; q++) {
			odx_arg args[] = {ODX_BUF(parts[q], ODX_RW), ODX_F32(2.0f),
					  ODX_I32((int32_t)(nb * nb))};
			odx_task_opts o = {.flags = ODX_SUBMIT_ON_DEVICE, .on_device = dev,
					   .grid = {(uint32_t)((nb * nb + 255) / 256), 1, 1},
					   .block = {256, 1, 1}};

			CHECK(odx_submit(ctx, scale, args, 3, &o, NULL));
		}
		CHECK(odx_wait_all(ctx, -1));
		t0 = now_ms();
		CHECK(odx_buffer_unpartition(a, -1));
		ms[r] = now_ms() - t0;
	}
	CHECK(odx_wait_all(ctx, -1));
	for (size_t e = 0; e < n * n; e++) {
		float want = (float)(e % 1000);

		for (int r = 0; r < reps; r++)
			want *= 2.0f;
		if (m[e] != want) {
			fprintf(stderr, "element %zu is %g, expected %g\n", e, (double)m[e],
				(double)want);
			return 1;
		}
	}
	qsort(ms, (size_t)reps, sizeof(*ms), cmp_double);
	printf("{\"bench\": \"partition_gather\", \"backend\": \"%s\", \"n\": %zu, \"tile\": %zu, "
	       "\"parts\": %zu, \"reps\": %d, \"unpartition_ms_median\": %.3f, "
	       "\"unpartition_ms_min\": %.3f, \"unpartition_ms_max\": %.3f}\n",
	       backend, n, nb, mt * mt, reps, ms[reps / 2], ms[0], ms[reps - 1]);
	odx_buffer_destroy(a);
	odx_close(ctx);
	free(m);
	free(parts);
	free(ms);
	return 0;
}
