/* SPDX-License-Identifier: Apache-2.0 */
/*
 * abi_offsets.c - backend ABI 1.2 conformance, below the public API: one backend module loaded
 * the way the core loads it (dlopen from $ODX_BACKEND_PATH, odx_backend_entry) and driven
 * through its ops table alone, with a minimal odx_backend_host played by this program
 * (abi_module.c).
 *
 * usage: abi_offsets BACKEND [--fake]
 *   BACKEND is a module name (host, vulkan, opencl, cuda, hip); the backend's configuration
 *   keys come from the environment as the core spells them (vulkan.allow_cpu is
 *   ODX_VULKAN_ALLOW_CPU, cuda.library is ODX_CUDA_LIBRARY). --fake: the CUDA or HIP module
 *   runs over a fake driver (tests/gpu/fake_*.c), whose only kernel is odx_test_axpy.
 *   Exits 77 (skipped) when the backend cannot be opened here.
 *
 * What it checks: the descriptor says ABI 1.2 or newer; mem_align is a power of two; the
 * standard odx.axpy_f32 kernel launched with its buffers at nonzero, aligned offsets of one
 * allocation reads and writes exactly those regions (sentinel bytes in the gaps, and a region
 * right behind another, stay untouched); repeated launches on the same regions; copies at
 * unaligned offsets inside a region; many regions of one allocation; an allocation freed and
 * allocated again (a backend caching per-region objects must not hand out stale ones); the
 * optional host_alloc/host_free pair; for the host backend, odx_host_launch.buffer_shapes (ABI 1.7)
 * of work-group and one-call variants, from odx_backend_launch.shapes or one run per buffer;
 * odx_host_launch.buffer_lengths and set_length (ABI 1.8), by buffer parameter, reaching the
 * core's set_length by argument.
 */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "abi_module.h"
#include "builtin.h"
#include "kernels_config.h"
#include "odx/backend.h"

#define N 1001	      /* elements per region: 4004 bytes, not a multiple of any alignment */
#define SENTINEL 0xa5 /* every byte no launch or copy may touch */

/* ---- the standard kernel's images (libodx's own arrays, linked from its objects) ---------- */

extern const unsigned char odx__cl_axpy_f32[];
extern const size_t odx__cl_axpy_f32_size;
#if ODX_KERNELS_SPIRV
extern const unsigned char odx__spv_axpy_f32[];
extern const size_t odx__spv_axpy_f32_size;
#endif
#if ODX_KERNELS_CUDA
extern const unsigned char odx__cubin_axpy_f32[];
extern const size_t odx__cubin_axpy_f32_size;
extern const unsigned char odx__ptx_axpy_f32[];
extern const size_t odx__ptx_axpy_f32_size;
#endif
#if ODX_KERNELS_HIP
extern const unsigned char odx__hipco_axpy_f32[];
extern const size_t odx__hipco_axpy_f32_size;
#endif

/* What this test adds to the harness's module: the kernel it launches. */
static struct {
	bool fake;
	void *module; /* what module_load gave for `variant` */
	odx_kernel_variant variant;
} g;

/* ---- operations -------------------------------------------------------------------------- */

/* y[0..n) at (mem, y_off) += a * x[0..n) at (mem, x_off), through the backend's launch. */
static void axpy(uint64_t mem, size_t x_off, size_t y_off, float a, int n)
{
	odx_backend_arg args[4] = {
		{.kind = ODX_ARG_BUFFER, .mem = mem, .size = (size_t)n * 4, .v.offset = x_off},
		{.kind = ODX_ARG_BUFFER, .mem = mem, .size = (size_t)n * 4, .v.offset = y_off},
		{.kind = ODX_ARG_F32, .v.f32 = a},
		{.kind = ODX_ARG_I32, .v.i32 = n},
	};
	char err[512] = "";
	odx_backend_launch l = {
		.variant = &g.variant,
		.module = g.module,
		.args = args,
		.nargs = 4,
		.grid = {((uint32_t)n + 63) / 64, 1, 1},
		.block = {64, 1, 1},
		.device = 0,
		.tag = "abi_offsets",
		.error = err,
		.error_size = sizeof(err),
	};
	int rc;

	abi_expect_done();
	rc = abi.ops->launch(abi.dev, &l, abi_on_done, abi_waiter());
	if (rc != ODX_BACKEND_PENDING)
		abi_on_done(abi_waiter(), 0, NULL); /* completed already, or failed: no callback comes */
	if (rc < 0)
		fail_msg("launch (x at %zu, y at %zu): %s: %s", x_off, y_off, odx_err_name(rc),
			 err);
}

