/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hip.c - the HIP backend: HIP's module API as a symbol table for the GPU skeleton (gpu.c).
 *
 * libamdhip64.so (config key hip.library; with the default name, .so.6 and .so.5 are tried
 * after it) is opened at run time and each function taken with dlsym. Kernel variants are
 * ODX_FORMAT_HIP_CO code objects (or clang offload bundles of several), loaded with
 * hipModuleLoadData; an image without code for this GPU fails there with hipErrorNoBinaryForGpu.
 * HIP has no primary-context handle to pass around: making a device current is hipSetDevice.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../gpu/gpu.h"
#include "hip_api.h"

#define HIPB_DEFAULT_LIBRARY "libamdhip64.so"

struct gpu_api {
	void *lib;
	char lib_name[256];
	int driver_version;
	hipb_table f;
};

/* ---- errors ------------------------------------------------------------------------------------ */

static const char *hipb_err_name(gpu_api *api, int code)
{
	return api && api->f.hipGetErrorName ? api->f.hipGetErrorName(code) : NULL;
}

static const char *hipb_err_string(gpu_api *api, int code)
{
	return api && api->f.hipGetErrorString ? api->f.hipGetErrorString(code) : NULL;
}

static int hipb_translate(int code, bool *sticky)
{
	*sticky = false;
	switch (code) {
	case hipSuccess:
		return 0;
	case hipErrorInvalidValue:
	case hipErrorInvalidHandle:
	case hipErrorInvalidContext:
	case hipErrorLaunchOutOfResources:
		return ODX_EINVAL;
	case hipErrorOutOfMemory:
		return ODX_ENOMEM;
	case hipErrorNotInitialized:
	case hipErrorDeinitialized:
	case hipErrorInsufficientDriver:
	case hipErrorNoDevice:
		return ODX_EUNAVAIL;
	case hipErrorInvalidDevice:
		return ODX_ENODEV;
	case hipErrorInvalidImage:
	case hipErrorNoBinaryForGpu:
	case hipErrorInvalidKernelFile:
	case hipErrorSharedObjectInitFailed:
		return ODX_ENOVARIANT;
	case hipErrorFileNotFound:
	case hipErrorNotFound:
	case hipErrorHostMemoryNotRegistered:
		return ODX_ENOENT;
	case hipErrorHostMemoryAlreadyRegistered:
		return ODX_EEXIST;
	case hipErrorNotReady:
		return ODX_EAGAIN;
	case hipErrorNotSupported:
		return ODX_ENOSYS;
	case hipErrorIllegalAddress:
	case hipErrorLaunchTimeOut:
	case hipErrorAssert:
	case hipErrorLaunchFailure:
		*sticky = true;
		return ODX_EDEVLOST;
	default:
		return ODX_EBACKEND;
	}
}

/* ---- opening the runtime ------------------------------------------------------------------------- */

