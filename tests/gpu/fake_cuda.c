/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fake_cuda.c - a fake CUDA driver (libfake_cuda.so, given to ODX as cuda.library) with just
 * enough of the driver API for the CUDA backend's whole task path to run here with real
 * arithmetic: cuGetProcAddress resolving names to the functions below (CUDA_ERROR_NOT_FOUND for
 * others), devices, primary contexts, streams, events, memory as host malloc, copies as memcpy
 * (complete at once), modules of fake images (fake_common.h) and launches running them on the
 * host. Sticky errors behave like the real ones: after a faulting launch every call in that
 * device's context fails (the other devices carry on).
 *
 * Real images are checked, not run as code: PTX text (its .version against the driver's ISA,
 * its .target against the device, its .entry names) and cubins (ELF for EM_CUDA, the SM version
 * in e_flags, the entry names in the string table), as NVRTC or nvcc write them; a fatbin is
 * never unpacked (CUDA_ERROR_NO_BINARY_FOR_GPU). A function of a real image runs as the fake
 * kernel of its name (odx_axpy_f32 and odx_test_axpy: axpy).
 *
 * Environment (read by cuInit):
 *   FAKE_CUDA_INIT_ERROR=N      cuInit returns N (34: the stub library)
 *   FAKE_CUDA_DRIVER_VERSION=N  what cuDriverGetVersion reports (default 12080)
 *   FAKE_CUDA_DEVICE_COUNT=N    devices (default 1)
 *   FAKE_CUDA_ARCH=N            compute capability major * 10 + minor of every device (90)
 *   FAKE_CUDA_LAUNCH_ERROR=N    every launch makes N the context's sticky error (e.g. 700)
 *   FAKE_CUDA_ALLOC_FAIL=1      cuMemAlloc fails with CUDA_ERROR_OUT_OF_MEMORY
 *   FAKE_CUDA_REGISTER_ERROR=N  cuMemHostRegister returns N (e.g. 2, 801)
 * fake_cuda_live() counts allocations not yet freed (device, pinned, streams, events, modules);
 * fake_cuda_stat(name) the page-locking and copy counters of fake_common.h;
 * fake_cuda_mark_caller() and fake_cuda_fail_copies(code, after) as described there.
 * cuMemHostRegister needs a current context and refuses memory sharing a page with pinned memory
 * (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED); cuMemHostUnregister takes only the base of a
 * registered range (else CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>

#include "cuda_api.h"
#include "fake_common.h"

#define FAKE_MAX_DEVICES 16

static int init_error, device_count = 1, launch_error, alloc_fail, arch = 90, register_error;
static atomic_int sticky[FAKE_MAX_DEVICES]; /* per device's primary context */
static atomic_long live;
static int ctx_token[FAKE_MAX_DEVICES];
static _Thread_local CUcontext current;

/* A loaded module: a fake image, or a copy of a real one whose entries can be looked up. */
typedef struct fake_cu_module {
	bool real;
	bool cubin;
	size_t size;
	char *image;
} fake_cu_module;

FAKE_API long fake_cuda_live(void);
FAKE_API long fake_cuda_live(void)
{
	return atomic_load(&live);
}

FAKE_API long fake_cuda_stat(const char *name);
FAKE_API long fake_cuda_stat(const char *name)
{
	return fake_stat_get(name);
}

FAKE_API void fake_cuda_mark_caller(void);
FAKE_API void fake_cuda_mark_caller(void)
{
	fake_on_caller = 1;
}

FAKE_API void fake_cuda_fail_copies(int code, long after);
FAKE_API void fake_cuda_fail_copies(int code, long after)
{
	fake_fail_copies(code, after);
}

static CUresult f_cuInit(unsigned int flags)
{
	(void)flags;
	init_error = (int)fake_env("FAKE_CUDA_INIT_ERROR", 0);
	device_count = (int)fake_env("FAKE_CUDA_DEVICE_COUNT", 1);
	launch_error = (int)fake_env("FAKE_CUDA_LAUNCH_ERROR", 0);
	alloc_fail = (int)fake_env("FAKE_CUDA_ALLOC_FAIL", 0);
	arch = (int)fake_env("FAKE_CUDA_ARCH", 90);
	register_error = (int)fake_env("FAKE_CUDA_REGISTER_ERROR", 0);
	for (int i = 0; i < FAKE_MAX_DEVICES; i++)
		atomic_store(&sticky[i], 0);
	return init_error;
}

static int driver_version(void)
{
	return (int)fake_env("FAKE_CUDA_DRIVER_VERSION", 12080);
}

static CUresult f_cuDriverGetVersion(int *v)
{
	*v = driver_version();
	return CUDA_SUCCESS;
}

static const struct {
	int code;
	const char *name, *text;
} errors[] = {
	{CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
	{CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
	 "no kernel image is available for execution on the device"},
	{CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	{CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	 "the provided PTX was compiled with an unsupported toolchain."},
	{CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
	{CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
	 "an illegal memory access was encountered"},
	{CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	{CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	 "part or all of the requested memory range is already mapped"},
	{CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	 "pointer does not correspond to a registered memory region"},
	{CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
	{CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

static CUresult f_cuGetErrorName(CUresult e, const char **s)
{
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == e) {
			*s = errors[i].name;
			return CUDA_SUCCESS;
		}
	*s = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_cuGetErrorString(CUresult e, const char **s)
{
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == e) {
			*s = errors[i].text;
			return CUDA_SUCCESS;
		}
	*s = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_cuDeviceGetCount(int *n)
{
	*n = device_count;
	return CUDA_SUCCESS;
}

static CUresult f_cuDeviceGet(CUdevice *d, int ordinal)
{
	if (ordinal < 0 || ordinal >= device_count || ordinal >= FAKE_MAX_DEVICES)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

static CUresult f_cuDeviceGetName(char *name, int len, CUdevice d)
{
	snprintf(name, (size_t)len, "ODX fake CUDA device %d", d);
	return CUDA_SUCCESS;
}

static CUresult f_cuDeviceTotalMem(size_t *bytes, CUdevice d)
{
	(void)d;
	*bytes = (size_t)1 << 30;
	return CUDA_SUCCESS;
}

static CUresult f_cuDeviceGetAttribute(int *pi, CUdevice_attribute a, CUdevice d)
{
	(void)d;
	*pi = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR	  ? arch / 10
	      : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? arch % 10
								  : 0;
	return CUDA_SUCCESS;
}

static CUresult f_cuDeviceGetPCIBusId(char *id, int len, CUdevice d)
{
	snprintf(id, (size_t)len, "0000:%02X:00.0", 0xA0 + d);
	return CUDA_SUCCESS;
}

static CUresult f_cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	*c = (CUcontext)(void *)&ctx_token[d];
	return CUDA_SUCCESS;
}

static CUresult f_cuDevicePrimaryCtxRelease(CUdevice d)
{
	(void)d;
	return CUDA_SUCCESS;
}

static CUresult f_cuCtxSetCurrent(CUcontext c)
{
	current = c;
	return CUDA_SUCCESS;
}

/* The device whose primary context is current. */
static int current_device(void)
{
	return (int)((int *)(void *)current - ctx_token);
}

/* Like the real driver: work needs a current context, and a poisoned context fails. */
static CUresult ready(void)
{
	if (!current)
		return CUDA_ERROR_INVALID_CONTEXT;
	return atomic_load(&sticky[current_device()]);
}

static CUresult f_cuMemGetInfo(size_t *free_bytes, size_t *total)
{
	*free_bytes = (size_t)900 << 20;
	*total = (size_t)1 << 30;
	return ready();
}

static CUresult new_token(void **out)
{
	CUresult rc = ready();

	if (rc)
		return rc;
	*out = malloc(1);
	atomic_fetch_add(&live, 1);
	return CUDA_SUCCESS;
}

static CUresult free_token(void *p)
{
	free(p);
	atomic_fetch_sub(&live, 1);
	return CUDA_SUCCESS;
}

static CUresult f_cuStreamCreate(CUstream *s, unsigned int flags)
{
	(void)flags;
	return new_token((void **)s);
}

static CUresult f_cuStreamDestroy(CUstream s)
{
	return free_token(s);
}

static CUresult f_cuStreamSynchronize(CUstream s)
{
	(void)s;
	return ready();
}

static CUresult f_cuEventCreate(CUevent *e, unsigned int flags)
{
	if (!(flags & CU_EVENT_DISABLE_TIMING))
		return CUDA_ERROR_INVALID_VALUE; /* the backend never needs timing */
	return new_token((void **)e);
}

static CUresult f_cuEventDestroy(CUevent e)
{
	return free_token(e);
}

static CUresult f_cuEventRecord(CUevent e, CUstream s)
{
	(void)e;
	(void)s;
	return ready();
}

static CUresult f_cuEventQuery(CUevent e)
{
	(void)e;
	return ready();
}

static CUresult f_cuEventSynchronize(CUevent e)
{
	(void)e;
	return ready();
}

static CUresult f_cuMemAlloc(CUdeviceptr *p, size_t n)
{
	CUresult rc = ready();
	void *m;

	if (rc)
		return rc;
	if (alloc_fail || !(m = malloc(n)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	memset(m, 0xa5, n); /* device memory is not zero: the backend must zero it */
	atomic_fetch_add(&live, 1);
	*p = (CUdeviceptr)(uintptr_t)m;
	return CUDA_SUCCESS;
}

static CUresult f_cuMemFree(CUdeviceptr p)
{
	return free_token((void *)(uintptr_t)p);
}

static CUresult f_cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s)
{
	CUresult rc = ready();

	(void)s;
	if (!rc)
		memset((void *)(uintptr_t)p, v, n);
	return rc;
}

static CUresult f_cuMemHostAlloc(void **p, size_t n, unsigned int flags)
{
	(void)flags;
	*p = fake_pinned_alloc(n);
	if (!*p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	atomic_fetch_add(&live, 1);
	return CUDA_SUCCESS;
}

static CUresult f_cuMemFreeHost(void *p)
{
	fake_pinned_free(p);
	atomic_fetch_sub(&live, 1);
	return CUDA_SUCCESS;
}

static CUresult f_cuMemHostRegister(void *p, size_t n, unsigned int flags)
{
	CUresult rc = ready();

	if (rc)
		return rc;
	if (register_error) {
		atomic_fetch_add(&fake_stats[FAKE_STAT_REGISTER_CALLS], 1);
		return register_error;
	}
	return fake_register(p, n, flags, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
			     CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY);
}

static CUresult f_cuMemHostUnregister(void *p)
{
	CUresult rc = ready();

	return rc ? rc : fake_unregister(p, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

/* A copy between host and device: ready, unless a failure was injected (an illegal address
 * poisons the context). */
static CUresult copy_ready(void)
{
	CUresult rc = ready();

	if (!rc && (rc = fake_copy_fault()) == CUDA_ERROR_ILLEGAL_ADDRESS)
		atomic_store(&sticky[current_device()], rc);
	return rc;
}

static CUresult f_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	CUresult rc = copy_ready();

	(void)s;
	if (!rc) {
		fake_count_copy(src, n);
		memcpy((void *)(uintptr_t)dst, src, n);
	}
	return rc;
}

static CUresult f_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	CUresult rc = copy_ready();

	(void)s;
	if (!rc) {
		fake_count_copy(dst, n);
		memcpy(dst, (const void *)(uintptr_t)src, n);
	}
	return rc;
}

static CUresult f_cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dc, CUdeviceptr src, CUcontext sc,
				    size_t n, CUstream s)
{
	CUresult rc = ready();

	(void)s;
	if (!dc || !sc)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!rc)
		memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	return rc;
}

/* What follows `directive` in PTX text, or NULL if absent. */
static const char *ptx_field(const char *text, const char *directive)
{
	const char *p = strstr(text, directive);

	return p ? p + strlen(directive) : NULL;
}

/* Real PTX, checked like the driver's JIT would before compiling it. */
static CUresult load_ptx(const char *text, char *log, size_t logsize)
{
	int vmaj = 0, vmin = 0, sm = 0;
	int dmaj = driver_version() / 1000 - 4, dmin = driver_version() % 1000 / 10;
	const char *version = ptx_field(text, ".version"), *target = ptx_field(text, ".target");

	if (!version || sscanf(version, " %d.%d", &vmaj, &vmin) != 2 || !target ||
	    sscanf(target, " sm_%d", &sm) != 1 || !strstr(text, ".entry")) {
		if (log && logsize)
			snprintf(log, logsize, "ptxas fatal: not PTX the fake driver understands");
		return CUDA_ERROR_INVALID_PTX;
	}
	if (vmaj > dmaj || (vmaj == dmaj && vmin > dmin)) {
		if (log && logsize)
			snprintf(log, logsize,
				 "ptxas application ptx input, line 1; fatal   : Unsupported .version "
				 "%d.%d; current version is '%d.%d'",
				 vmaj, vmin, dmaj, dmin);
		return CUDA_ERROR_UNSUPPORTED_PTX_VERSION;
	}
	if (sm > arch) {
		if (log && logsize)
			snprintf(log, logsize,
				 "ptxas fatal   : SM version specified by .target (sm_%d) is higher "
				 "than the device's (sm_%d)",
				 sm, arch);
		return CUDA_ERROR_INVALID_PTX;
	}
	return CUDA_SUCCESS;
}

/* A real cubin's size from its ELF header (the section headers come last), or 0. */
static size_t cubin_size(const unsigned char *b)
{
	uint64_t shoff = 0, phoff = 0, end;
	unsigned shnum = b[60] | b[61] << 8, shentsize = b[58] | b[59] << 8;
	unsigned phnum = b[56] | b[57] << 8, phentsize = b[54] | b[55] << 8;

	if (b[4] != 2 /* ELFCLASS64 */ || (b[18] | b[19] << 8) != 190 /* EM_CUDA */)
		return 0;
	for (int i = 7; i >= 0; i--) {
		shoff = shoff << 8 | b[40 + i];
		phoff = phoff << 8 | b[32 + i];
	}
	end = shoff + (uint64_t)shnum * shentsize;
	if (phoff + (uint64_t)phnum * phentsize > end)
		end = phoff + (uint64_t)phnum * phentsize;
	return end < (1u << 30) ? (size_t)end : 0;
}

static CUresult f_cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int nopts,
				     CUjit_option *opts, void **vals)
{
	const char *text = image;
	const unsigned char *bytes = image;
	char *log = NULL;
	size_t logsize = 0, size = 0;
	fake_cu_module *fm;
	bool real = false, cubin = false;
	CUresult rc = ready();
	unsigned i;

	if (rc)
		return rc;
	for (i = 0; i < nopts; i++) {
		if (opts[i] == CU_JIT_ERROR_LOG_BUFFER)
			log = vals[i];
		else if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			logsize = (size_t)(uintptr_t)vals[i];
	}
	/* Fatbins are not unpacked here: the fake never finds code for the device in one. */
	if (bytes[0] == 0x50 && bytes[1] == 0xed && bytes[2] == 0x55 && bytes[3] == 0xba)
		return CUDA_ERROR_NO_BINARY_FOR_GPU;
	if (memcmp(bytes, "\177ELF", 4) == 0) {
		int sm = bytes[49];

		if (!(size = cubin_size(bytes)))
			return CUDA_ERROR_INVALID_IMAGE;
		/* SASS runs on its own major version, same or higher minor. */
		if (sm / 10 != arch / 10 || sm % 10 > arch % 10)
			return CUDA_ERROR_NO_BINARY_FOR_GPU;
		real = cubin = true;
	} else if (strncmp(text, "ODXFAKE:", 8) != 0) {
		if ((rc = load_ptx(text, log, logsize)) != CUDA_SUCCESS)
			return rc;
		size = strlen(text) + 1;
		real = true;
	} else if (strncmp(text + 8, "badptx", 6) == 0) {
		if (log && logsize)
			snprintf(log, logsize, "ptxas fatal: fake syntax error on line 1");
		return CUDA_ERROR_INVALID_PTX;
	} else if (strncmp(text + 8, "sm_90", 5) != 0) {
		return CUDA_ERROR_NO_BINARY_FOR_GPU;
	}
	fm = calloc(1, sizeof(*fm));
	if (!fm || (real && !(fm->image = malloc(size)))) {
		free(fm);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	fm->real = real;
	fm->cubin = cubin;
	fm->size = size;
	if (real)
		memcpy(fm->image, image, size);
	atomic_fetch_add(&live, 1);
	*m = (CUmodule)(void *)fm;
	return CUDA_SUCCESS;
}

static CUresult f_cuModuleUnload(CUmodule m)
{
	fake_cu_module *fm = (fake_cu_module *)(void *)m;

	free(fm->image);
	return free_token(fm);
}

/* Does a real image define `name`? PTX: ".entry name(", a cubin: "name" in a string table. */
static bool has_entry(const fake_cu_module *fm, const char *name)
{
	size_t len = strlen(name);
	const char *p = fm->image, *end = fm->image + fm->size;

	while ((p = memmem(p, (size_t)(end - p), name, len)) != NULL) {
		if (fm->cubin ? (p > fm->image && p[-1] == '\0' && p + len < end && p[len] == '\0')
			      : (p - fm->image >= 7 && memcmp(p - 7, ".entry ", 7) == 0 &&
				 p[len] == '('))
			return true;
		p += len;
	}
	return false;
}

static CUresult f_cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	const fake_cu_module *fm = (const fake_cu_module *)(void *)m;
	int id = fake_function(name);

	if (id < 0 || (fm->real && !has_entry(fm, name)))
		return CUDA_ERROR_NOT_FOUND;
	*f = (CUfunction)(uintptr_t)id;
	return CUDA_SUCCESS;
}

static CUresult f_cuFuncGetParamInfo(CUfunction f, size_t index, size_t *off, size_t *size)
{
	static const size_t axpy[] = {8, 8, 4, 4};

	if ((uintptr_t)f == FAKE_FN_AXPY && index < 4) {
		*size = axpy[index];
		*off = index < 2 ? index * 8 : 16 + (index - 2) * 4;
		return CUDA_SUCCESS;
	}
	if ((uintptr_t)f == FAKE_FN_FAULT && index < 1) {
		*size = 8;
		*off = 0;
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
				 unsigned by, unsigned bz, unsigned shmem, CUstream s,
				 void **params, void **extra)
{
	CUresult rc = ready();

	(void)shmem;
	(void)s;
	(void)extra;
	if (rc)
		return rc;
	if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024 || !params)
		return CUDA_ERROR_INVALID_VALUE;
	/* A fault shows at the next synchronisation, as on a GPU. */
	if (launch_error || fake_run((int)(uintptr_t)f, params) != 0)
		atomic_store(&sticky[current_device()],
			     launch_error ? launch_error : CUDA_ERROR_ILLEGAL_ADDRESS);
	return CUDA_SUCCESS;
}

#define FN(name) {#name, (void (*)(void))f_##name}
static const struct {
	const char *name;
	void (*fn)(void);
} table[] = {
	FN(cuInit),
	FN(cuDriverGetVersion),
	FN(cuGetErrorName),
	FN(cuGetErrorString),
	FN(cuDeviceGetCount),
	FN(cuDeviceGet),
	FN(cuDeviceGetName),
	FN(cuDeviceTotalMem),
	FN(cuDeviceGetAttribute),
	FN(cuDeviceGetPCIBusId),
	FN(cuDevicePrimaryCtxRetain),
	FN(cuDevicePrimaryCtxRelease),
	FN(cuCtxSetCurrent),
	FN(cuMemGetInfo),
	FN(cuStreamCreate),
	FN(cuStreamDestroy),
	FN(cuStreamSynchronize),
	FN(cuEventCreate),
	FN(cuEventDestroy),
	FN(cuEventRecord),
	FN(cuEventQuery),
	FN(cuEventSynchronize),
	FN(cuMemAlloc),
	FN(cuMemFree),
	FN(cuMemsetD8Async),
	FN(cuMemHostAlloc),
	FN(cuMemFreeHost),
	FN(cuMemHostRegister),
	FN(cuMemHostUnregister),
	FN(cuMemcpyHtoDAsync),
	FN(cuMemcpyDtoHAsync),
	FN(cuMemcpyPeerAsync),
	FN(cuModuleLoadDataEx),
	FN(cuModuleUnload),
	FN(cuModuleGetFunction),
	FN(cuFuncGetParamInfo),
	FN(cuLaunchKernel),
};

FAKE_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
				      cuuint64_t flags, CUdriverProcAddressQueryResult *status);
FAKE_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
				      cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
	*pfn = NULL;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	if (flags != CU_GET_PROC_ADDRESS_DEFAULT || version < 11030)
		return CUDA_ERROR_INVALID_VALUE;
	if (strcmp(symbol, "cuFuncGetParamInfo") == 0 && version < 12040) {
		if (status)
			*status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
		return CUDA_ERROR_NOT_FOUND;
	}
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
		if (strcmp(table[i].name, symbol) == 0) {
			memcpy(pfn, &table[i].fn, sizeof(*pfn));
			if (status)
				*status = CU_GET_PROC_ADDRESS_SUCCESS;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_NOT_FOUND;
}