static size_t round_up(size_t n, size_t a)
{
	return (n + a - 1) / a * a;
}

/* Checks that bytes [from, to) of `img` are all SENTINEL. */
static void assert_untouched(const unsigned char *img, size_t from, size_t to, const char *what)
{
	for (size_t i = from; i < to; i++)
		if (img[i] != SENTINEL)
			fail_msg("byte %zu (%s, [%zu, %zu)) was changed to 0x%02x", i, what, from,
				 to, img[i]);
}

static void assert_floats(const unsigned char *img, size_t off, int n, float (*want)(int, void *),
			  void *arg, const char *what)
{
	for (int i = 0; i < n; i++) {
		float got, expect = want(i, arg);

		memcpy(&got, img + off + (size_t)i * 4, 4);
		if (fabsf(got - expect) > 1e-5f * fabsf(expect) + 1e-6f)
			fail_msg("%s[%d] at offset %zu is %g, expected %g", what, i, off, got,
				 expect);
	}
}

/* ---- setup ---------------------------------------------------------------------------------- */

/* The variants of odx.axpy_f32 that this backend kind may run, in preference order. */
static int candidate_variants(odx_kernel_variant *v)
{
	int n = 0;

	switch (abi.desc->kind) {
	case ODX_BACKEND_HOST:
		v[n++] = (odx_kernel_variant){.backend = ODX_BACKEND_HOST,
					      .format = ODX_FORMAT_HOST_FN,
					      .host_fn = odx__host_axpy_f32,
					      .entry = "odx_axpy_f32"};
		break;
	case ODX_BACKEND_OPENCL:
		v[n++] = (odx_kernel_variant){.backend = ODX_BACKEND_OPENCL,
					      .format = ODX_FORMAT_OPENCL_C,
					      .code = odx__cl_axpy_f32,
					      .code_size = odx__cl_axpy_f32_size,
					      .entry = "odx_axpy_f32"};
		break;
	case ODX_BACKEND_VULKAN:
#if ODX_KERNELS_SPIRV
		v[n++] = (odx_kernel_variant){.backend = ODX_BACKEND_VULKAN,
					      .format = ODX_FORMAT_SPIRV,
					      .code = odx__spv_axpy_f32,
					      .code_size = odx__spv_axpy_f32_size,
					      .entry = "main"};
#endif
		break;
	case ODX_BACKEND_CUDA:
		if (g.fake) {
			v[n++] = (odx_kernel_variant){.backend = ODX_BACKEND_CUDA,
						      .format = ODX_FORMAT_PTX,
						      .code = "ODXFAKE:sm_90",
						      .code_size = 13,
						      .entry = "odx_test_axpy"};
			break;
		}
#if ODX_KERNELS_CUDA
		v[n++] = (odx_kernel_variant){.backend = ODX_BACKEND_CUDA,
					      .format = ODX_FORMAT_CUBIN,
					      .code = odx__cubin_axpy_f32,
					      .code_size = odx__cubin_axpy_f32_size,
					      .entry = "odx_axpy_f32"};
		v[n++] = (odx_kernel_variant){.backend = ODX_BACKEND_CUDA,
					      .format = ODX_FORMAT_PTX,
					      .code = odx__ptx_axpy_f32,
					      .code_size = odx__ptx_axpy_f32_size,
					      .entry = "odx_axpy_f32"};
#endif
		break;
	case ODX_BACKEND_HIP:
		if (g.fake) {
			v[n++] = (odx_kernel_variant){.backend = ODX_BACKEND_HIP,
						      .format = ODX_FORMAT_HIP_CO,
						      .code = "ODXFAKE:gfx90a",
						      .code_size = 14,
						      .entry = "odx_test_axpy"};
			break;
		}
#if ODX_KERNELS_HIP
		v[n++] = (odx_kernel_variant){.backend = ODX_BACKEND_HIP,
					      .format = ODX_FORMAT_HIP_CO,
					      .code = odx__hipco_axpy_f32,
					      .code_size = odx__hipco_axpy_f32_size,
					      .entry = "odx_axpy_f32"};
#endif
		break;
	default:
		break;
	}
	return n;
}

