/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fake_hip.c - a fake HIP runtime (libfake_hip.so, given to ODX as hip.library) exporting the
 * functions the HIP backend takes with dlsym: devices, streams, events, memory as host malloc,
 * copies as memcpy, modules of fake images (fake_common.h, arch "gfx90a") and launches running
 * them on the host. Sticky errors behave like the real ones: after a faulting launch every call
 * on that device fails (the other devices carry on).
 *
 * Environment (read by hipInit):
 *   FAKE_HIP_INIT_ERROR=N     hipInit returns N (100: no device)
 *   FAKE_HIP_DEVICE_COUNT=N   devices (default 1)
 *   FAKE_HIP_LAUNCH_ERROR=N   every launch makes N the sticky error (e.g. 700)
 *   FAKE_HIP_REGISTER_ERROR=N hipHostRegister returns N (e.g. 2, 801)
 * fake_hip_live() counts allocations not yet freed; fake_hip_stat(name) the page-locking and
 * copy counters of fake_common.h; fake_hip_mark_caller() and fake_hip_fail_copies(code, after) as
 * described there. hipHostRegister refuses memory sharing a page with pinned memory
 * (hipErrorHostMemoryAlreadyRegistered); hipHostUnregister takes only the base of a registered
 * range (else hipErrorHostMemoryNotRegistered).
 */
#include <stdatomic.h>
#include <stdio.h>

#include "fake_common.h"
#include "hip_api.h"

#define FAKE_MAX_DEVICES 16

static int device_count = 1, launch_error, register_error;
static atomic_int sticky[FAKE_MAX_DEVICES]; /* per device */
static atomic_long live;
static _Thread_local int current = -1;

FAKE_API long fake_hip_live(void);
FAKE_API long fake_hip_live(void)
{
	return atomic_load(&live);
}

FAKE_API long fake_hip_stat(const char *name);
FAKE_API long fake_hip_stat(const char *name)
{
	return fake_stat_get(name);
}

FAKE_API void fake_hip_mark_caller(void);
FAKE_API void fake_hip_mark_caller(void)
{
	fake_on_caller = 1;
}

FAKE_API void fake_hip_fail_copies(int code, long after);
FAKE_API void fake_hip_fail_copies(int code, long after)
{
	fake_fail_copies(code, after);
}

#define API(name, params) FAKE_API hipError_t name params;
HIPB_FUNCTIONS(API)
#undef API
FAKE_API const char *hipGetErrorName(hipError_t e);
FAKE_API const char *hipGetErrorString(hipError_t e);

static hipError_t ready(void)
{
	if (current < 0)
		return hipErrorInvalidContext;
	return atomic_load(&sticky[current]);
}

hipError_t hipInit(unsigned int flags)
{
	(void)flags;
	device_count = (int)fake_env("FAKE_HIP_DEVICE_COUNT", 1);
	launch_error = (int)fake_env("FAKE_HIP_LAUNCH_ERROR", 0);
	register_error = (int)fake_env("FAKE_HIP_REGISTER_ERROR", 0);
	for (int i = 0; i < FAKE_MAX_DEVICES; i++)
		atomic_store(&sticky[i], 0);
	return (hipError_t)fake_env("FAKE_HIP_INIT_ERROR", 0);
}

hipError_t hipDriverGetVersion(int *v)
{
	*v = 60342134;
	return hipSuccess;
}

const char *hipGetErrorName(hipError_t e)
{
	switch (e) {
	case hipSuccess:
		return "hipSuccess";
	case hipErrorInvalidValue:
		return "hipErrorInvalidValue";
	case hipErrorNoDevice:
		return "hipErrorNoDevice";
	case hipErrorNoBinaryForGpu:
		return "hipErrorNoBinaryForGpu";
	case hipErrorIllegalAddress:
		return "hipErrorIllegalAddress";
	case hipErrorNotFound:
		return "hipErrorNotFound";
	case hipErrorOutOfMemory:
		return "hipErrorOutOfMemory";
	case hipErrorHostMemoryAlreadyRegistered:
		return "hipErrorHostMemoryAlreadyRegistered";
	case hipErrorHostMemoryNotRegistered:
		return "hipErrorHostMemoryNotRegistered";
	case hipErrorNotSupported:
		return "hipErrorNotSupported";
	default:
		return "hipErrorUnknown";
	}
}

const char *hipGetErrorString(hipError_t e)
{
	return e == hipErrorIllegalAddress ? "an illegal memory access was encountered"
					   : "fake HIP error";
}

hipError_t hipGetDeviceCount(int *n)
{
	*n = device_count;
	return hipSuccess;
}

hipError_t hipDeviceGet(hipDevice_t *d, int ordinal)
{
	if (ordinal < 0 || ordinal >= device_count)
		return hipErrorInvalidDevice;
	*d = ordinal;
	return hipSuccess;
}

hipError_t hipDeviceGetName(char *name, int len, hipDevice_t d)
{
	snprintf(name, (size_t)len, "ODX fake HIP device %d", d);
	return hipSuccess;
}

hipError_t hipDeviceTotalMem(size_t *bytes, hipDevice_t d)
{
	(void)d;
	*bytes = (size_t)1 << 30;
	return hipSuccess;
}

hipError_t hipDeviceGetPCIBusId(char *id, int len, int d)
{
	snprintf(id, (size_t)len, "0000:%02x:00.0", 0xc0 + d);
	return hipSuccess;
}

hipError_t hipSetDevice(int d)
{
	if (d < 0 || d >= device_count || d >= FAKE_MAX_DEVICES)
		return hipErrorInvalidDevice;
	current = d;
	return hipSuccess;
}

