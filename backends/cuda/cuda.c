/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cuda.c - the CUDA backend: the CUDA driver API's symbol table for the GPU skeleton (gpu.c).
 *
 * libcuda.so.1 (config key cuda.library) is opened at run time; only cuGetProcAddress_v2 (or,
 * on 11.x drivers, cuGetProcAddress) is taken with dlsym, everything else is resolved through it
 * at CUB_API_VERSION, so we get the entry points whose signatures cuda_api.h declares whatever
 * the driver's newest version is. Devices use their primary context.
 *
 * Kernel variants: ODX_FORMAT_CUBIN holds a cubin or a fatbin, ODX_FORMAT_PTX holds PTX text;
 * both go to cuModuleLoadDataEx. can_run checks what can be checked without the driver (a
 * cubin's architecture, a PTX target and ISA version) so that the core skips a variant this
 * device cannot load; what slips through fails in module_load with the driver's error and JIT
 * log. ODX_FORMAT_CUDA_C holds CUDA C++ source, compiled per device through NVRTC (nvrtc.c,
 * opened when such a variant is first looked at; config key cuda.nvrtc_library) and loaded the
 * same way; without NVRTC those variants are skipped.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gpu/gpu.h"
#include "cuda_api.h"
#include "nvrtc_api.h"

#define CUB_MIN_DRIVER 11030 /* the first driver with cuGetProcAddress */

struct gpu_api {
	void *lib;
	char lib_name[256];
	int driver_version;
	int api_version;
	cub_table f;
	/* NVRTC, opened by the first CUDA source variant looked at (any device's thread). */
	pthread_mutex_t nvrtc_lock;
	int nvrtc_state; /* 0: not tried yet, 1: open, -1: cannot be opened */
	cub_nvrtc *nvrtc;
	char nvrtc_library[256];
	char nvrtc_reason[512];
};

/* ---- errors ------------------------------------------------------------------------------------ */

/* Names for the codes ODX reacts to, for when the driver cannot name them (a stub library). */
static const char *cub_known_name(int code)
{
	switch (code) {
#define CUB_NAME(c)                                                                                \
	case c:                                                                                    \
		return #c;
		CUB_NAME(CUDA_ERROR_INVALID_VALUE)
		CUB_NAME(CUDA_ERROR_OUT_OF_MEMORY)
		CUB_NAME(CUDA_ERROR_NOT_INITIALIZED)
		CUB_NAME(CUDA_ERROR_STUB_LIBRARY)
		CUB_NAME(CUDA_ERROR_INSUFFICIENT_DRIVER)
		CUB_NAME(CUDA_ERROR_NO_DEVICE)
		CUB_NAME(CUDA_ERROR_INVALID_IMAGE)
		CUB_NAME(CUDA_ERROR_NO_BINARY_FOR_GPU)
		CUB_NAME(CUDA_ERROR_INVALID_PTX)
		CUB_NAME(CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
		CUB_NAME(CUDA_ERROR_NOT_FOUND)
		CUB_NAME(CUDA_ERROR_NOT_READY)
		CUB_NAME(CUDA_ERROR_ILLEGAL_ADDRESS)
		CUB_NAME(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
		CUB_NAME(CUDA_ERROR_LAUNCH_FAILED)
		CUB_NAME(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
		CUB_NAME(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
		CUB_NAME(CUDA_ERROR_NOT_SUPPORTED)
#undef CUB_NAME
	default:
		return NULL;
	}
}

static const char *cub_err_name(gpu_api *api, int code)
{
	const char *s = NULL;

	if (api && api->f.cuGetErrorName && api->f.cuGetErrorName(code, &s) == CUDA_SUCCESS && s)
		return s;
	return cub_known_name(code);
}

static const char *cub_err_string(gpu_api *api, int code)
{
	const char *s = NULL;

	if (api && api->f.cuGetErrorString && api->f.cuGetErrorString(code, &s) == CUDA_SUCCESS)
		return s;
	return NULL;
}

static int cub_translate(int code, bool *sticky)
{
	*sticky = false;
	switch (code) {
	case CUDA_SUCCESS:
		return 0;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_HANDLE:
	case CUDA_ERROR_INVALID_CONTEXT:
	case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
		return ODX_EINVAL;
	case CUDA_ERROR_OUT_OF_MEMORY:
		return ODX_ENOMEM;
	case CUDA_ERROR_NOT_INITIALIZED:
	case CUDA_ERROR_DEINITIALIZED:
	case CUDA_ERROR_STUB_LIBRARY:
	case CUDA_ERROR_INSUFFICIENT_DRIVER:
	case CUDA_ERROR_DEVICE_UNAVAILABLE:
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_DEVICE_NOT_LICENSED:
	case CUDA_ERROR_SYSTEM_NOT_READY:
	case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
	case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
		return ODX_EUNAVAIL;
	case CUDA_ERROR_INVALID_DEVICE:
		return ODX_ENODEV;
	/* The image cannot run on this device: another variant might. */
	case CUDA_ERROR_INVALID_IMAGE:
	case CUDA_ERROR_NO_BINARY_FOR_GPU:
	case CUDA_ERROR_INVALID_PTX:
	case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
	case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
	case CUDA_ERROR_JIT_COMPILATION_DISABLED:
		return ODX_ENOVARIANT;
	case CUDA_ERROR_FILE_NOT_FOUND:
	case CUDA_ERROR_NOT_FOUND:
	case CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED:
		return ODX_ENOENT;
	case CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED:
		return ODX_EEXIST;
	case CUDA_ERROR_OPERATING_SYSTEM:
		return ODX_EIO;
	case CUDA_ERROR_NOT_READY:
		return ODX_EAGAIN;
	case CUDA_ERROR_NOT_PERMITTED:
		return ODX_EPERM;
	case CUDA_ERROR_NOT_SUPPORTED:
	case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
		return ODX_ENOSYS;
	/* The context is corrupted: every later call fails the same way. */
	case CUDA_ERROR_ECC_UNCORRECTABLE:
	case CUDA_ERROR_NVLINK_UNCORRECTABLE:
	case CUDA_ERROR_ILLEGAL_ADDRESS:
	case CUDA_ERROR_LAUNCH_TIMEOUT:
	case CUDA_ERROR_CONTEXT_IS_DESTROYED:
	case CUDA_ERROR_ASSERT:
	case CUDA_ERROR_HARDWARE_STACK_ERROR:
	case CUDA_ERROR_ILLEGAL_INSTRUCTION:
	case CUDA_ERROR_MISALIGNED_ADDRESS:
	case CUDA_ERROR_INVALID_ADDRESS_SPACE:
	case CUDA_ERROR_INVALID_PC:
	case CUDA_ERROR_LAUNCH_FAILED:
		*sticky = true;
		return ODX_EDEVLOST;
	default:
		return ODX_EBACKEND;
	}
}

/* ---- opening the driver ------------------------------------------------------------------------ */

typedef struct cub_lookup {
	PFN_cuGetProcAddress_v2 v2;
	PFN_cuGetProcAddress_v1 v1;
} cub_lookup;

/* cuGetProcAddress: 0, or the native code with the symbol status in *status. */
static int cub_resolve(const cub_lookup *l, const char *name, int version, void **pfn,
		       int *status)
{
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SUCCESS;
	CUresult rc;

	*pfn = NULL;
	if (l->v2)
		rc = l->v2(name, pfn, version, CU_GET_PROC_ADDRESS_DEFAULT, &st);
	else
		rc = l->v1(name, pfn, version, CU_GET_PROC_ADDRESS_DEFAULT);
	*status = st;
	if (rc == CUDA_SUCCESS && !*pfn)
		rc = CUDA_ERROR_NOT_FOUND;
	return rc;
}

static const char *cub_status_text(int status)
{
	return status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND ? "symbol not found"
	       : status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
		       ? "the driver's version of it is newer than the one asked for"
		       : "lookup failed";
}

static int cub_stub(char *reason, size_t n, const char *call, const char *name)
{
	snprintf(reason, n,
		 "%s: CUDA_ERROR_STUB_LIBRARY (34): the CUDA toolkit's stub library was loaded "
		 "instead of the driver (%s); put the NVIDIA driver's libcuda.so.1 first in the "
		 "library path or set cuda.library",
		 call, name);
	return ODX_EUNAVAIL;
}

static int cub_open_fail(gpu_api *api, int rc)
{
	if (api->lib)
		dlclose(api->lib);
	pthread_mutex_destroy(&api->nvrtc_lock);
	free(api);
	return rc;
}

static int cub_open(const odx_backend_host *env, gpu_api **out, char *reason, size_t n)
{
	const char *name = "libcuda.so.1";
	gpu_api *api = calloc(1, sizeof(*api));
	cub_lookup look = {0};
	void *sym;
	int rc, status, major, minor;

	if (!api) {
		snprintf(reason, n, "out of memory");
		return ODX_ENOMEM;
	}
	pthread_mutex_init(&api->nvrtc_lock, NULL);
	if (env->config_str) {
		const char *nvrtc = NULL;

		env->config_str(env->core, "cuda.library", &name);
		if (env->config_str(env->core, "cuda.nvrtc_library", &nvrtc) == 0 && nvrtc)
			snprintf(api->nvrtc_library, sizeof(api->nvrtc_library), "%s", nvrtc);
	}
	snprintf(api->lib_name, sizeof(api->lib_name), "%s", name);
	/* Never unloaded (dlclose only drops our reference): the driver keeps thread-local state
	 * and threads of its own, which do not survive an unload, and CUDA's own runtime never
	 * unloads it either. */
	api->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!api->lib) {
		snprintf(reason, n, "the CUDA driver %s was not found or cannot be loaded: %s",
			 name, dlerror());
		return cub_open_fail(api, ODX_EUNAVAIL);
	}
	/* The only two symbols taken by name; POSIX lets a function address pass through
	 * void *. */
	if ((sym = dlsym(api->lib, "cuGetProcAddress_v2")) != NULL)
		memcpy(&look.v2, &sym, sizeof(sym));
	else if ((sym = dlsym(api->lib, "cuGetProcAddress")) != NULL)
		memcpy(&look.v1, &sym, sizeof(sym));
	else {
		snprintf(reason, n,
			 "%s has no cuGetProcAddress: the NVIDIA driver is older than CUDA 11.3, "
			 "ODX needs 11.3 (driver API %d) or newer",
			 name, CUB_MIN_DRIVER);
		return cub_open_fail(api, ODX_EUNAVAIL);
	}
	rc = cub_resolve(&look, "cuDriverGetVersion", CUB_MIN_DRIVER, &sym, &status);
	if (rc == CUDA_SUCCESS)
		memcpy(&api->f.cuDriverGetVersion, &sym, sizeof(sym));
	if (rc == CUDA_SUCCESS)
		rc = api->f.cuDriverGetVersion(&api->driver_version);
	if (rc == CUDA_ERROR_STUB_LIBRARY)
		return cub_open_fail(api, cub_stub(reason, n, "cuDriverGetVersion", name));
	if (rc != CUDA_SUCCESS) {
		snprintf(reason, n, "%s: cuGetProcAddress(\"cuDriverGetVersion\") failed (%d, %s)",
			 name, rc, cub_status_text(status));
		return cub_open_fail(api, ODX_EUNAVAIL);
	}
	major = api->driver_version / 1000;
	minor = api->driver_version % 1000 / 10;
	if (api->driver_version < CUB_MIN_DRIVER) {
		snprintf(reason, n,
			 "the NVIDIA driver supports CUDA %d.%d (driver API %d); ODX needs CUDA 11.3 "
			 "(%d) or newer",
			 major, minor, api->driver_version, CUB_MIN_DRIVER);
		return cub_open_fail(api, ODX_EUNAVAIL);
	}
	/* The CUDA 12.0 signatures, or the driver's own where it is older (11.x keeps them). */
	api->api_version = api->driver_version < CUB_API_VERSION ? api->driver_version
								 : CUB_API_VERSION;
#define CUB_RESOLVE(fn, params)                                                                    \
	rc = cub_resolve(&look, #fn, api->api_version, &sym, &status);                             \
	if (rc == CUDA_ERROR_STUB_LIBRARY)                                                         \
		return cub_open_fail(api, cub_stub(reason, n, "cuGetProcAddress", name));          \
	if (rc != CUDA_SUCCESS) {                                                                  \
		snprintf(reason, n,                                                                \
			 "the NVIDIA driver (CUDA %d.%d, %s) does not provide " #fn                \
			 " at API version %d: %s (%d)",                                            \
			 major, minor, name, api->api_version, cub_status_text(status), rc);       \
		return cub_open_fail(api, ODX_EUNAVAIL);                                           \
	}                                                                                          \
	memcpy(&api->f.fn, &sym, sizeof(sym));
	CUB_FUNCTIONS(CUB_RESOLVE)
#undef CUB_RESOLVE
	if (api->driver_version >= CUB_PARAM_INFO_VERSION &&
	    cub_resolve(&look, "cuFuncGetParamInfo", CUB_PARAM_INFO_VERSION, &sym, &status) ==
		    CUDA_SUCCESS)
		memcpy(&api->f.cuFuncGetParamInfo, &sym, sizeof(sym));
	/* Every CUDA driver has it; optional so that a driver stand-in without it (the fake
	 * driver of the tests) gets the core's row-by-row tile copies instead of no backend. */
	if (cub_resolve(&look, "cuMemcpy2DAsync", api->api_version, &sym, &status) == CUDA_SUCCESS)
		memcpy(&api->f.cuMemcpy2DAsync, &sym, sizeof(sym));

	rc = api->f.cuInit(0);
	if (rc == CUDA_ERROR_STUB_LIBRARY) {
		cub_stub(reason, n, "cuInit", name);
	} else if (rc == CUDA_ERROR_INSUFFICIENT_DRIVER || rc == CUDA_ERROR_SYSTEM_DRIVER_MISMATCH) {
		snprintf(reason, n,
			 "cuInit: %s (%d): the kernel driver is too old for %s, which reports CUDA "
			 "%d.%d (%d); ODX asks for API %d (install a matching NVIDIA driver)",
			 cub_err_name(api, rc), rc, name, major, minor, api->driver_version,
			 api->api_version);
	} else if (rc == CUDA_ERROR_NO_DEVICE) {
		snprintf(reason, n,
			 "cuInit: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected "
			 "(driver CUDA %d.%d; check nvidia-smi and CUDA_VISIBLE_DEVICES)",
			 major, minor);
	} else if (rc != CUDA_SUCCESS) {
		const char *s = cub_err_string(api, rc);

		const char *e = cub_err_name(api, rc);

		snprintf(reason, n, "cuInit: %s (%d)%s%s", e ? e : "unknown error", rc,
			 s ? ": " : "", s ? s : "");
	}
	if (rc != CUDA_SUCCESS)
		return cub_open_fail(api, ODX_EUNAVAIL);
	if (env->log) {
		char msg[512];

		snprintf(msg, sizeof(msg),
			 "CUDA driver %s: CUDA %d.%d (%d), entry points at API %d%s", name, major,
			 minor, api->driver_version, api->api_version,
			 api->f.cuFuncGetParamInfo ? ", kernel parameter checks on" : "");
		env->log(env->core, ODX_LOG_INFO, msg);
	}
	*out = api;
	return 0;
}

static void cub_close(gpu_api *api)
{
	cub_nvrtc_close(api->nvrtc);
	pthread_mutex_destroy(&api->nvrtc_lock);
	dlclose(api->lib);
	free(api);
}

/* ---- devices, streams, events, memory ------------------------------------------------------------ */

static int cub_device_count(gpu_api *api, int *count)
{
	return api->f.cuDeviceGetCount(count);
}

static int cub_device_open(gpu_api *api, int index, odx_backend_device_props *props,
			   gpu_dev_info *info)
{
	CUdevice dev;
	CUcontext ctx;
	size_t total = 0, free_bytes = 0, used;
	int rc, major = 0, minor = 0;
	char *c;

	if ((rc = api->f.cuDeviceGet(&dev, index)) != CUDA_SUCCESS)
		return rc;
	if ((rc = api->f.cuDeviceGetName(props->name, (int)sizeof(props->name), dev)))
		return rc;
	if ((rc = api->f.cuDeviceTotalMem(&total, dev)))
		return rc;
	if (api->f.cuDeviceGetPCIBusId(props->pci_bus_id, (int)sizeof(props->pci_bus_id), dev))
		props->pci_bus_id[0] = '\0';
	/* hwloc and sysfs spell PCI ids in lower case. */
	for (c = props->pci_bus_id; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	api->f.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
	api->f.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
	if ((rc = api->f.cuDevicePrimaryCtxRetain(&ctx, dev)))
		return rc;
	if ((rc = api->f.cuCtxSetCurrent(ctx)) ||
	    (rc = api->f.cuMemGetInfo(&free_bytes, &used)) != CUDA_SUCCESS) {
		api->f.cuDevicePrimaryCtxRelease(dev);
		return rc;
	}
	props->memory_bytes = total;
	info->ctx = ctx;
	info->arch = major * 10 + minor;
	info->free_bytes = free_bytes;
	return 0;
}

static void cub_device_close(gpu_api *api, int index, gpu_handle ctx)
{
	CUdevice dev;

	(void)ctx;
	if (api->f.cuDeviceGet(&dev, index) == CUDA_SUCCESS)
		api->f.cuDevicePrimaryCtxRelease(dev);
}

static int cub_make_current(gpu_api *api, int index, gpu_handle ctx)
{
	(void)index;
	return api->f.cuCtxSetCurrent(ctx);
}

static int cub_stream_create(gpu_api *api, gpu_handle *s)
{
	return api->f.cuStreamCreate((CUstream *)s, CU_STREAM_NON_BLOCKING);
}

static int cub_stream_destroy(gpu_api *api, gpu_handle s)
{
	return api->f.cuStreamDestroy(s);
}

static int cub_stream_sync(gpu_api *api, gpu_handle s)
{
	return api->f.cuStreamSynchronize(s);
}

static int cub_event_create(gpu_api *api, gpu_handle *e)
{
	return api->f.cuEventCreate((CUevent *)e, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING);
}

static int cub_event_destroy(gpu_api *api, gpu_handle e)
{
	return api->f.cuEventDestroy(e);
}

static int cub_event_record(gpu_api *api, gpu_handle e, gpu_handle s)
{
	return api->f.cuEventRecord(e, s);
}

static int cub_event_query(gpu_api *api, gpu_handle e)
{
	return api->f.cuEventQuery(e);
}

static int cub_event_sync(gpu_api *api, gpu_handle e)
{
	return api->f.cuEventSynchronize(e);
}

static int cub_mem_alloc(gpu_api *api, uint64_t *ptr, size_t n)
{
	CUdeviceptr p = 0;
	int rc = api->f.cuMemAlloc(&p, n);

	*ptr = p;
	return rc;
}

static int cub_mem_free(gpu_api *api, uint64_t ptr)
{
	return api->f.cuMemFree(ptr);
}

static int cub_memset_async(gpu_api *api, uint64_t ptr, int byte, size_t n, gpu_handle s)
{
	return api->f.cuMemsetD8Async(ptr, (unsigned char)byte, n, s);
}

static int cub_host_alloc(gpu_api *api, void **ptr, size_t n)
{
	return api->f.cuMemHostAlloc(ptr, n, CU_MEMHOSTALLOC_PORTABLE);
}

static int cub_host_free(gpu_api *api, void *ptr)
{
	return api->f.cuMemFreeHost(ptr);
}

/* Portable: the pages count as pinned in every context, so one registration serves all
 * devices. */
static int cub_host_register(gpu_api *api, void *ptr, size_t n)
{
	return api->f.cuMemHostRegister(ptr, n, CU_MEMHOSTREGISTER_PORTABLE);
}

static int cub_host_unregister(gpu_api *api, void *ptr)
{
	return api->f.cuMemHostUnregister(ptr);
}

static int cub_h2d_async(gpu_api *api, uint64_t dst, const void *src, size_t n, gpu_handle s)
{
	return api->f.cuMemcpyHtoDAsync(dst, src, n, s);
}

static int cub_d2h_async(gpu_api *api, void *dst, uint64_t src, size_t n, gpu_handle s)
{
	return api->f.cuMemcpyDtoHAsync(dst, src, n, s);
}

static int cub_peer_async(gpu_api *api, uint64_t dst, const gpu_dev *ddev, uint64_t src,
			  const gpu_dev *sdev, size_t n, gpu_handle s)
{
	return api->f.cuMemcpyPeerAsync(dst, ddev->info.ctx, src, sdev->info.ctx, n, s);
}

static bool cub_copy_2d_available(gpu_api *api)
{
	return api->f.cuMemcpy2DAsync != NULL;
}

/* Host memory is CU_MEMORYTYPE_HOST (pageable or page-locked: the driver tells them apart),
 * device memory CU_MEMORYTYPE_DEVICE, of any context of the process (unified addressing). */
static int cub_copy_2d_async(gpu_api *api, const gpu_copy2d *c, gpu_handle s)
{
	CUDA_MEMCPY2D m = {
		.srcMemoryType = c->src_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE,
		.srcHost = c->src_host,
		.srcDevice = c->src_host ? 0 : c->src,
		.srcPitch = c->src_pitch,
		.dstMemoryType = c->dst_host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE,
		.dstHost = c->dst_host,
		.dstDevice = c->dst_host ? 0 : c->dst,
		.dstPitch = c->dst_pitch,
		.WidthInBytes = c->width,
		.Height = c->rows,
	};

	return api->f.cuMemcpy2DAsync(&m, s);
}

/* ---- images ------------------------------------------------------------------------------------ */

enum { CUB_IMAGE_TEXT, CUB_IMAGE_CUBIN, CUB_IMAGE_FATBIN };

static int cub_image_kind(const odx_kernel_variant *v)
{
	const unsigned char *b = v->code;

	if (v->code_size >= 52 && memcmp(b, "\177ELF", 4) == 0)
		return CUB_IMAGE_CUBIN;
	/* fatbin magic 0xba55ed50, little-endian */
	if (v->code_size >= 16 && b[0] == 0x50 && b[1] == 0xed && b[2] == 0x55 && b[3] == 0xba)
		return CUB_IMAGE_FATBIN;
	return CUB_IMAGE_TEXT;
}

/* The SM version of a cubin (e.g. 90), or 0 when its ELF header uses an encoding not known
 * here. ELF ABI version 8 (CUDA 12.x and 13 toolkits) keeps it in e_flags bits 8..15. */
static int cub_cubin_sm(const odx_kernel_variant *v)
{
	const unsigned char *b = v->code;
	uint32_t flags;

	if (b[4] != 2 /* ELFCLASS64 */ || b[7] != 0x41 /* CUDA OS ABI */ || b[8] != 8)
		return 0;
	if ((b[18] | b[19] << 8) != 190 /* EM_CUDA */)
		return 0;
	flags = (uint32_t)b[48] | (uint32_t)b[49] << 8 | (uint32_t)b[50] << 16 |
		(uint32_t)b[51] << 24;
	return (int)((flags >> 8) & 0xff);
}

/* Finds `directive` in PTX text (within the first 4 KiB) and returns what follows it. */
static const char *cub_ptx_find(const odx_kernel_variant *v, const char *directive, char *buf,
				size_t n)
{
	size_t len = v->code_size < 4096 ? v->code_size : 4096;
	char head[4097];
	const char *p;

	memcpy(head, v->code, len);
	head[len] = '\0';
	p = strstr(head, directive);
	if (!p)
		return NULL;
	p += strlen(directive);
	while (*p == ' ' || *p == '\t')
		p++;
	snprintf(buf, n, "%.*s", (int)strcspn(p, " \t\r\n,;/"), p);
	return buf;
}

/* The PTX ISA versions a driver reads: CUDA 11.x 7.x, 12.x 8.x, 13.x 9.x; minor as the driver's. */
static void cub_ptx_isa(const gpu_api *api, int *major, int *minor)
{
	*major = api->driver_version / 1000 - 4;
	*minor = api->driver_version % 1000 / 10;
}

/* NVRTC for CUDA source variants, opened once per backend instance; NULL, the reason logged
 * once, when it cannot be. */
static cub_nvrtc *cub_nvrtc_get(gpu_api *api, const gpu_dev *d)
{
	cub_nvrtc *rt;

	pthread_mutex_lock(&api->nvrtc_lock);
	if (api->nvrtc_state == 0) {
		if (cub_nvrtc_open(api->nvrtc_library, &api->nvrtc, api->nvrtc_reason,
				   sizeof(api->nvrtc_reason)) == 0) {
			api->nvrtc_state = 1;
			gpu_log(d->st, ODX_LOG_INFO, "CUDA source variants are compiled by %s",
				cub_nvrtc_describe(api->nvrtc));
		} else {
			api->nvrtc_state = -1;
			gpu_log(d->st, ODX_LOG_WARN, "CUDA source variants are skipped: %s",
				api->nvrtc_reason);
		}
	}
	rt = api->nvrtc;
	pthread_mutex_unlock(&api->nvrtc_lock);
	return rt;
}

static bool cub_can_run(gpu_api *api, const gpu_dev *d, const odx_kernel_variant *v)
{
	char ver[32], target[32];
	int arch = d->info.arch, sm, vmaj, vmin, dmaj, dmin;

	if (v->backend != ODX_BACKEND_CUDA || !v->code || v->code_size == 0)
		return false;
	if (v->format == ODX_FORMAT_CUBIN) {
		if (cub_image_kind(v) != CUB_IMAGE_CUBIN || !arch || !(sm = cub_cubin_sm(v)))
			return true; /* fatbin or unknown encoding: the driver decides */
		/* A cubin runs on its own major version, same or higher minor. */
		if (sm / 10 == arch / 10 && sm % 10 <= arch % 10)
			return true;
		gpu_log(d->st, ODX_LOG_INFO,
			"CUDA device %d (arch %d) skips a cubin variant for sm_%d of kernel '%s'",
			d->index, arch, sm, v->entry ? v->entry : "");
		return false;
	}
	if (v->format == ODX_FORMAT_CUDA_C) {
		cub_nvrtc *rt = cub_nvrtc_get(api, d);

		if (!rt)
			return false;
		if (cub_nvrtc_plan(rt, arch, &sm) != CUB_NVRTC_NONE)
			return true;
		gpu_log(d->st, ODX_LOG_INFO,
			"CUDA device %d (arch %d) skips a CUDA source variant of kernel '%s': %s "
			"targets sm_%d and newer",
			d->index, arch, v->entry ? v->entry : "", cub_nvrtc_describe(rt), sm);
		return false;
	}
	if (v->format != ODX_FORMAT_PTX)
		return false;
	/* PTX JIT-compiles for its target or newer ("sm_90a": that exact one), and only if the
	 * driver knows its ISA version (CUDA 11.x: 7.x, 12.x: 8.x, 13.x: 9.x). */
	if (arch && cub_ptx_find(v, ".target", target, sizeof(target)) &&
	    sscanf(target, "sm_%d", &sm) == 1 &&
	    (sm > arch || (target[strlen(target) - 1] == 'a' && sm != arch))) {
		gpu_log(d->st, ODX_LOG_INFO,
			"CUDA device %d (arch %d) skips a PTX variant for %s of kernel '%s'",
			d->index, arch, target, v->entry ? v->entry : "");
		return false;
	}
	cub_ptx_isa(api, &dmaj, &dmin);
	if (cub_ptx_find(v, ".version", ver, sizeof(ver)) &&
	    sscanf(ver, "%d.%d", &vmaj, &vmin) == 2 &&
	    (vmaj > dmaj || (vmaj == dmaj && vmin > dmin))) {
		gpu_log(d->st, ODX_LOG_INFO,
			"CUDA device %d skips a PTX %d.%d variant of kernel '%s': the driver (CUDA "
			"%d.%d) reads PTX up to %d.%d",
			d->index, vmaj, vmin, v->entry ? v->entry : "", api->driver_version / 1000,
			dmin, dmaj, dmin);
		return false;
	}
	return true;
}

/* cuModuleLoadDataEx with the JIT's error log: `log` receives that log, what the image was
 * (`desc`) and, when the driver refuses the image itself, `hint`. */
static int cub_load_image(gpu_api *api, const void *image, const char *desc, const char *hint,
			  gpu_handle *module, char *log, size_t n)
{
	char errlog[4096] = "";
	CUjit_option opts[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[2] = {errlog, (void *)(uintptr_t)sizeof(errlog)};
	bool sticky;
	int rc;

	rc = api->f.cuModuleLoadDataEx((CUmodule *)module, image, 2, opts, vals);
	errlog[sizeof(errlog) - 1] = '\0';
	if (cub_translate(rc, &sticky) != ODX_ENOVARIANT)
		hint = "";
	/* The JIT log first: callers may have little room for the message. */
	if (errlog[0])
		snprintf(log, n, "JIT log: %s; image: %s%s", errlog, desc, hint);
	else
		snprintf(log, n, "image: %s%s", desc, hint);
	return rc;
}

/* A CUDA source variant: NVRTC for this device's architecture, then the driver. Returns a
 * negative ODX code when it fails before the driver sees an image. */
static int cub_module_load_source(gpu_api *api, const gpu_dev *d, const odx_kernel_variant *v,
				  gpu_handle *module, char *log, size_t n)
{
	cub_nvrtc *rt = cub_nvrtc_get(api, d);
	cub_nvrtc_image img;
	char desc[200], target[32], hint[300] = "";
	char *full = NULL;
	int rc, version;

	if (!rt) {
		snprintf(log, n, "CUDA source variant: %s", api->nvrtc_reason);
		return ODX_EUNAVAIL;
	}
	rc = cub_nvrtc_compile(rt, v->code, v->code_size, v->entry, d->info.arch, &img, log, n,
			       &full);
	/* The message carries the error lines; the log sink gets all of it. */
	if (full)
		gpu_log(d->st, rc ? ODX_LOG_WARN : ODX_LOG_DEBUG,
			"CUDA device %d: %s on kernel '%s' %s:\n%s", d->index,
			cub_nvrtc_describe(rt), v->entry, rc ? "failed" : "succeeded with a log",
			full);
	free(full);
	if (rc)
		return rc;
	if (img.target)
		snprintf(target, sizeof(target), "%s_%d", img.cubin ? "sm" : "compute", img.target);
	else
		snprintf(target, sizeof(target), "its default architecture");
	snprintf(desc, sizeof(desc), "CUDA source compiled by %s to %s for %s, %zu bytes",
		 cub_nvrtc_describe(rt), img.cubin ? "a cubin" : "PTX", target, img.size);
	version = cub_nvrtc_version(rt);
	if (version > api->driver_version)
		snprintf(hint, sizeof(hint),
			 " (NVRTC %d.%d is newer than the driver, CUDA %d.%d: update the driver or "
			 "point cuda.nvrtc_library at an NVRTC no newer than it)",
			 version / 1000, version % 1000 / 10, api->driver_version / 1000,
			 api->driver_version % 1000 / 10);
	rc = cub_load_image(api, img.code, desc, hint, module, log, n);
	free(img.code);
	return rc;
}

static int cub_module_load(gpu_api *api, const gpu_dev *d, const odx_kernel_variant *v,
			   gpu_handle *module, char *log, size_t n)
{
	char desc[96], hint[96] = "";
	int kind = cub_image_kind(v), rc, isa_major, isa_minor;
	char *text = NULL;
	const void *image = v->code;

	if (v->format == ODX_FORMAT_CUDA_C)
		return cub_module_load_source(api, d, v, module, log, n);
	if (kind == CUB_IMAGE_CUBIN) {
		int sm = cub_cubin_sm(v);

		if (sm)
			snprintf(desc, sizeof(desc), "cubin for sm_%d, %zu bytes", sm, v->code_size);
		else
			snprintf(desc, sizeof(desc), "cubin, %zu bytes", v->code_size);
	} else if (kind == CUB_IMAGE_FATBIN) {
		snprintf(desc, sizeof(desc), "fatbin, %zu bytes", v->code_size);
	} else {
		char ver[32] = "?", target[32] = "?";

		cub_ptx_find(v, ".version", ver, sizeof(ver));
		cub_ptx_find(v, ".target", target, sizeof(target));
		snprintf(desc, sizeof(desc), "PTX .version %s .target %s, %zu bytes", ver, target,
			 v->code_size);
		cub_ptx_isa(api, &isa_major, &isa_minor);
		snprintf(hint, sizeof(hint), " (the driver, CUDA %d.%d, reads PTX ISA up to %d.%d)",
			 api->driver_version / 1000, isa_minor, isa_major, isa_minor);
		/* The driver reads text up to a NUL, which a variant's code need not carry. */
		text = malloc(v->code_size + 1);
		if (!text) {
			snprintf(log, n, "out of memory");
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		memcpy(text, v->code, v->code_size);
		text[v->code_size] = '\0';
		image = text;
	}
	rc = cub_load_image(api, image, desc, hint, module, log, n);
	free(text);
	return rc;
}

static int cub_module_unload(gpu_api *api, gpu_handle module)
{
	return api->f.cuModuleUnload(module);
}

static int cub_module_function(gpu_api *api, gpu_handle module, const char *entry,
			       gpu_handle *fn)
{
	return api->f.cuModuleGetFunction((CUfunction *)fn, module, entry);
}

static int cub_param_size(gpu_api *api, gpu_handle fn, int index, size_t *size)
{
	size_t off;
	int rc;

	if (!api->f.cuFuncGetParamInfo)
		return -1;
	rc = api->f.cuFuncGetParamInfo(fn, (size_t)index, &off, size);
	/* INVALID_VALUE: no such parameter; anything else: the driver cannot tell. */
	return rc == CUDA_SUCCESS || rc == CUDA_ERROR_INVALID_VALUE ? rc : -1;
}

static int cub_launch(gpu_api *api, gpu_handle fn, const uint32_t grid[3], const uint32_t block[3],
		      gpu_handle s, void **params)
{
	return api->f.cuLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0,
				     s, params, NULL);
}

static const gpu_vendor cub_vendor = {
	.name = "cuda",
	.label = "CUDA",
	.calls =
		{
			[GPU_CALL_INIT] = "cuInit",
			[GPU_CALL_DEVICE_COUNT] = "cuDeviceGetCount",
			[GPU_CALL_DEVICE_OPEN] = "cuDevicePrimaryCtxRetain",
			[GPU_CALL_MAKE_CURRENT] = "cuCtxSetCurrent",
			[GPU_CALL_STREAM_CREATE] = "cuStreamCreate",
			[GPU_CALL_EVENT_CREATE] = "cuEventCreate",
			[GPU_CALL_EVENT_RECORD] = "cuEventRecord",
			[GPU_CALL_EVENT_SYNC] = "cuEventSynchronize",
			[GPU_CALL_MEM_ALLOC] = "cuMemAlloc",
			[GPU_CALL_MEM_FREE] = "cuMemFree",
			[GPU_CALL_MEMSET] = "cuMemsetD8Async",
			[GPU_CALL_HOST_ALLOC] = "cuMemHostAlloc",
			[GPU_CALL_HOST_FREE] = "cuMemFreeHost",
			[GPU_CALL_H2D] = "cuMemcpyHtoDAsync",
			[GPU_CALL_D2H] = "cuMemcpyDtoHAsync",
			[GPU_CALL_PEER] = "cuMemcpyPeerAsync",
			[GPU_CALL_MODULE_LOAD] = "cuModuleLoadDataEx",
			[GPU_CALL_MODULE_FUNCTION] = "cuModuleGetFunction",
			[GPU_CALL_LAUNCH] = "cuLaunchKernel",
			[GPU_CALL_STREAM_SYNC] = "cuStreamSynchronize",
			[GPU_CALL_HOST_REGISTER] = "cuMemHostRegister",
			[GPU_CALL_HOST_UNREGISTER] = "cuMemHostUnregister",
			[GPU_CALL_COPY_2D] = "cuMemcpy2DAsync",
		},
	.not_ready = CUDA_ERROR_NOT_READY,
	.already_registered = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
	.translate = cub_translate,
	.err_name = cub_err_name,
	.err_string = cub_err_string,
	.open = cub_open,
	.close = cub_close,
	.device_count = cub_device_count,
	.device_open = cub_device_open,
	.device_close = cub_device_close,
	.make_current = cub_make_current,
	.stream_create = cub_stream_create,
	.stream_destroy = cub_stream_destroy,
	.stream_sync = cub_stream_sync,
	.event_create = cub_event_create,
	.event_destroy = cub_event_destroy,
	.event_record = cub_event_record,
	.event_query = cub_event_query,
	.event_sync = cub_event_sync,
	.mem_alloc = cub_mem_alloc,
	.mem_free = cub_mem_free,
	.memset_async = cub_memset_async,
	.host_alloc = cub_host_alloc,
	.host_free = cub_host_free,
	.host_register = cub_host_register,
	.host_unregister = cub_host_unregister,
	.h2d_async = cub_h2d_async,
	.d2h_async = cub_d2h_async,
	.peer_async = cub_peer_async,
	.copy_2d_available = cub_copy_2d_available,
	.copy_2d_async = cub_copy_2d_async,
	.can_run = cub_can_run,
	.module_load = cub_module_load,
	.module_unload = cub_module_unload,
	.module_function = cub_module_function,
	.param_size = cub_param_size,
	.launch = cub_launch,
};

static int cub_backend_open(const odx_backend_host *env, void **state, char *reason, size_t n)
{
	return gpu_open(&cub_vendor, env, state, reason, n);
}

static const odx_backend_ops cub_ops = GPU_OPS_INIT(cub_backend_open);

static const odx_backend_descriptor cub_descriptor = {
	.size = sizeof(odx_backend_descriptor),
	.abi_version = ODX_BACKEND_ABI_VERSION,
	.name = "cuda",
	.kind = ODX_BACKEND_CUDA,
	.description = "NVIDIA GPUs through the CUDA driver API (libcuda.so.1 opened at run time)",
	.ops = &cub_ops,
};

ODX_BACKEND_DEFINE_ENTRY(cub_descriptor)
