/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vulkan.c - the Vulkan compute backend: its ops table, open and close, and the one place
 * VkResults become ODX codes.
 *
 * libvulkan.so.1 is opened at run time and every entry point comes through
 * vkGetInstanceProcAddr / vkGetDeviceProcAddr, so the module builds and loads on machines with no
 * Vulkan at all and says why it is unavailable. Per physical device: one logical device, a
 * compute lane and a copy lane (a dedicated transfer queue when the device has one). Each lane
 * owns a timeline semaphore that its submissions signal and a completion thread that sleeps in
 * vkWaitSemaphores and calls the done callbacks in submission order. Kernels are SPIR-V with
 * storage buffers at set 0 (push descriptors) and scalars in one push-constant block
 * (docs/kernel-abi.md).
 *
 * The compute lane is ordered (odx_backend_device_props.ordered_compute): every launch is
 * recorded behind a barrier on the one compute queue, so it runs after the launches before it
 * with their writes visible, and one thread reports the launches in order. Launches are batched:
 * one goes straight to the queue when the lane is idle; while a submission is in flight, later
 * ones are recorded into an open command buffer, submitted when VKB_BATCH_MAX are in it or when
 * the completion thread retires the submission in flight.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkb.h"

/* ---- errors ---------------------------------------------------------------------------------- */

static const char *vkb_result_name(VkResult r)
{
	switch (r) {
#define VKB_CASE(x)                                                                                \
	case x:                                                                                    \
		return #x;
		VKB_CASE(VK_SUCCESS)
		VKB_CASE(VK_NOT_READY)
		VKB_CASE(VK_TIMEOUT)
		VKB_CASE(VK_INCOMPLETE)
		VKB_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
		VKB_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
		VKB_CASE(VK_ERROR_INITIALIZATION_FAILED)
		VKB_CASE(VK_ERROR_DEVICE_LOST)
		VKB_CASE(VK_ERROR_MEMORY_MAP_FAILED)
		VKB_CASE(VK_ERROR_LAYER_NOT_PRESENT)
		VKB_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
		VKB_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
		VKB_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
		VKB_CASE(VK_ERROR_TOO_MANY_OBJECTS)
		VKB_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
		VKB_CASE(VK_ERROR_FRAGMENTED_POOL)
		VKB_CASE(VK_ERROR_UNKNOWN)
		VKB_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
		VKB_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
		VKB_CASE(VK_ERROR_FRAGMENTATION)
		VKB_CASE(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
		VKB_CASE(VK_ERROR_INVALID_SHADER_NV)
#undef VKB_CASE
	default:
		return "VkResult";
	}
}

/*
 * The one place VkResults become ODX codes. The message keeps the entry point, the result's
 * name and its number, e.g. "vkAllocateMemory: VK_ERROR_OUT_OF_DEVICE_MEMORY (-2)".
 */
int vkb_check(VkResult r, const char *what, char *msg, size_t msg_size)
{
	if (r == VK_SUCCESS)
		return 0;
	if (msg && msg_size)
		snprintf(msg, msg_size, "%s: %s (%d)", what, vkb_result_name(r), (int)r);
	switch (r) {
	case VK_ERROR_OUT_OF_HOST_MEMORY:
	case VK_ERROR_OUT_OF_DEVICE_MEMORY:
	case VK_ERROR_OUT_OF_POOL_MEMORY:
	case VK_ERROR_FRAGMENTATION:
		return ODX_ENOMEM;
	case VK_ERROR_DEVICE_LOST:
		return ODX_EDEVLOST;
	case VK_TIMEOUT:
		return ODX_ETIMEDOUT;
	case VK_ERROR_INCOMPATIBLE_DRIVER:
	case VK_ERROR_INITIALIZATION_FAILED:
	case VK_ERROR_LAYER_NOT_PRESENT:
	case VK_ERROR_EXTENSION_NOT_PRESENT:
	case VK_ERROR_FEATURE_NOT_PRESENT:
		return ODX_EUNAVAIL;
	default:
		return ODX_EBACKEND;
	}
}

void vkb_log(vkb_state *st, odx_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	odx__backend_vlog(st->host, level, fmt, ap);
	va_end(ap);
}

/* Debug-utils messenger: every warning or error is logged and fails the next completion. */
VKAPI_ATTR VkBool32 VKAPI_CALL vkb_on_message(
	VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT types,
	const VkDebugUtilsMessengerCallbackDataEXT *data, void *user)
{
	vkb_state *st = user;

	(void)severity;
	(void)types;
	pthread_mutex_lock(&st->msg_lock);
	snprintf(st->msg, sizeof(st->msg), "Vulkan validation: %s",
		 data && data->pMessage ? data->pMessage : "(no message)");
	atomic_fetch_add(&st->msg_count, 1);
	if (st->host->log)
		st->host->log(st->host->core, ODX_LOG_ERROR, st->msg);
	pthread_mutex_unlock(&st->msg_lock);
	return VK_FALSE;
}

/* A validation message this device has not reported yet goes into `msg`; returns true then. */
bool vkb_take_message(vkb_dev *d, char *msg, size_t msg_size)
{
	uint_fast64_t seen = atomic_load(&d->msg_seen), now = atomic_load(&d->st->msg_count);

	if (now == seen || !atomic_compare_exchange_strong(&d->msg_seen, &seen, now))
		return false;
	pthread_mutex_lock(&d->st->msg_lock);
	snprintf(msg, msg_size, "%s", d->st->msg);
	pthread_mutex_unlock(&d->st->msg_lock);
	return true;
}

static void vkb_close(void *state);

static int vkb_open(const odx_backend_host *host, void **state, char *reason, size_t n)
{
	vkb_state *st = calloc(1, sizeof(*st));
	void *sym;
	int rc;

	if (!st) {
		snprintf(reason, n, "out of memory");
		return ODX_ENOMEM;
	}
	st->host = host;
	pthread_mutex_init(&st->msg_lock, NULL);
	/* Missing keys (an older core) keep the defaults: all false. */
	host->config_bool(host->core, "vulkan.allow_cpu", &st->allow_cpu);
	host->config_bool(host->core, "vulkan.force_staging", &st->force_staging);
	host->config_bool(host->core, "vulkan.validation", &st->validation);
	st->lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!st->lib) {
		snprintf(reason, n, "libvulkan.so.1 not found: %s", dlerror());
		rc = ODX_EUNAVAIL;
		goto out_close;
	}
	sym = dlsym(st->lib, "vkGetInstanceProcAddr");
	if (!sym) {
		snprintf(reason, n, "libvulkan.so.1 exports no vkGetInstanceProcAddr");
		rc = ODX_EUNAVAIL;
		goto out_close;
	}
	/* POSIX guarantees a function address survives the trip through void *. */
	memcpy(&st->gipa, &sym, sizeof(st->gipa));
	rc = vkb_create_instance(st, reason, n);
	if (rc)
		goto out_close;
	rc = vkb_pick_devices(st, reason, n);
	if (rc)
		goto out_close;
	if (st->validation)
		vkb_log(st, ODX_LOG_INFO, "vulkan: Khronos validation layer enabled");
	*state = st;
	return 0;

out_close:
	vkb_close(st);
	return rc;
}