static int setup(void **state)
{
	odx_kernel_variant cand[4];
	char err[2048] = "";
	int i, n;

	(void)state;
	if (abi_open(abi.name) != 0)
		return -1;
	n = candidate_variants(cand);
	for (i = 0; i < n; i++) {
		if (ODX_BACKEND_HAS_OP(abi.ops, odx_backend_ops, can_run) &&
		    !abi.ops->can_run(abi.dev, &cand[i]))
			continue;
		g.module = NULL;
		if (ODX_BACKEND_HAS_OP(abi.ops, odx_backend_ops, module_load) &&
		    abi.ops->module_load(abi.dev, &cand[i], &g.module, err, sizeof(err)) != 0)
			continue;
		g.variant = cand[i];
		break;
	}
	if (i == n)
		abi_skip("no variant of odx.axpy_f32 runs on this device in this build");
	printf("%s: ABI %u.%u, device '%s', mem_align %u\n", abi.name, abi.desc->abi_version >> 16,
	       abi.desc->abi_version & 0xffff, abi.props.name, abi.props.mem_align);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (g.module && ODX_BACKEND_HAS_OP(abi.ops, odx_backend_ops, module_unload))
		abi.ops->module_unload(abi.dev, g.module);
	abi_close();
	return 0;
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_descriptor(void **state)
{
	(void)state;
	assert_int_equal(abi.desc->abi_version >> 16, ODX_BACKEND_ABI_MAJOR);
	/* Every backend in this tree implements 1.2: offsets in launch arguments. */
	assert_true((abi.desc->abi_version & 0xffff) >= 2);
	assert_true(abi.desc->ops->size >= offsetof(odx_backend_ops, can_run) + sizeof(void *));
	/* A power of two, so that the core can round offsets with a mask. */
	assert_true(abi.align > 0 && (abi.align & (abi.align - 1)) == 0);
	/* The pinned pair comes together or not at all. */
	assert_int_equal(ODX_BACKEND_HAS_OP(abi.ops, odx_backend_ops, host_alloc),
			 ODX_BACKEND_HAS_OP(abi.ops, odx_backend_ops, host_free));
}

/* The layout of one allocation: a leading gap, x, a gap, y and z back to back, a tail. */
typedef struct layout {
	size_t x, y, z, total, region;
} layout;

static layout make_layout(void)
{
	layout lo;

	lo.region = round_up((size_t)N * 4, abi.align);
	lo.x = abi.align; /* nonzero: the first region is not at the allocation's start */
	lo.y = lo.x + lo.region + abi.align;
	lo.z = lo.y + lo.region; /* right behind y: rounding a range up must not reach it */
	lo.total = lo.z + lo.region + abi.align;
	return lo;
}

static float x_value(int i, void *arg)
{
	(void)arg;
	return (float)i * 0.5f;
}

static float y_value(int i, void *arg)
{
	float a = *(float *)arg;

	return 1.0f + a * x_value(i, NULL);
}

static float z_value(int i, void *arg)
{
	float a = *(float *)arg;

	return 100.0f + a * x_value(i, NULL);
}

/* Writes the sentinel over the whole allocation, then x, y and z into their regions. */
static void fill_layout(uint64_t mem, const layout *lo, unsigned char *img)
{
	float x[N], y[N], z[N];

	for (int i = 0; i < N; i++) {
		x[i] = x_value(i, NULL);
		y[i] = 1.0f;
		z[i] = 100.0f;
	}
	memset(img, SENTINEL, lo->total);
	abi_h2d(mem, 0, img, lo->total);
	abi_wait_all();
	abi_h2d(mem, lo->x, x, sizeof(x));
	abi_h2d(mem, lo->y, y, sizeof(y));
	abi_h2d(mem, lo->z, z, sizeof(z));
	abi_wait_all();
}

static void check_layout(uint64_t mem, const layout *lo, unsigned char *img, float ay, float az)
{
	size_t bytes = (size_t)N * 4;

	memset(img, 0, lo->total);
	abi_d2h(img, mem, 0, lo->total);
	abi_wait_all();
	assert_untouched(img, 0, lo->x, "before x");
	assert_floats(img, lo->x, N, x_value, NULL, "x");
	assert_untouched(img, lo->x + bytes, lo->y, "between x and y");
	assert_floats(img, lo->y, N, y_value, &ay, "y");
	assert_untouched(img, lo->y + bytes, lo->z, "the end of y's region");
	assert_floats(img, lo->z, N, z_value, &az, "z");
	assert_untouched(img, lo->z + bytes, lo->total, "after z");
}

static void test_axpy_at_offsets(void **state)
{
	layout lo = make_layout();
	unsigned char *img = malloc(lo.total);
	uint64_t mem;

	(void)state;
	assert_non_null(img);
	mem = abi_alloc(lo.total);
	fill_layout(mem, &lo, img);
	axpy(mem, lo.x, lo.y, 2.0f, N);
	axpy(mem, lo.x, lo.z, 3.0f, N);
	abi_wait_all();
	check_layout(mem, &lo, img, 2.0f, 3.0f);

	/* The same regions again (a backend caching per-region objects hits its cache). */
	axpy(mem, lo.x, lo.y, 2.0f, N);
	axpy(mem, lo.x, lo.y, 2.0f, N);
	abi_wait_all();
	check_layout(mem, &lo, img, 6.0f, 3.0f);
	abi.ops->mem_free(abi.dev, mem, lo.total);
	free(img);
}

/* Copies at offsets that are not multiples of mem_align, inside a region. */
static void test_unaligned_copies(void **state)
{
	layout lo = make_layout();
	unsigned char *img = malloc(lo.total), part[12], back[12 + 8];
	uint64_t mem;

	(void)state;
	assert_non_null(img);
	mem = abi_alloc(lo.total);
	fill_layout(mem, &lo, img);
	for (size_t i = 0; i < sizeof(part); i++)
		part[i] = (unsigned char)(0x10 + i);
	abi_h2d(mem, lo.y + 4, part, sizeof(part));
	abi_wait_all();
	abi_d2h(back, mem, lo.y, sizeof(back));
	abi_wait_all();
	assert_memory_equal(back + 4, part, sizeof(part));
	/* Bytes around the write are y's earlier contents (1.0f). */
	{
		float one = 1.0f, got;

		memcpy(&got, back, 4);
		assert_true(got == one);
		memcpy(&got, back + 16, 4);
		assert_true(got == one);
	}
	/* A launch on the region afterwards sees the copied bytes. */
	{
		float x[N], y[N];

		for (int i = 0; i < N; i++)
			x[i] = 1.0f, y[i] = 2.0f;
		abi_h2d(mem, lo.x, x, sizeof(x));
		abi_h2d(mem, lo.y, y, sizeof(y));
		abi_wait_all();
		axpy(mem, lo.x, lo.y, 0.5f, N);
		abi_wait_all();
		abi_d2h(y, mem, lo.y, sizeof(y));
		abi_wait_all();
		for (int i = 0; i < N; i++)
			assert_true(y[i] == 2.5f);
	}
	abi.ops->mem_free(abi.dev, mem, lo.total);
	free(img);
}

/* Many small regions of one allocation, each its own launch. */
static void test_many_regions(void **state)
{
	enum {
		REGIONS = 48,
		M = 64
	};
	size_t region = round_up(M * 4, abi.align), total = region * (REGIONS + 1);
	float *buf = malloc(total), x[M];
	uint64_t mem;

	(void)state;
	assert_non_null(buf);
	mem = abi_alloc(total);
	for (int i = 0; i < M; i++)
		x[i] = (float)(i + 1);
	memset(buf, 0, total);
	abi_h2d(mem, 0, buf, total);
	abi_wait_all();
	abi_h2d(mem, 0, x, sizeof(x)); /* x is the region at offset 0 */
	abi_wait_all();
	for (int r = 1; r <= REGIONS; r++)
		axpy(mem, 0, region * (size_t)r, (float)r, M);
	abi_wait_all();
	abi_d2h(buf, mem, 0, total);
	abi_wait_all();
	for (int r = 1; r <= REGIONS; r++) {
		const float *y = (const float *)((const char *)buf + region * (size_t)r);

		for (int i = 0; i < M; i++)
			if (y[i] != (float)r * x[i])
				fail_msg("region %d, element %d: %g, expected %g", r, i, y[i],
					 (float)r * x[i]);
		for (size_t i = M; i < region / 4; i++)
			assert_true(y[i] == 0.0f);
	}
	abi.ops->mem_free(abi.dev, mem, total);
	free(buf);
}

/* Freed and allocated again, possibly at the same handle: nothing of the old allocation (a
 * cached sub-buffer, say) may be used for the new one. */
static void test_realloc_same_regions(void **state)
{
	layout lo = make_layout();
	unsigned char *img = malloc(lo.total);
	uint64_t mem;

	(void)state;
	assert_non_null(img);
	for (int round = 0; round < 3; round++) {
		mem = abi_alloc(lo.total);
		fill_layout(mem, &lo, img);
		axpy(mem, lo.x, lo.y, 2.0f, N);
		axpy(mem, lo.x, lo.z, 4.0f, N);
		abi_wait_all();
		check_layout(mem, &lo, img, 2.0f, 4.0f);
		abi.ops->mem_free(abi.dev, mem, lo.total);
	}
	free(img);
}

static void test_host_alloc(void **state)
{
	enum {
		BYTES = 1 << 20
	};
	layout lo = make_layout();
	unsigned char *pinned = NULL;
	uint64_t mem;
	int rc;

	(void)state;
	if (!ODX_BACKEND_HAS_OP(abi.ops, odx_backend_ops, host_alloc)) {
		printf("%s has no host_alloc (optional): the core stages through ordinary memory\n",
		       abi.name);
		return;
	}
	rc = abi.ops->host_alloc(abi.dev, BYTES, (void **)&pinned);
	if (rc)
		fail_msg("host_alloc(%d): %s: %s", BYTES, odx_err_name(rc), abi.detail);
	assert_non_null(pinned);
	/* Ordinary host memory to the program: written, then copied from and into. */
	memset(pinned, SENTINEL, lo.total);
	for (int i = 0; i < N; i++) {
		float v = (float)i;

		memcpy(pinned + lo.y + (size_t)i * 4, &v, 4);
	}
	mem = abi_alloc(lo.total);
	abi_h2d(mem, 0, pinned, lo.total);
	abi_wait_all();
	memset(pinned, 0, BYTES);
	abi_d2h(pinned, mem, lo.y, (size_t)N * 4);
	abi_wait_all();
	for (int i = 0; i < N; i++) {
		float v;

		memcpy(&v, pinned + (size_t)i * 4, 4);
		assert_true(v == (float)i);
	}
	abi.ops->mem_free(abi.dev, mem, lo.total);
	abi.ops->host_free(abi.dev, pinned, BYTES);
}

/* ---- ABI 1.7: buffer shapes of host launches ------------------------------------------------ */

static odx_shape seen_shapes[2];
static int seen_calls;

/* Records what the host backend hands the kernel (one call per chunk: the same each time). */
static int record_shapes(const odx_host_launch *l)
{
	if (!l->buffer_shapes)
		return 1;
	memcpy(seen_shapes, l->buffer_shapes, sizeof(seen_shapes));
	seen_calls++;
	return 0;
}

/* Launches record_shapes (work-group or one-call variant) on two buffers with `shapes`. */
static void launch_shapes(odx_variant_format format, uint64_t mem, const odx_shape *shapes)
{
	odx_kernel_variant v = {.backend = ODX_BACKEND_HOST, .format = format,
				.host_fn = record_shapes, .entry = "record_shapes"};
	odx_backend_arg args[3] = {
		{.kind = ODX_ARG_BUFFER, .mem = mem, .size = 4096, .v.offset = 0},
		{.kind = ODX_ARG_I32, .v.i32 = 7},
		{.kind = ODX_ARG_BUFFER, .mem = mem, .size = 100, .v.offset = 8192},
	};
	char err[256] = "";
	odx_backend_launch l = {.variant = &v, .args = args, .nargs = 3, .grid = {4, 1, 1},
				.block = {1, 1, 1}, .tag = "shapes", .error = err,
				.error_size = sizeof(err), .shapes = shapes};
	int rc;

	seen_calls = 0;
	memset(seen_shapes, 0, sizeof(seen_shapes));
	abi_expect_done();
	rc = abi.ops->launch(abi.dev, &l, abi_on_done, abi_waiter());
	if (rc != ODX_BACKEND_PENDING)
		abi_on_done(abi_waiter(), 0, NULL);
	if (rc < 0)
		fail_msg("launch: %s: %s", odx_err_name(rc), err);
	abi_wait_all();
	assert_true(seen_calls > 0);
}

static void test_host_buffer_shapes(void **state)
{
	static const odx_variant_format formats[] = {ODX_FORMAT_HOST_FN, ODX_FORMAT_HOST_CALL};
	/* Per argument, as the core gives them: a tile in place ({w, n, pitch}), a scalar's {0}. */
	const odx_shape given[3] = {{64, 16, 256}, {0, 0, 0}, {100, 1, 100}};
	uint64_t mem;

	(void)state;
	if (abi.desc->kind != ODX_BACKEND_HOST) {
		printf("skipped: buffer_shapes are the host backend's (odx_host_launch)\n");
		skip();
	}
	mem = abi_alloc(3 * 4096);
	for (size_t f = 0; f < 2; f++) {
		/* Per buffer parameter: the core's shapes, the scalar left out. */
		launch_shapes(formats[f], mem, given);
		assert_true(seen_shapes[0].width == 64 && seen_shapes[0].count == 16 &&
			    seen_shapes[0].pitch == 256);
		assert_true(seen_shapes[1].width == 100 && seen_shapes[1].count == 1 &&
			    seen_shapes[1].pitch == 100);
		/* None given: one run of the buffer's size each. */
		launch_shapes(formats[f], mem, NULL);
		assert_true(seen_shapes[0].width == 4096 && seen_shapes[0].count == 1 &&
			    seen_shapes[0].pitch == 4096);
		assert_true(seen_shapes[1].width == 100 && seen_shapes[1].count == 1 &&
			    seen_shapes[1].pitch == 100);
	}
	abi.ops->mem_free(abi.dev, mem, 3 * 4096);
}

/* ---- ABI 1.8: run-time lengths in host launches ---------------------------------------------- */

static size_t seen_lengths[2];
static struct {
	int arg, part;
	size_t bytes;
} seen_sets[8];
static _Atomic int seen_nsets;

/* What the core's launch receives from set_length (its context is this test's). */
static void record_set(void *ctx, int arg, int part, size_t bytes)
{
	int n = atomic_fetch_add(&seen_nsets, 1);

	assert_true(ctx == (void *)&seen_nsets);
	if (n < 8) {
		seen_sets[n].arg = arg;
		seen_sets[n].part = part;
		seen_sets[n].bytes = bytes;
	}
}

/* Reads buffer_lengths and sets lengths by buffer parameter: param 1 is argument 2 (a scalar sits
 * between the buffers), and a parameter that does not exist reaches the core as argument -1. */
static int use_lengths(const odx_host_launch *l)
{
	if (!l->buffer_lengths || !l->set_length)
		return 1;
	memcpy(seen_lengths, l->buffer_lengths, sizeof(seen_lengths));
	if (l->group_first == 0) {
		l->set_length(l, 1, ODX_WHOLE_BUFFER, 40);
		l->set_length(l, 0, 2, 12);
		l->set_length(l, 5, ODX_WHOLE_BUFFER, 1);
	}
	return 0;
}

static void test_host_lengths(void **state)
{
	static const odx_variant_format formats[] = {ODX_FORMAT_HOST_FN, ODX_FORMAT_HOST_CALL};
	const size_t lengths[3] = {1000, 0, 60};
	uint64_t mem;

	(void)state;
	if (abi.desc->kind != ODX_BACKEND_HOST) {
		printf("skipped: buffer_lengths and set_length are the host backend's\n");
		skip();
	}
	assert_true((abi.desc->abi_version & 0xffff) >= 8);
	mem = abi_alloc(3 * 4096);
	for (size_t f = 0; f < 2; f++) {
		odx_kernel_variant v = {.backend = ODX_BACKEND_HOST, .format = formats[f],
					.host_fn = use_lengths, .entry = "use_lengths"};
		odx_backend_arg args[3] = {
			{.kind = ODX_ARG_BUFFER, .mem = mem, .size = 4096, .v.offset = 0},
			{.kind = ODX_ARG_I32, .v.i32 = 7},
			{.kind = ODX_ARG_BUFFER, .mem = mem, .size = 100, .v.offset = 8192},
		};
		char err[256] = "";
		odx_backend_launch l = {.variant = &v, .args = args, .nargs = 3,
					.grid = {4, 1, 1}, .block = {1, 1, 1}, .tag = "lengths",
					.error = err, .error_size = sizeof(err),
					.lengths = lengths, .set_length = record_set,
					.set_length_ctx = &seen_nsets};
		int rc;

		atomic_store(&seen_nsets, 0);
		memset(seen_lengths, 0, sizeof(seen_lengths));
		abi_expect_done();
		rc = abi.ops->launch(abi.dev, &l, abi_on_done, abi_waiter());
		if (rc != ODX_BACKEND_PENDING)
			abi_on_done(abi_waiter(), 0, NULL);
		if (rc < 0)
			fail_msg("launch: %s: %s", odx_err_name(rc), err);
		abi_wait_all();
		/* Per buffer parameter: the core's per-argument lengths, the scalar left out. */
		assert_int_equal(seen_lengths[0], 1000);
		assert_int_equal(seen_lengths[1], 60);
		assert_int_equal(atomic_load(&seen_nsets), 3);
		assert_int_equal(seen_sets[0].arg, 2);
		assert_int_equal(seen_sets[0].part, ODX_WHOLE_BUFFER);
		assert_int_equal(seen_sets[0].bytes, 40);
		assert_int_equal(seen_sets[1].arg, 0);
		assert_int_equal(seen_sets[1].part, 2);
		assert_int_equal(seen_sets[1].bytes, 12);
		assert_int_equal(seen_sets[2].arg, -1);
	}
	abi.ops->mem_free(abi.dev, mem, 3 * 4096);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_descriptor),	     cmocka_unit_test(test_axpy_at_offsets),
		cmocka_unit_test(test_unaligned_copies),     cmocka_unit_test(test_many_regions),
		cmocka_unit_test(test_realloc_same_regions), cmocka_unit_test(test_host_alloc),
		cmocka_unit_test(test_host_buffer_shapes),   cmocka_unit_test(test_host_lengths),
	};

	if (argc < 2) {
		fprintf(stderr, "usage: %s BACKEND [--fake]\n", argv[0]);
		return 2;
	}
	abi.name = argv[1];
	g.fake = argc > 2 && strcmp(argv[2], "--fake") == 0;
	return cmocka_run_group_tests_name(abi.name, tests, setup, teardown);
}