hipError_t hipMemGetInfo(size_t *free_bytes, size_t *total)
{
	*free_bytes = (size_t)900 << 20;
	*total = (size_t)1 << 30;
	return ready();
}

static hipError_t new_token(void **out)
{
	hipError_t rc = ready();

	if (rc)
		return rc;
	*out = malloc(1);
	atomic_fetch_add(&live, 1);
	return hipSuccess;
}

static hipError_t free_token(void *p)
{
	free(p);
	atomic_fetch_sub(&live, 1);
	return hipSuccess;
}

hipError_t hipStreamCreateWithFlags(hipStream_t *s, unsigned int flags)
{
	(void)flags;
	return new_token((void **)s);
}

hipError_t hipStreamDestroy(hipStream_t s)
{
	return free_token(s);
}

hipError_t hipStreamSynchronize(hipStream_t s)
{
	(void)s;
	return ready();
}

hipError_t hipEventCreateWithFlags(hipEvent_t *e, unsigned flags)
{
	(void)flags;
	return new_token((void **)e);
}

hipError_t hipEventDestroy(hipEvent_t e)
{
	return free_token(e);
}

hipError_t hipEventRecord(hipEvent_t e, hipStream_t s)
{
	(void)e;
	(void)s;
	return ready();
}

hipError_t hipEventQuery(hipEvent_t e)
{
	(void)e;
	return ready();
}

hipError_t hipEventSynchronize(hipEvent_t e)
{
	(void)e;
	return ready();
}

hipError_t hipMalloc(void **p, size_t n)
{
	hipError_t rc = ready();

	if (rc)
		return rc;
	*p = malloc(n);
	if (!*p)
		return hipErrorOutOfMemory;
	memset(*p, 0x5a, n);
	atomic_fetch_add(&live, 1);
	return hipSuccess;
}

hipError_t hipFree(void *p)
{
	return free_token(p);
}

hipError_t hipMemsetAsync(void *p, int v, size_t n, hipStream_t s)
{
	hipError_t rc = ready();

	(void)s;
	if (!rc)
		memset(p, v, n);
	return rc;
}

hipError_t hipHostMalloc(void **p, size_t n, unsigned int flags)
{
	(void)flags;
	*p = fake_pinned_alloc(n);
	if (!*p)
		return hipErrorOutOfMemory;
	atomic_fetch_add(&live, 1);
	return hipSuccess;
}

hipError_t hipHostFree(void *p)
{
	fake_pinned_free(p);
	atomic_fetch_sub(&live, 1);
	return hipSuccess;
}

hipError_t hipHostRegister(void *p, size_t n, unsigned int flags)
{
	hipError_t rc = ready();

	if (rc)
		return rc;
	if (register_error) {
		atomic_fetch_add(&fake_stats[FAKE_STAT_REGISTER_CALLS], 1);
		return register_error;
	}
	return fake_register(p, n, flags, hipErrorHostMemoryAlreadyRegistered, hipErrorInvalidValue,
			     hipErrorOutOfMemory);
}

hipError_t hipHostUnregister(void *p)
{
	return fake_unregister(p, hipErrorHostMemoryNotRegistered);
}

/* A copy between host and device: ready, unless a failure was injected (an illegal address
 * poisons the device). */
static hipError_t copy_ready(void)
{
	hipError_t rc = ready();

	if (!rc && (rc = (hipError_t)fake_copy_fault()) == hipErrorIllegalAddress)
		atomic_store(&sticky[current], rc);
	return rc;
}

hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void *src, size_t n, hipStream_t s)
{
	hipError_t rc = copy_ready();

	(void)s;
	if (!rc) {
		fake_count_copy(src, n);
		memcpy(dst, src, n);
	}
	return rc;
}

hipError_t hipMemcpyDtoHAsync(void *dst, hipDeviceptr_t src, size_t n, hipStream_t s)
{
	hipError_t rc = copy_ready();

	(void)s;
	if (!rc) {
		fake_count_copy(dst, n);
		memcpy(dst, src, n);
	}
	return rc;
}

hipError_t hipMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t n, hipStream_t s)
{
	hipError_t rc = ready();

	(void)s;
	if (dd < 0 || dd >= device_count || sd < 0 || sd >= device_count)
		return hipErrorInvalidDevice;
	if (!rc)
		memcpy(dst, src, n);
	return rc;
}

hipError_t hipModuleLoadData(hipModule_t *m, const void *image)
{
	const char *text = image;
	hipError_t rc = ready();

	if (rc)
		return rc;
	if (strncmp(text, "ODXFAKE:", 8) != 0)
		return hipErrorInvalidImage;
	if (strncmp(text + 8, "gfx90a", 6) != 0)
		return hipErrorNoBinaryForGpu;
	return new_token((void **)m);
}

hipError_t hipModuleUnload(hipModule_t m)
{
	return free_token(m);
}

hipError_t hipModuleGetFunction(hipFunction_t *f, hipModule_t m, const char *name)
{
	int id = fake_function(name);

	(void)m;
	if (id < 0)
		return hipErrorNotFound;
	*f = (hipFunction_t)(uintptr_t)id;
	return hipSuccess;
}

hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned gx, unsigned gy, unsigned gz,
				 unsigned bx, unsigned by, unsigned bz, unsigned shmem,
				 hipStream_t s, void **params, void **extra)
{
	hipError_t rc = ready();

	(void)shmem;
	(void)s;
	(void)extra;
	if (rc)
		return rc;
	if (!gx || !gy || !gz || !bx || !by || !bz || !params)
		return hipErrorInvalidValue;
	if (launch_error || fake_run((int)(uintptr_t)f, params) != 0)
		atomic_store(&sticky[current], launch_error ? launch_error : hipErrorIllegalAddress);
	return hipSuccess;
}