static int hipb_open(const odx_backend_host *env, gpu_api **out, char *reason, size_t n)
{
	static const char *const fallbacks[] = {"libamdhip64.so.6", "libamdhip64.so.5"};
	const char *name = HIPB_DEFAULT_LIBRARY;
	gpu_api *api = calloc(1, sizeof(*api));
	char first_error[256] = "";
	void *sym;
	size_t i;
	int rc;

	if (!api) {
		snprintf(reason, n, "out of memory");
		return ODX_ENOMEM;
	}
	if (env->config_str)
		env->config_str(env->core, "hip.library", &name);
	api->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!api->lib)
		snprintf(first_error, sizeof(first_error), "%s", dlerror());
	snprintf(api->lib_name, sizeof(api->lib_name), "%s", name);
	/* Distributions ship only the versioned name without the development package. */
	for (i = 0; !api->lib && strcmp(name, HIPB_DEFAULT_LIBRARY) == 0 && i < 2; i++) {
		api->lib = dlopen(fallbacks[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
		snprintf(api->lib_name, sizeof(api->lib_name), "%s", fallbacks[i]);
	}
	if (!api->lib) {
		snprintf(reason, n, "the HIP runtime %s was not found or cannot be loaded: %s%s", name,
			 first_error,
			 strcmp(name, HIPB_DEFAULT_LIBRARY) == 0 ? " (nor .so.6, .so.5)" : "");
		free(api);
		return ODX_EUNAVAIL;
	}
#define HIPB_RESOLVE(fn, params)                                                                   \
	if (!(sym = dlsym(api->lib, #fn))) {                                                       \
		snprintf(reason, n, "%s has no " #fn ": not a HIP runtime, or one too old",        \
			 api->lib_name);                                                           \
		goto out_close;                                                                    \
	}                                                                                          \
	memcpy(&api->f.fn, &sym, sizeof(sym));
	HIPB_FUNCTIONS(HIPB_RESOLVE)
	HIPB_STRING_FUNCTIONS(HIPB_RESOLVE)
#undef HIPB_RESOLVE
	/* Optional, as for CUDA: a stand-in without it gets the core's row-by-row tile copies. */
#define HIPB_RESOLVE_OPTIONAL(fn, params)                                                          \
	if ((sym = dlsym(api->lib, #fn)) != NULL)                                                  \
		memcpy(&api->f.fn, &sym, sizeof(sym));
	HIPB_OPTIONAL_FUNCTIONS(HIPB_RESOLVE_OPTIONAL)
#undef HIPB_RESOLVE_OPTIONAL
	api->f.hipDriverGetVersion(&api->driver_version);
	rc = api->f.hipInit(0);
	if (rc != hipSuccess) {
		const char *e = hipb_err_name(api, rc), *s = hipb_err_string(api, rc);

		snprintf(reason, n, "hipInit: %s (%d)%s%s%s (%s, driver version %d)",
			 e ? e : "unknown error", rc, s ? ": " : "", s ? s : "",
			 rc == hipErrorNoDevice ? "; check rocm-smi and HIP_VISIBLE_DEVICES" : "",
			 api->lib_name, api->driver_version);
		goto out_close;
	}
	if (env->log) {
		char msg[512];

		snprintf(msg, sizeof(msg), "HIP runtime %s: driver version %d", api->lib_name,
			 api->driver_version);
		env->log(env->core, ODX_LOG_INFO, msg);
	}
	*out = api;
	return 0;

out_close:
	dlclose(api->lib);
	free(api);
	return ODX_EUNAVAIL;
}

static void hipb_close(gpu_api *api)
{
	dlclose(api->lib);
	free(api);
}

/* ---- devices, streams, events, memory ------------------------------------------------------------ */

static int hipb_device_count(gpu_api *api, int *count)
{
	return api->f.hipGetDeviceCount(count);
}

static int hipb_device_open(gpu_api *api, int index, odx_backend_device_props *props,
			    gpu_dev_info *info)
{
	hipDevice_t dev;
	size_t total = 0, free_bytes = 0, used;
	char *c;
	int rc;

	if ((rc = api->f.hipDeviceGet(&dev, index)) != hipSuccess)
		return rc;
	if ((rc = api->f.hipDeviceGetName(props->name, (int)sizeof(props->name), dev)))
		return rc;
	if ((rc = api->f.hipDeviceTotalMem(&total, dev)))
		return rc;
	if (api->f.hipDeviceGetPCIBusId(props->pci_bus_id, (int)sizeof(props->pci_bus_id), index))
		props->pci_bus_id[0] = '\0';
	for (c = props->pci_bus_id; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	if ((rc = api->f.hipSetDevice(index)) || (rc = api->f.hipMemGetInfo(&free_bytes, &used)))
		return rc;
	props->memory_bytes = total;
	info->ctx = NULL;
	info->arch = 0;
	info->free_bytes = free_bytes;
	return 0;
}

static void hipb_device_close(gpu_api *api, int index, gpu_handle ctx)
{
	(void)api;
	(void)index;
	(void)ctx;
}

static int hipb_make_current(gpu_api *api, int index, gpu_handle ctx)
{
	(void)ctx;
	return api->f.hipSetDevice(index);
}

static int hipb_stream_create(gpu_api *api, gpu_handle *s)
{
	return api->f.hipStreamCreateWithFlags((hipStream_t *)s, hipStreamNonBlocking);
}

static int hipb_stream_destroy(gpu_api *api, gpu_handle s)
{
	return api->f.hipStreamDestroy(s);
}

static int hipb_stream_sync(gpu_api *api, gpu_handle s)
{
	return api->f.hipStreamSynchronize(s);
}

static int hipb_event_create(gpu_api *api, gpu_handle *e)
{
	return api->f.hipEventCreateWithFlags((hipEvent_t *)e,
					      hipEventBlockingSync | hipEventDisableTiming);
}

static int hipb_event_destroy(gpu_api *api, gpu_handle e)
{
	return api->f.hipEventDestroy(e);
}

static int hipb_event_record(gpu_api *api, gpu_handle e, gpu_handle s)
{
	return api->f.hipEventRecord(e, s);
}

static int hipb_event_query(gpu_api *api, gpu_handle e)
{
	return api->f.hipEventQuery(e);
}

static int hipb_event_sync(gpu_api *api, gpu_handle e)
{
	return api->f.hipEventSynchronize(e);
}

static int hipb_mem_alloc(gpu_api *api, uint64_t *ptr, size_t n)
{
	void *p = NULL;
	int rc = api->f.hipMalloc(&p, n);

	*ptr = (uint64_t)(uintptr_t)p;
	return rc;
}

static int hipb_mem_free(gpu_api *api, uint64_t ptr)
{
	return api->f.hipFree((void *)(uintptr_t)ptr);
}

static int hipb_memset_async(gpu_api *api, uint64_t ptr, int byte, size_t n, gpu_handle s)
{
	return api->f.hipMemsetAsync((void *)(uintptr_t)ptr, byte, n, s);
}

static int hipb_host_alloc(gpu_api *api, void **ptr, size_t n)
{
	return api->f.hipHostMalloc(ptr, n, hipHostMallocPortable);
}

static int hipb_host_free(gpu_api *api, void *ptr)
{
	return api->f.hipHostFree(ptr);
}

static int hipb_host_register(gpu_api *api, void *ptr, size_t n)
{
	return api->f.hipHostRegister(ptr, n, hipHostRegisterPortable);
}

static int hipb_host_unregister(gpu_api *api, void *ptr)
{
	return api->f.hipHostUnregister(ptr);
}

static int hipb_h2d_async(gpu_api *api, uint64_t dst, const void *src, size_t n, gpu_handle s)
{
	return api->f.hipMemcpyHtoDAsync((hipDeviceptr_t)(uintptr_t)dst, (void *)src, n, s);
}

static int hipb_d2h_async(gpu_api *api, void *dst, uint64_t src, size_t n, gpu_handle s)
{
	return api->f.hipMemcpyDtoHAsync(dst, (hipDeviceptr_t)(uintptr_t)src, n, s);
}

static int hipb_peer_async(gpu_api *api, uint64_t dst, const gpu_dev *ddev, uint64_t src,
			   const gpu_dev *sdev, size_t n, gpu_handle s)
{
	return api->f.hipMemcpyPeerAsync((void *)(uintptr_t)dst, ddev->index,
					 (const void *)(uintptr_t)src, sdev->index, n, s);
}

static bool hipb_copy_2d_available(gpu_api *api)
{
	return api->f.hipMemcpy2DAsync != NULL;
}

/* Device to device covers memory of another device too (unified addressing). */
static int hipb_copy_2d_async(gpu_api *api, const gpu_copy2d *c, gpu_handle s)
{
	hipMemcpyKind kind = c->src_host ? hipMemcpyHostToDevice
			     : c->dst_host ? hipMemcpyDeviceToHost : hipMemcpyDeviceToDevice;
	void *dst = c->dst_host ? c->dst_host : (void *)(uintptr_t)c->dst;
	const void *src = c->src_host ? c->src_host : (const void *)(uintptr_t)c->src;

	return api->f.hipMemcpy2DAsync(dst, c->dst_pitch, src, c->src_pitch, c->width, c->rows,
				       kind, s);
}

/* ---- images ------------------------------------------------------------------------------------ */

static bool hipb_can_run(gpu_api *api, const gpu_dev *d, const odx_kernel_variant *v)
{
	(void)api;
	(void)d;
	/* Which gfx targets a code object or bundle carries is for hipModuleLoadData to say. */
	return v->backend == ODX_BACKEND_HIP && v->format == ODX_FORMAT_HIP_CO && v->code &&
	       v->code_size > 0;
}

static int hipb_module_load(gpu_api *api, const gpu_dev *d, const odx_kernel_variant *v,
			    gpu_handle *module, char *log, size_t n)
{
	(void)d;
	snprintf(log, n, "image: HIP code object, %zu bytes", v->code_size);
	return api->f.hipModuleLoadData((hipModule_t *)module, v->code);
}

static int hipb_module_unload(gpu_api *api, gpu_handle module)
{
	return api->f.hipModuleUnload(module);
}

static int hipb_module_function(gpu_api *api, gpu_handle module, const char *entry,
				gpu_handle *fn)
{
	return api->f.hipModuleGetFunction((hipFunction_t *)fn, module, entry);
}

static int hipb_launch(gpu_api *api, gpu_handle fn, const uint32_t grid[3],
		       const uint32_t block[3], gpu_handle s, void **params)
{
	return api->f.hipModuleLaunchKernel(fn, grid[0], grid[1], grid[2], block[0], block[1],
					    block[2], 0, s, params, NULL);
}

static const gpu_vendor hipb_vendor = {
	.name = "hip",
	.label = "HIP",
	.calls =
		{
			[GPU_CALL_INIT] = "hipInit",
			[GPU_CALL_DEVICE_COUNT] = "hipGetDeviceCount",
			[GPU_CALL_DEVICE_OPEN] = "hipDeviceGet",
			[GPU_CALL_MAKE_CURRENT] = "hipSetDevice",
			[GPU_CALL_STREAM_CREATE] = "hipStreamCreateWithFlags",
			[GPU_CALL_EVENT_CREATE] = "hipEventCreateWithFlags",
			[GPU_CALL_EVENT_RECORD] = "hipEventRecord",
			[GPU_CALL_EVENT_SYNC] = "hipEventSynchronize",
			[GPU_CALL_MEM_ALLOC] = "hipMalloc",
			[GPU_CALL_MEM_FREE] = "hipFree",
			[GPU_CALL_MEMSET] = "hipMemsetAsync",
			[GPU_CALL_HOST_ALLOC] = "hipHostMalloc",
			[GPU_CALL_HOST_FREE] = "hipHostFree",
			[GPU_CALL_H2D] = "hipMemcpyHtoDAsync",
			[GPU_CALL_D2H] = "hipMemcpyDtoHAsync",
			[GPU_CALL_PEER] = "hipMemcpyPeerAsync",
			[GPU_CALL_COPY_2D] = "hipMemcpy2DAsync",
			[GPU_CALL_MODULE_LOAD] = "hipModuleLoadData",
			[GPU_CALL_MODULE_FUNCTION] = "hipModuleGetFunction",
			[GPU_CALL_LAUNCH] = "hipModuleLaunchKernel",
			[GPU_CALL_STREAM_SYNC] = "hipStreamSynchronize",
			[GPU_CALL_HOST_REGISTER] = "hipHostRegister",
			[GPU_CALL_HOST_UNREGISTER] = "hipHostUnregister",
		},
	.not_ready = hipErrorNotReady,
	.already_registered = hipErrorHostMemoryAlreadyRegistered,
	.translate = hipb_translate,
	.err_name = hipb_err_name,
	.err_string = hipb_err_string,
	.open = hipb_open,
	.close = hipb_close,
	.device_count = hipb_device_count,
	.device_open = hipb_device_open,
	.device_close = hipb_device_close,
	.make_current = hipb_make_current,
	.stream_create = hipb_stream_create,
	.stream_destroy = hipb_stream_destroy,
	.stream_sync = hipb_stream_sync,
	.event_create = hipb_event_create,
	.event_destroy = hipb_event_destroy,
	.event_record = hipb_event_record,
	.event_query = hipb_event_query,
	.event_sync = hipb_event_sync,
	.mem_alloc = hipb_mem_alloc,
	.mem_free = hipb_mem_free,
	.memset_async = hipb_memset_async,
	.host_alloc = hipb_host_alloc,
	.host_free = hipb_host_free,
	.host_register = hipb_host_register,
	.host_unregister = hipb_host_unregister,
	.h2d_async = hipb_h2d_async,
	.d2h_async = hipb_d2h_async,
	.peer_async = hipb_peer_async,
	.copy_2d_available = hipb_copy_2d_available,
	.copy_2d_async = hipb_copy_2d_async,
	.can_run = hipb_can_run,
	.module_load = hipb_module_load,
	.module_unload = hipb_module_unload,
	.module_function = hipb_module_function,
	.param_size = NULL,
	.launch = hipb_launch,
};

static int hipb_backend_open(const odx_backend_host *env, void **state, char *reason, size_t n)
{
	return gpu_open(&hipb_vendor, env, state, reason, n);
}

static const odx_backend_ops hipb_ops = GPU_OPS_INIT(hipb_backend_open);

static const odx_backend_descriptor hipb_descriptor = {
	.size = sizeof(odx_backend_descriptor),
	.abi_version = ODX_BACKEND_ABI_VERSION,
	.name = "hip",
	.kind = ODX_BACKEND_HIP,
	.description = "AMD GPUs through HIP's module API (libamdhip64.so opened at run time)",
	.ops = &hipb_ops,
};

ODX_BACKEND_DEFINE_ENTRY(hipb_descriptor)