static void vkb_close(void *state)
{
	vkb_state *st = state;

	if (st->messenger)
		st->destroy_messenger(st->instance, st->messenger, NULL);
	if (st->instance)
		st->fn.vkDestroyInstance(st->instance, NULL);
	if (st->lib)
		dlclose(st->lib);
	pthread_mutex_destroy(&st->msg_lock);
	free(st);
}

static int vkb_device_count(void *state)
{
	return ((vkb_state *)state)->ndevices;
}

static const odx_backend_ops vkb_ops = {
	.size = sizeof(odx_backend_ops),
	.open = vkb_open,
	.close = vkb_close,
	.device_count = vkb_device_count,
	.device_open = vkb_device_open,
	.device_close = vkb_device_close,
	.mem_alloc = vkb_mem_alloc,
	.mem_free = vkb_mem_free,
	.copy_h2d = vkb_copy_h2d,
	.copy_d2h = vkb_copy_d2h,
	.copy_d2d = vkb_copy_d2d,
	.copy_2d = vkb_copy_2d,
	.module_load = vkb_module_load,
	.module_unload = vkb_module_unload,
	.launch = vkb_launch,
	.can_run = NULL,
	.mem_map = vkb_mem_map,
	.progress = vkb_progress,
};

static const odx_backend_descriptor vkb_descriptor = {
	.size = sizeof(odx_backend_descriptor),
	.abi_version = ODX_BACKEND_ABI_VERSION,
	.name = "vulkan",
	.kind = ODX_BACKEND_VULKAN,
	.description = "Vulkan compute: SPIR-V kernels, push descriptors, timeline semaphores",
	.ops = &vkb_ops,
};

ODX_BACKEND_DEFINE_ENTRY(vkb_descriptor)
