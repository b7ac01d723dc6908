/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vulkan.c - the Vulkan compute backend.
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

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "odx/backend.h"
#include "spirv.h"

#define VKB_MAX_DEVICES 16
#define VKB_MSG_MAX 512
#define VKB_WAIT_NS 1000000000ull /* one wait slice of a completion thread */
/* An idle completion thread first waits on the timeline for the next value itself, this long at
 * a time, this many times, before it sleeps on its condition variable: a submission made
 * meanwhile then wakes it once (when it completes) instead of twice (when it is queued, then when
 * it completes). */
#define VKB_AHEAD_NS 2000000ull
#define VKB_AHEAD_ROUNDS 2
/* While application threads retire a lane's completions (ABI 1.4 progress), its completion thread
 * stays off the timeline (waiting there too would wake it at each completion, beside the thread
 * that retires it) and takes over once no caller retired anything for a while: 250 us at first,
 * doubling up to 1 ms for as long as callers keep retiring (each look costs a wake-up, about 5 us
 * of a 60 us small-dispatch iteration on lavapipe), back to 250 us once it took over. */
#define VKB_DRIVEN_NS 250000ull
#define VKB_DRIVEN_MAX_NS 1000000ull
#define VKB_STAGING_MIN (64u << 10)
#define VKB_STAGING_KEEP 8 /* staging buffers a lane keeps for reuse */
#define VKB_PUSH_MAX 256    /* push-constant bytes ODX fills (every device offers >= 128) */
#define VKB_BATCH_MAX 32    /* launches recorded into one compute submission at most */

/* Instance-level entry points (resolved with the instance). */
#define VKB_INSTANCE_FNS(X)                                                                        \
	X(vkDestroyInstance)                                                                       \
	X(vkEnumeratePhysicalDevices)                                                              \
	X(vkGetPhysicalDeviceProperties)                                                           \
	X(vkGetPhysicalDeviceProperties2)                                                          \
	X(vkGetPhysicalDeviceFeatures2)                                                            \
	X(vkGetPhysicalDeviceQueueFamilyProperties)                                                \
	X(vkGetPhysicalDeviceMemoryProperties)                                                     \
	X(vkEnumerateDeviceExtensionProperties)                                                    \
	X(vkCreateDevice)                                                                          \
	X(vkGetDeviceProcAddr)

/* Device-level entry points (resolved per device: no loader trampoline on the hot path). */
#define VKB_DEVICE_FNS(X)                                                                          \
	X(vkDestroyDevice)                                                                         \
	X(vkGetDeviceQueue)                                                                        \
	X(vkDeviceWaitIdle)                                                                        \
	X(vkCreateBuffer)                                                                          \
	X(vkDestroyBuffer)                                                                         \
	X(vkGetBufferMemoryRequirements)                                                           \
	X(vkAllocateMemory)                                                                        \
	X(vkFreeMemory)                                                                            \
	X(vkBindBufferMemory)                                                                      \
	X(vkMapMemory)                                                                             \
	X(vkCreateCommandPool)                                                                     \
	X(vkDestroyCommandPool)                                                                    \
	X(vkAllocateCommandBuffers)                                                                \
	X(vkBeginCommandBuffer)                                                                    \
	X(vkEndCommandBuffer)                                                                      \
	X(vkCmdCopyBuffer)                                                                         \
	X(vkCmdFillBuffer)                                                                         \
	X(vkCmdPipelineBarrier)                                                                    \
	X(vkCmdBindPipeline)                                                                       \
	X(vkCmdPushConstants)                                                                      \
	X(vkCmdPushDescriptorSetKHR)                                                               \
	X(vkCmdDispatch)                                                                           \
	X(vkQueueSubmit)                                                                           \
	X(vkCreateSemaphore)                                                                       \
	X(vkDestroySemaphore)                                                                      \
	X(vkWaitSemaphores)                                                                        \
	X(vkGetSemaphoreCounterValue)                                                              \
	X(vkCreateShaderModule)                                                                    \
	X(vkDestroyShaderModule)                                                                   \
	X(vkCreateDescriptorSetLayout)                                                             \
	X(vkDestroyDescriptorSetLayout)                                                            \
	X(vkCreatePipelineLayout)                                                                  \
	X(vkDestroyPipelineLayout)                                                                 \
	X(vkCreateComputePipelines)                                                                \
	X(vkDestroyPipeline)

#define VKB_DECLARE(name) PFN_##name name;

typedef struct vkb_state {
	const odx_backend_host *host;
	void *lib;
	PFN_vkGetInstanceProcAddr gipa;
	VkInstance instance;
	VkDebugUtilsMessengerEXT messenger;
	PFN_vkDestroyDebugUtilsMessengerEXT destroy_messenger;
	struct {
		VKB_INSTANCE_FNS(VKB_DECLARE)
	} fn;
	bool allow_cpu, force_staging, validation;
	int ndevices;
	VkPhysicalDevice phys[VKB_MAX_DEVICES];

	/* Validation-layer messages: counted, the latest kept; devices consume them. */
	pthread_mutex_t msg_lock;
	char msg[VKB_MSG_MAX];
	atomic_uint_fast64_t msg_count;
} vkb_state;

/* A device buffer: what an ODX memory handle points to. */
typedef struct vkb_mem {
	VkBuffer buf;
	VkDeviceMemory mem;
	size_t size;
	void *map; /* host-visible, coherent memory: mapped for good; NULL otherwise */
} vkb_mem;

typedef struct vkb_staging {
	struct vkb_staging *next;
	vkb_mem m;
} vkb_staging;

/* One piece of work a lane waits for: a submission, or a host copy ordered after one. */
typedef struct vkb_pending {
	struct vkb_pending *next;
	uint64_t value;            /* complete when the lane's timeline reaches this */
	VkCommandBuffer cmd;       /* returned to the lane's free list (or VK_NULL_HANDLE) */
	vkb_staging *staging;      /* returned to the lane's staging pool (or NULL) */
	void *copy_dst;            /* a memcpy to do once complete (d2h, mapped h2d) */
	const void *copy_src;
	size_t copy_n;
	odx_backend_done_fn done;
	void *arg;
	int status;                /* a batched launch whose submission failed: its error */
} vkb_pending;

typedef struct vkb_dev vkb_dev;

typedef struct vkb_lane {
	vkb_dev *dev;
	const char *name;
	VkQueue queue;
	pthread_mutex_t *queue_lock; /* shared when both lanes use the same VkQueue */
	uint32_t family;
	VkCommandPool pool;
	VkSemaphore timeline;
	struct vkb_lane *other;      /* its submissions wait on the other lane's progress */

	pthread_mutex_t lock;        /* everything below, and the command pool */
	pthread_cond_t cond;
	uint64_t submitted;          /* last timeline value a submission signals */
	atomic_uint_fast64_t completed; /* last value the completion thread saw reached */
	vkb_pending *head, *tail;
	VkCommandBuffer *free_cmds;
	int nfree_cmds, cap_cmds;
	vkb_staging *free_staging;
	int nfree_staging;
	/* The compute lane's open batch: recorded launches not submitted yet. */
	VkCommandBuffer open_cmd;
	vkb_pending *open_head, *open_tail;
	int open_n;
	char fail_msg[VKB_MSG_MAX]; /* why the last batch could not be submitted */
	uint64_t waiting_ahead;      /* nonzero: the completion thread waits for this timeline value,
				      * not on `cond` */
	bool retiring;               /* a thread (the completion thread, or an application thread
				      * in progress) is retiring `head`: nobody else takes it */
	bool retire_wait;            /* the completion thread waits on `cond` for that to end */
	bool driven;                 /* callers retired the last completions (vkb_progress) */
	bool driven_sleep;           /* the completion thread stays out of their way meanwhile */
	uint64_t driven_ns;          /* for this long at a time (VKB_DRIVEN_NS .. _MAX_NS) */
	uint64_t caller_retired;     /* completions retired by callers, ever */
	bool stop;
	pthread_t thread;
	bool started;
} vkb_lane;

typedef struct vkb_pipeline {
	struct vkb_pipeline *next;
	uint32_t block[3];
	int nbuffers;
	uint32_t push_size;
	VkDescriptorSetLayout set_layout;
	VkPipelineLayout layout;
	VkPipeline pipeline;
} vkb_pipeline;

typedef struct vkb_module {
	VkShaderModule shader;
	char entry[128];
	vkb_spirv_iface iface;
	pthread_mutex_t lock;
	vkb_pipeline *pipelines; /* cached per (block, buffers, push size) */
} vkb_module;

struct vkb_dev {
	vkb_state *st;
	int odx_device;
	char name[128];
	VkPhysicalDevice phys;
	VkDevice device;
	struct {
		VKB_DEVICE_FNS(VKB_DECLARE)
	} fn;
	VkPhysicalDeviceLimits limits;
	uint32_t mem_align; /* what device props say: offsets of suballocated arguments */
	uint32_t max_push_descriptors;
	VkPhysicalDeviceMemoryProperties memprops;
	uint32_t device_type_bits;  /* memory types usable for device buffers */
	bool force_staging;
	pthread_mutex_t queue_locks[2];
	vkb_lane compute, copy;
	atomic_uint_fast64_t msg_seen; /* validation messages already reported */
};

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
static int vkb_check(VkResult r, const char *what, char *msg, size_t msg_size)
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

static void vkb_log(vkb_state *st, odx_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void vkb_log(vkb_state *st, odx_log_level level, const char *fmt, ...)
{
	char msg[VKB_MSG_MAX];
	va_list ap;

	if (!st->host->log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	st->host->log(st->host->core, level, msg);
}

/* Debug-utils messenger: every warning or error is logged and fails the next completion. */
static VKAPI_ATTR VkBool32 VKAPI_CALL vkb_on_message(
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
static bool vkb_take_message(vkb_dev *d, char *msg, size_t msg_size)
{
	uint_fast64_t seen = atomic_load(&d->msg_seen), now = atomic_load(&d->st->msg_count);

	if (now == seen || !atomic_compare_exchange_strong(&d->msg_seen, &seen, now))
		return false;
	pthread_mutex_lock(&d->st->msg_lock);
	snprintf(msg, msg_size, "%s", d->st->msg);
	pthread_mutex_unlock(&d->st->msg_lock);
	return true;
}

/* ---- driver open and device selection ------------------------------------------------------ */

static bool vkb_has_ext(const VkExtensionProperties *exts, uint32_t n, const char *name)
{
	for (uint32_t i = 0; i < n; i++)
		if (strcmp(exts[i].extensionName, name) == 0)
			return true;
	return false;
}

/* Why a physical device cannot serve ODX ("" if it can). */
static void vkb_device_unfit(vkb_state *st, VkPhysicalDevice pd, char *why, size_t n)
{
	VkPhysicalDeviceVulkan12Features f12 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
	VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
					.pNext = &f12};
	VkPhysicalDeviceProperties p;
	VkExtensionProperties *exts = NULL;
	VkQueueFamilyProperties *fams;
	uint32_t next = 0, nfam = 0, i;
	bool compute = false;

	why[0] = '\0';
	st->fn.vkGetPhysicalDeviceProperties(pd, &p);
	if (VK_API_VERSION_MINOR(p.apiVersion) < 2 && VK_API_VERSION_MAJOR(p.apiVersion) == 1) {
		snprintf(why, n, "%s supports Vulkan %u.%u only (1.2 needed)", p.deviceName,
			 VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion));
		return;
	}
	st->fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nfam, NULL);
	fams = calloc(nfam ? nfam : 1, sizeof(*fams));
	if (!fams) {
		snprintf(why, n, "out of memory");
		return;
	}
	st->fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nfam, fams);
	for (i = 0; i < nfam && !compute; i++)
		compute = (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) != 0;
	free(fams);
	if (!compute) {
		snprintf(why, n, "%s has no compute queue", p.deviceName);
		return;
	}
	st->fn.vkGetPhysicalDeviceFeatures2(pd, &f2);
	if (!f12.timelineSemaphore) {
		snprintf(why, n, "%s lacks timeline semaphores", p.deviceName);
		return;
	}
	st->fn.vkEnumerateDeviceExtensionProperties(pd, NULL, &next, NULL);
	exts = calloc(next ? next : 1, sizeof(*exts));
	if (!exts) {
		snprintf(why, n, "out of memory");
		return;
	}
	st->fn.vkEnumerateDeviceExtensionProperties(pd, NULL, &next, exts);
	/* Arguments reach kernels through push descriptors (docs/kernel-abi.md). */
	if (!vkb_has_ext(exts, next, VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME))
		snprintf(why, n, "%s lacks " VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME, p.deviceName);
	free(exts);
}

static bool vkb_instance_has_layer(vkb_state *st, const char *name)
{
	PFN_vkEnumerateInstanceLayerProperties enum_layers =
		(PFN_vkEnumerateInstanceLayerProperties)st->gipa(
			NULL, "vkEnumerateInstanceLayerProperties");
	VkLayerProperties *layers;
	uint32_t n = 0, i;
	bool found = false;

	if (!enum_layers || enum_layers(&n, NULL) != VK_SUCCESS)
		return false;
	layers = calloc(n ? n : 1, sizeof(*layers));
	if (!layers)
		return false;
	if (enum_layers(&n, layers) == VK_SUCCESS)
		for (i = 0; i < n && !found; i++)
			found = strcmp(layers[i].layerName, name) == 0;
	free(layers);
	return found;
}

static int vkb_create_instance(vkb_state *st, char *reason, size_t n)
{
	static const char *const layer = "VK_LAYER_KHRONOS_validation";
	static const char *const ext = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
	PFN_vkEnumerateInstanceVersion version_fn =
		(PFN_vkEnumerateInstanceVersion)st->gipa(NULL, "vkEnumerateInstanceVersion");
	PFN_vkCreateInstance create =
		(PFN_vkCreateInstance)st->gipa(NULL, "vkCreateInstance");
	VkDebugUtilsMessengerCreateInfoEXT mci = {
		.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
		.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
				   VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
		.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
			       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT,
		.pfnUserCallback = vkb_on_message,
		.pUserData = st,
	};
	VkApplicationInfo app = {
		.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
		.pApplicationName = "odx",
		.pEngineName = "odx",
		.engineVersion = VK_MAKE_API_VERSION(0, ODX_VERSION_MAJOR, ODX_VERSION_MINOR,
						     ODX_VERSION_PATCH),
		.apiVersion = VK_API_VERSION_1_2,
	};
	VkInstanceCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
		.pApplicationInfo = &app,
	};
	uint32_t version = VK_API_VERSION_1_0;
	PFN_vkCreateDebugUtilsMessengerEXT create_messenger;
	char msg[VKB_MSG_MAX];
	int rc;

	if (!create) {
		snprintf(reason, n, "libvulkan.so.1 has no vkCreateInstance");
		return ODX_EUNAVAIL;
	}
	if (version_fn)
		version_fn(&version);
	if (VK_API_VERSION_MAJOR(version) == 1 && VK_API_VERSION_MINOR(version) < 2) {
		snprintf(reason, n, "the Vulkan loader is version %u.%u; ODX needs 1.2",
			 VK_API_VERSION_MAJOR(version), VK_API_VERSION_MINOR(version));
		return ODX_EUNAVAIL;
	}
	if (st->validation) {
		if (!vkb_instance_has_layer(st, layer)) {
			snprintf(reason, n, "vulkan.validation = true but %s is not installed",
				 layer);
			return ODX_EUNAVAIL;
		}
		/* Chained here too, so messages from instance creation itself are caught. */
		ci.pNext = &mci;
		ci.enabledLayerCount = 1;
		ci.ppEnabledLayerNames = &layer;
		ci.enabledExtensionCount = 1;
		ci.ppEnabledExtensionNames = &ext;
	}
	rc = vkb_check(create(&ci, NULL, &st->instance), "vkCreateInstance", msg, sizeof(msg));
	if (rc) {
		snprintf(reason, n, "%s%s", msg,
			 rc == ODX_EUNAVAIL ? " (no Vulkan driver installed?)" : "");
		return rc == ODX_EUNAVAIL ? rc : ODX_EUNAVAIL;
	}
#define VKB_LOAD_INSTANCE(name)                                                                    \
	st->fn.name = (PFN_##name)st->gipa(st->instance, #name);                                   \
	if (!st->fn.name) {                                                                        \
		snprintf(reason, n, "the Vulkan loader lacks %s", #name);                          \
		return ODX_EUNAVAIL;                                                               \
	}
	VKB_INSTANCE_FNS(VKB_LOAD_INSTANCE)
#undef VKB_LOAD_INSTANCE
	if (!st->validation)
		return 0;
	create_messenger = (PFN_vkCreateDebugUtilsMessengerEXT)st->gipa(
		st->instance, "vkCreateDebugUtilsMessengerEXT");
	st->destroy_messenger = (PFN_vkDestroyDebugUtilsMessengerEXT)st->gipa(
		st->instance, "vkDestroyDebugUtilsMessengerEXT");
	if (!create_messenger || !st->destroy_messenger) {
		snprintf(reason, n, "vulkan.validation = true but " VK_EXT_DEBUG_UTILS_EXTENSION_NAME
				    " is missing");
		return ODX_EUNAVAIL;
	}
	rc = vkb_check(create_messenger(st->instance, &mci, NULL, &st->messenger),
		       "vkCreateDebugUtilsMessengerEXT", msg, sizeof(msg));
	if (rc)
		snprintf(reason, n, "%s", msg);
	return rc ? ODX_EUNAVAIL : 0;
}

/* Keeps the devices ODX can use; says why when none is left. */
static int vkb_pick_devices(vkb_state *st, char *reason, size_t n)
{
	VkPhysicalDevice all[VKB_MAX_DEVICES];
	uint32_t count = VKB_MAX_DEVICES, i;
	char why[VKB_MSG_MAX] = "", cpu_names[256] = "", one[256];
	int ncpu = 0;

	VkResult r = st->fn.vkEnumeratePhysicalDevices(st->instance, &count, all);

	/* VK_INCOMPLETE: more devices than ODX takes; the first ones are used. */
	if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
		vkb_check(r, "vkEnumeratePhysicalDevices", reason, n);
		return ODX_EUNAVAIL;
	}
	for (i = 0; i < count; i++) {
		VkPhysicalDeviceProperties p;

		st->fn.vkGetPhysicalDeviceProperties(all[i], &p);
		if (p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU && !st->allow_cpu) {
			/* CPU drivers are slower than the host backend: only when asked for. */
			snprintf(one, sizeof(one), "%s%s", ncpu++ ? ", " : "", p.deviceName);
			strncat(cpu_names, one, sizeof(cpu_names) - strlen(cpu_names) - 1);
			continue;
		}
		vkb_device_unfit(st, all[i], one, sizeof(one));
		if (one[0]) {
			size_t used = strlen(why);

			snprintf(why + used, sizeof(why) - used, "%s%s", used ? "; " : "", one);
			continue;
		}
		st->phys[st->ndevices++] = all[i];
	}
	if (st->ndevices > 0)
		return 0;
	if (count == 0)
		snprintf(reason, n, "no Vulkan device (the loader found no driver)");
	else if (why[0])
		snprintf(reason, n, "no usable Vulkan device: %s%s%s%s", why,
			 ncpu ? "; CPU devices skipped (" : "", ncpu ? cpu_names : "",
			 ncpu ? "): set vulkan.allow_cpu = true" : "");
	else
		snprintf(reason, n, "no Vulkan device; only CPU devices (%s): set "
				    "vulkan.allow_cpu = true",
			 cpu_names);
	return ODX_EUNAVAIL;
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

/* ---- memory ---------------------------------------------------------------------------------- */

/* A memory type allowed by `bits` with all of `need`, preferring one with `want` too. */
static int vkb_memory_type(const vkb_dev *d, uint32_t bits, VkMemoryPropertyFlags need,
			   VkMemoryPropertyFlags want)
{
	int best = -1;

	for (uint32_t i = 0; i < d->memprops.memoryTypeCount; i++) {
		VkMemoryPropertyFlags f = d->memprops.memoryTypes[i].propertyFlags;

		if (!(bits & (1u << i)) || (f & need) != need)
			continue;
		if ((f & want) == want)
			return (int)i;
		if (best < 0)
			best = (int)i;
	}
	return best;
}

static void vkb_buffer_destroy(vkb_dev *d, vkb_mem *m)
{
	if (m->buf)
		d->fn.vkDestroyBuffer(d->device, m->buf, NULL);
	if (m->mem)
		d->fn.vkFreeMemory(d->device, m->mem, NULL);
	*m = (vkb_mem){0};
}

/*
 * One VkBuffer with its own allocation (pooling is the memory-tier issue's job). Device buffers
 * prefer device-local memory; staging buffers need host-visible, coherent memory.
 */
static int vkb_buffer_create(vkb_dev *d, size_t size, bool staging, vkb_mem *m, char *msg,
			     size_t msg_size)
{
	const VkMemoryPropertyFlags hostmem =
		VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
	uint32_t families[2] = {d->compute.family, d->copy.family};
	/* Sizes rounded to 16: vkCmdFillBuffer works on whole words. */
	VkBufferCreateInfo bci = {
		.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
		.size = (size + 15) & ~(size_t)15,
		.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
			 (staging ? 0 : VK_BUFFER_USAGE_STORAGE_BUFFER_BIT),
		/* Both lanes touch every buffer: concurrent sharing spares ownership transfers. */
		.sharingMode = families[0] == families[1] ? VK_SHARING_MODE_EXCLUSIVE
							  : VK_SHARING_MODE_CONCURRENT,
		.queueFamilyIndexCount = families[0] == families[1] ? 0 : 2,
		.pQueueFamilyIndices = families,
	};
	VkMemoryRequirements req;
	VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
	int type, rc;

	*m = (vkb_mem){.size = size};
	rc = vkb_check(d->fn.vkCreateBuffer(d->device, &bci, NULL, &m->buf), "vkCreateBuffer", msg,
		       msg_size);
	if (rc)
		return rc;
	d->fn.vkGetBufferMemoryRequirements(d->device, m->buf, &req);
	type = staging ? vkb_memory_type(d, req.memoryTypeBits, hostmem,
					 VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
		       : vkb_memory_type(d, req.memoryTypeBits, 0,
					 VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
	if (type < 0) {
		snprintf(msg, msg_size, "no memory type for a %s buffer",
			 staging ? "staging" : "device");
		rc = ODX_EBACKEND;
		goto out_destroy;
	}
	mai.allocationSize = req.size;
	mai.memoryTypeIndex = (uint32_t)type;
	rc = vkb_check(d->fn.vkAllocateMemory(d->device, &mai, NULL, &m->mem), "vkAllocateMemory",
		       msg, msg_size);
	if (rc)
		goto out_destroy;
	rc = vkb_check(d->fn.vkBindBufferMemory(d->device, m->buf, m->mem, 0),
		       "vkBindBufferMemory", msg, msg_size);
	if (rc)
		goto out_destroy;
	if ((d->memprops.memoryTypes[type].propertyFlags & hostmem) == hostmem) {
		rc = vkb_check(d->fn.vkMapMemory(d->device, m->mem, 0, VK_WHOLE_SIZE, 0, &m->map),
			       "vkMapMemory", msg, msg_size);
		if (rc)
			goto out_destroy;
	}
	return 0;

out_destroy:
	vkb_buffer_destroy(d, m);
	return rc;
}

/* ---- lanes: recording, submission, completion ------------------------------------------------ */

static int vkb_lane_begin(vkb_lane *ln, VkCommandBuffer *out, char *msg, size_t msg_size)
{
	VkCommandBufferBeginInfo bi = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
		.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
	};
	VkMemoryBarrier mb = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
		.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT,
		.dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT,
	};
	VkCommandBuffer cmd;
	int rc;

	if (ln->nfree_cmds > 0) {
		cmd = ln->free_cmds[--ln->nfree_cmds];
	} else {
		VkCommandBufferAllocateInfo ai = {
			.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
			.commandPool = ln->pool,
			.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
			.commandBufferCount = 1,
		};

		rc = vkb_check(ln->dev->fn.vkAllocateCommandBuffers(ln->dev->device, &ai, &cmd),
			       "vkAllocateCommandBuffers", msg, msg_size);
		if (rc)
			return rc;
	}
	/* Begin resets it (the pool allows it); the lane lock serialises pool use. */
	rc = vkb_check(ln->dev->fn.vkBeginCommandBuffer(cmd, &bi), "vkBeginCommandBuffer", msg,
		       msg_size);
	if (rc)
		return rc;
	/* Earlier submissions of this queue (in submission order) finish their writes first. */
	ln->dev->fn.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
					 VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &mb, 0, NULL, 0,
					 NULL);
	*out = cmd;
	return 0;
}

static void vkb_lane_recycle_cmd(vkb_lane *ln, VkCommandBuffer cmd)
{
	if (!cmd)
		return;
	if (ln->nfree_cmds == ln->cap_cmds) {
		int cap = ln->cap_cmds ? 2 * ln->cap_cmds : 16;
		VkCommandBuffer *grown = realloc(ln->free_cmds, (size_t)cap * sizeof(*grown));

		if (!grown)
			return; /* leaks into the pool, freed with it */
		ln->free_cmds = grown;
		ln->cap_cmds = cap;
	}
	ln->free_cmds[ln->nfree_cmds++] = cmd;
}

/* Signals the lane's next timeline value with an empty submission (after everything queued
 * before it): wakes a completion thread waiting ahead for an entry that needs no submission of
 * its own. If it fails, that thread's wait slice ends soon anyway. Lane lock held. */
static void vkb_lane_signal_ahead(vkb_lane *ln)
{
	uint64_t signal = ln->submitted + 1;
	VkTimelineSemaphoreSubmitInfo ts = {
		.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
		.signalSemaphoreValueCount = 1,
		.pSignalSemaphoreValues = &signal,
	};
	VkSubmitInfo si = {
		.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
		.pNext = &ts,
		.signalSemaphoreCount = 1,
		.pSignalSemaphores = &ln->timeline,
	};
	VkResult r;

	pthread_mutex_lock(ln->queue_lock);
	r = ln->dev->fn.vkQueueSubmit(ln->queue, 1, &si, VK_NULL_HANDLE);
	pthread_mutex_unlock(ln->queue_lock);
	if (r == VK_SUCCESS)
		ln->submitted = signal;
}

/* Appends a pending entry; the lane lock is held. */
static void vkb_lane_push(vkb_lane *ln, vkb_pending *p)
{
	p->next = NULL;
	if (ln->tail)
		ln->tail->next = p;
	else
		ln->head = p;
	ln->tail = p;
	/* The completion thread waits ahead for a value no submission has signalled yet: an
	 * entry without a submission of its own (a copy through mapped memory, a failed batch)
	 * makes one. */
	if (ln->waiting_ahead && ln->submitted < ln->waiting_ahead)
		vkb_lane_signal_ahead(ln);
	/* Not while callers retire: the completion thread takes over by itself if they stop. */
	if (!ln->driven_sleep)
		pthread_cond_signal(&ln->cond);
}

/*
 * Ends `cmd` (making its writes visible to the host) and submits it signalling the lane's next
 * timeline value, which becomes ln->submitted. Lane lock held.
 *
 * The submission also waits on the other lane's last completed value: already reached, so it
 * costs nothing, but it orders the memory accesses of the two queues formally. This is what
 * makes a copy the core saw complete (done called) visible to a later launch, and a launch it
 * saw complete visible to a later copy: the completion thread raises `completed` before it
 * calls done, so the wait value read here covers every copy completed before the launch call
 * (and a batched launch is submitted later still, with a value at least as large). The signal
 * makes the other queue's writes available and the wait (all commands) makes them visible.
 * Copies through mapped memory are host writes done before done is called, hence before this
 * vkQueueSubmit, which makes host writes visible to the device.
 */
static int vkb_lane_submit_cmd(vkb_lane *ln, VkCommandBuffer cmd, char *msg, size_t msg_size)
{
	vkb_dev *d = ln->dev;
	VkMemoryBarrier mb = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
		.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT,
		.dstAccessMask = VK_ACCESS_HOST_READ_BIT,
	};
	uint64_t signal = ln->submitted + 1;
	uint64_t wait = atomic_load(&ln->other->completed);
	VkPipelineStageFlags wait_stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
	VkTimelineSemaphoreSubmitInfo ts = {
		.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
		.waitSemaphoreValueCount = wait ? 1 : 0,
		.pWaitSemaphoreValues = &wait,
		.signalSemaphoreValueCount = 1,
		.pSignalSemaphoreValues = &signal,
	};
	VkSubmitInfo si = {
		.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
		.pNext = &ts,
		.waitSemaphoreCount = wait ? 1 : 0,
		.pWaitSemaphores = &ln->other->timeline,
		.pWaitDstStageMask = &wait_stage,
		.commandBufferCount = 1,
		.pCommandBuffers = &cmd,
		.signalSemaphoreCount = 1,
		.pSignalSemaphores = &ln->timeline,
	};
	int rc;

	d->fn.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
				   VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
	rc = vkb_check(d->fn.vkEndCommandBuffer(cmd), "vkEndCommandBuffer", msg, msg_size);
	if (rc)
		return rc;
	pthread_mutex_lock(ln->queue_lock);
	rc = vkb_check(d->fn.vkQueueSubmit(ln->queue, 1, &si, VK_NULL_HANDLE), "vkQueueSubmit", msg,
		       msg_size);
	pthread_mutex_unlock(ln->queue_lock);
	if (rc)
		return rc;
	ln->submitted = signal;
	return 0;
}

/* Submits `cmd` and queues `p` for the completion thread, which recycles `cmd`. Lane lock held. */
static int vkb_lane_submit(vkb_lane *ln, VkCommandBuffer cmd, vkb_pending *p, char *msg,
			   size_t msg_size)
{
	int rc = vkb_lane_submit_cmd(ln, cmd, msg, msg_size);

	if (rc)
		return rc;
	p->value = ln->submitted;
	p->cmd = cmd;
	vkb_lane_push(ln, p);
	return 0;
}

/*
 * Submits the open batch, if any, and hands its launches to the completion thread: all share
 * the one timeline value the submission signals, and the last one returns the command buffer.
 * If the submission fails, every launch of the batch completes with the error (some already
 * returned ODX_BACKEND_PENDING, so done is how they learn). Lane lock held.
 */
static void vkb_lane_flush(vkb_lane *ln)
{
	vkb_pending *p = ln->open_head, *next;
	int rc;

	if (!ln->open_n)
		return;
	rc = vkb_lane_submit_cmd(ln, ln->open_cmd, ln->fail_msg, sizeof(ln->fail_msg));
	if (rc)
		vkb_lane_recycle_cmd(ln, ln->open_cmd);
	for (; p; p = next) {
		next = p->next;
		p->value = rc ? 0 : ln->submitted;
		p->status = rc;
		p->cmd = rc || next ? VK_NULL_HANDLE : ln->open_cmd;
		vkb_lane_push(ln, p);
	}
	ln->open_cmd = VK_NULL_HANDLE;
	ln->open_head = ln->open_tail = NULL;
	ln->open_n = 0;
}

/* One wait of at most `ns` for the lane's timeline to reach `value` (submitted or not yet). */
static VkResult vkb_timeline_wait(vkb_lane *ln, uint64_t value, uint64_t ns)
{
	VkSemaphoreWaitInfo wi = {
		.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
		.semaphoreCount = 1,
		.pSemaphores = &ln->timeline,
		.pValues = &value,
	};

	return ln->dev->fn.vkWaitSemaphores(ln->dev->device, &wi, ns);
}

/* Waits until the lane's timeline reaches `value`, in slices, so close is never stuck. */
static int vkb_lane_wait(vkb_lane *ln, uint64_t value, char *msg, size_t msg_size)
{
	VkResult r;

	if (atomic_load(&ln->completed) >= value)
		return 0;
	do
		r = vkb_timeline_wait(ln, value, VKB_WAIT_NS);
	while (r == VK_TIMEOUT);
	if (r == VK_SUCCESS) {
		/* Two threads may wait (completion thread, a synchronous fill): keep the maximum. */
		uint_fast64_t seen = atomic_load(&ln->completed);

		while (seen < value && !atomic_compare_exchange_weak(&ln->completed, &seen, value))
			;
	}
	return vkb_check(r, "vkWaitSemaphores", msg, msg_size);
}

static void vkb_staging_put(vkb_lane *ln, vkb_staging *s)
{
	/* Lane lock held. A bounded pool: big or surplus buffers go back to the driver. */
	if (ln->nfree_staging >= VKB_STAGING_KEEP || s->m.size > (64u << 20)) {
		vkb_buffer_destroy(ln->dev, &s->m);
		free(s);
		return;
	}
	s->next = ln->free_staging;
	ln->free_staging = s;
	ln->nfree_staging++;
}

/*
 * Lane lock held, `p` the head, taken by this thread (ln->retiring set): waits for it, does its
 * host side, unlinks it and calls its callback with the lock released. Returns with the lock held
 * again and `retiring` cleared. `wait`: wait as long as it takes (the completion thread); else
 * the caller checked that the timeline reached p's value.
 */
static void vkb_lane_retire(vkb_lane *ln, vkb_pending *p, bool wait)
{
	char msg[VKB_MSG_MAX];
	odx_backend_done_fn done;
	void *done_arg;
	int status = p->status;

	if (status)
		snprintf(msg, sizeof(msg), "%s", ln->fail_msg);
	pthread_mutex_unlock(&ln->lock);

	if (!status) {
		msg[0] = '\0';
		status = wait ? vkb_lane_wait(ln, p->value, msg, sizeof(msg)) : 0;
	}
	/* The copy's host side: staging to user memory, or straight through the map. */
	if (status == 0 && p->copy_n)
		memcpy(p->copy_dst, p->copy_src, p->copy_n);
	if (status == 0 && vkb_take_message(ln->dev, msg, sizeof(msg)))
		status = ODX_EBACKEND;
	done = p->done;
	done_arg = p->arg;

	pthread_mutex_lock(&ln->lock);
	/* Nothing in flight any more: the launches recorded meanwhile go to the queue now,
	 * before the callbacks run. A launch reads `completed` under this lock, and it was
	 * raised before the lock was taken, so either that launch submitted by itself or
	 * its batch is seen here: none is left behind. */
	if (ln->open_n && atomic_load(&ln->completed) >= ln->submitted)
		vkb_lane_flush(ln);
	ln->head = p->next;
	if (!ln->head)
		ln->tail = NULL;
	vkb_lane_recycle_cmd(ln, p->cmd);
	if (p->staging)
		vkb_staging_put(ln, p->staging);
	pthread_mutex_unlock(&ln->lock);
	free(p);
	/* No lock held: the core may queue more work from inside its callback. */
	if (done)
		done(done_arg, status, status ? msg : NULL);
	pthread_mutex_lock(&ln->lock);
	/* Cleared after the callback: callbacks stay in order whoever runs them. */
	ln->retiring = false;
	if (ln->retire_wait)
		pthread_cond_signal(&ln->cond);
}

static void *vkb_completion_main(void *arg)
{
	vkb_lane *ln = arg;
	char name[16];
	vkb_pending *p;

	snprintf(name, sizeof(name), "odx-vk%d-%s", ln->dev->odx_device, ln->name);
	pthread_setname_np(pthread_self(), name);
	pthread_mutex_lock(&ln->lock);
	for (;;) {
		/* A batch is open only while a submission is in flight, and its retirement below
		 * flushes it; but when that submission failed (`completed` not raised), the batch
		 * is still open once the list drains, and nothing else would submit it. */
		if (!ln->head && ln->open_n)
			vkb_lane_flush(ln);
		while (ln->driven && !ln->stop) {
			uint64_t seen = ln->caller_retired;
			struct timespec ts;

			if (ln->driven_ns < VKB_DRIVEN_NS)
				ln->driven_ns = VKB_DRIVEN_NS;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += (long)ln->driven_ns;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			ln->driven_sleep = true;
			pthread_cond_timedwait(&ln->cond, &ln->lock, &ts);
			ln->driven_sleep = false;
			/* Nobody retired anything meanwhile: this thread takes over again. */
			if (ln->caller_retired == seen && !ln->retiring) {
				ln->driven = false;
				ln->driven_ns = VKB_DRIVEN_NS;
			} else if (ln->driven_ns < VKB_DRIVEN_MAX_NS) {
				ln->driven_ns *= 2;
			}
		}
		for (int ahead = 0, failed = 0; !ln->head && !ln->stop;) {
			uint64_t reached = atomic_load(&ln->completed), next;
			VkResult r;

			/* A submission without an entry of its own (the empty one that woke this
			 * thread, a synchronous fill) leaves `completed` behind `submitted`, and
			 * launches meanwhile go into the open batch: reach it, then submit that. */
			if (ln->open_n && reached >= ln->submitted) {
				vkb_lane_flush(ln);
				continue;
			}
			/* Asleep only with nothing in flight: then a launch submits by itself and
			 * signals `cond` (vkb_lane_push). */
			if ((ahead >= VKB_AHEAD_ROUNDS && reached >= ln->submitted && !ln->open_n) ||
			    failed) {
				pthread_cond_wait(&ln->cond, &ln->lock);
				continue;
			}
			/* The value in flight, else the next one: waiting for a value before it is
			 * submitted is allowed for timeline semaphores, and the next submission
			 * signals exactly that one. */
			next = reached < ln->submitted ? ln->submitted : ln->submitted + 1;
			ln->waiting_ahead = next;
			pthread_mutex_unlock(&ln->lock);
			r = vkb_timeline_wait(ln, next, VKB_AHEAD_NS);
			pthread_mutex_lock(&ln->lock);
			ln->waiting_ahead = 0;
			if (r == VK_SUCCESS) {
				while (reached < next &&
				       !atomic_compare_exchange_weak(&ln->completed, &reached, next))
					;
				ahead = 0;
			} else if (r == VK_TIMEOUT) {
				ahead++;
			} else {
				failed = 1; /* the entries' own waits will report it */
			}
		}
		p = ln->head;
		if (!p)
			break; /* stopping and drained */
		/* An application thread retires it (vkb_progress): it signals when done. */
		if (ln->retiring) {
			ln->retire_wait = true;
			pthread_cond_wait(&ln->cond, &ln->lock);
			ln->retire_wait = false;
			continue;
		}
		ln->retiring = true;
		ln->driven = false;
		ln->driven_ns = VKB_DRIVEN_NS;
		vkb_lane_retire(ln, p, true);
	}
	pthread_mutex_unlock(&ln->lock);
	return NULL;
}

static int vkb_lane_init(vkb_dev *d, vkb_lane *ln, const char *name, uint32_t family,
			 uint32_t index, pthread_mutex_t *queue_lock, char *msg, size_t msg_size)
{
	VkCommandPoolCreateInfo pci = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
		.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT |
			 VK_COMMAND_POOL_CREATE_TRANSIENT_BIT,
		.queueFamilyIndex = family,
	};
	VkSemaphoreTypeCreateInfo tci = {
		.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
		.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
		.initialValue = 0,
	};
	VkSemaphoreCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO,
				     .pNext = &tci};
	int rc;

	ln->dev = d;
	ln->name = name;
	ln->family = family;
	ln->queue_lock = queue_lock;
	pthread_mutex_init(&ln->lock, NULL);
	pthread_cond_init(&ln->cond, NULL);
	d->fn.vkGetDeviceQueue(d->device, family, index, &ln->queue);
	rc = vkb_check(d->fn.vkCreateCommandPool(d->device, &pci, NULL, &ln->pool),
		       "vkCreateCommandPool", msg, msg_size);
	if (rc)
		return rc;
	rc = vkb_check(d->fn.vkCreateSemaphore(d->device, &sci, NULL, &ln->timeline),
		       "vkCreateSemaphore", msg, msg_size);
	if (rc)
		return rc;
	if (pthread_create(&ln->thread, NULL, vkb_completion_main, ln) != 0) {
		snprintf(msg, msg_size, "cannot start the %s completion thread", name);
		return ODX_ENOMEM;
	}
	ln->started = true;
	return 0;
}

/* Stops the completion thread once everything queued has completed, then frees the lane. */
static void vkb_lane_fini(vkb_dev *d, vkb_lane *ln)
{
	if (ln->started) {
		pthread_mutex_lock(&ln->lock);
		ln->stop = true;
		pthread_cond_signal(&ln->cond);
		pthread_mutex_unlock(&ln->lock);
		pthread_join(ln->thread, NULL);
	}
	while (ln->free_staging) {
		vkb_staging *s = ln->free_staging;

		ln->free_staging = s->next;
		vkb_buffer_destroy(d, &s->m);
		free(s);
	}
	free(ln->free_cmds);
	if (ln->pool)
		d->fn.vkDestroyCommandPool(d->device, ln->pool, NULL);
	if (ln->timeline)
		d->fn.vkDestroySemaphore(d->device, ln->timeline, NULL);
	if (ln->dev) {
		pthread_mutex_destroy(&ln->lock);
		pthread_cond_destroy(&ln->cond);
	}
}

/* ---- devices ----------------------------------------------------------------------------------- */

/* Compute on a compute family (an async-compute one without graphics if offered); copies on a
 * transfer-only family if the device has one, else a second compute queue, else the same. */
static void vkb_pick_queues(vkb_dev *d, uint32_t *cfam, uint32_t *tfam, uint32_t *tindex)
{
	VkQueueFamilyProperties fams[16];
	uint32_t n = 16, i;

	d->st->fn.vkGetPhysicalDeviceQueueFamilyProperties(d->phys, &n, fams);
	*cfam = UINT32_MAX;
	for (i = 0; i < n; i++) {
		VkQueueFlags f = fams[i].queueFlags;

		if (!(f & VK_QUEUE_COMPUTE_BIT))
			continue;
		if (*cfam == UINT32_MAX || !(f & VK_QUEUE_GRAPHICS_BIT))
			*cfam = i;
		if (!(f & VK_QUEUE_GRAPHICS_BIT))
			break;
	}
	*tfam = *cfam;
	*tindex = fams[*cfam].queueCount > 1 ? 1 : 0;
	for (i = 0; i < n; i++)
		if ((fams[i].queueFlags & VK_QUEUE_TRANSFER_BIT) &&
		    !(fams[i].queueFlags & (VK_QUEUE_COMPUTE_BIT | VK_QUEUE_GRAPHICS_BIT))) {
			*tfam = i;
			*tindex = 0;
			break;
		}
}

static void vkb_device_close(void *dev);

static int vkb_create_device(vkb_dev *d, char *msg, size_t msg_size)
{
	static const char *const exts[] = {VK_KHR_PUSH_DESCRIPTOR_EXTENSION_NAME};
	const float priorities[2] = {1.0f, 1.0f};
	uint32_t cfam, tfam, tindex;
	VkPhysicalDeviceVulkan12Features f12 = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
	VkPhysicalDeviceFeatures2 have = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
	VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
					.pNext = &f12};
	VkDeviceQueueCreateInfo qci[2] = {
		{.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueCount = 1,
		 .pQueuePriorities = priorities},
		{.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, .queueCount = 1,
		 .pQueuePriorities = priorities},
	};
	VkDeviceCreateInfo dci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
		.pNext = &f2,
		.queueCreateInfoCount = 1,
		.pQueueCreateInfos = qci,
		.enabledExtensionCount = 1,
		.ppEnabledExtensionNames = exts,
	};
	int rc;

	vkb_pick_queues(d, &cfam, &tfam, &tindex);
	qci[0].queueFamilyIndex = cfam;
	if (tfam != cfam) {
		qci[1].queueFamilyIndex = tfam;
		dci.queueCreateInfoCount = 2;
	} else if (tindex == 1) {
		qci[0].queueCount = 2;
	}
	/* 64-bit scalars when the device has them; kernels without them run everywhere. */
	d->st->fn.vkGetPhysicalDeviceFeatures2(d->phys, &have);
	f2.features.shaderInt64 = have.features.shaderInt64;
	f2.features.shaderFloat64 = have.features.shaderFloat64;
	f12.timelineSemaphore = VK_TRUE;
	rc = vkb_check(d->st->fn.vkCreateDevice(d->phys, &dci, NULL, &d->device), "vkCreateDevice",
		       msg, msg_size);
	if (rc)
		return rc;
#define VKB_LOAD_DEVICE(name)                                                                      \
	d->fn.name = (PFN_##name)d->st->fn.vkGetDeviceProcAddr(d->device, #name);                  \
	if (!d->fn.name) {                                                                         \
		snprintf(msg, msg_size, "the Vulkan driver lacks %s", #name);                      \
		return ODX_EUNAVAIL;                                                               \
	}
	VKB_DEVICE_FNS(VKB_LOAD_DEVICE)
#undef VKB_LOAD_DEVICE
	pthread_mutex_init(&d->queue_locks[0], NULL);
	pthread_mutex_init(&d->queue_locks[1], NULL);
	d->compute.other = &d->copy;
	d->copy.other = &d->compute;
	rc = vkb_lane_init(d, &d->compute, "compute", cfam, 0, &d->queue_locks[0], msg, msg_size);
	if (rc)
		return rc;
	/* The same VkQueue for both lanes needs one lock: queue access is externally synced. */
	return vkb_lane_init(d, &d->copy, "copy", tfam, tindex,
			     tfam == cfam && tindex == 0 ? &d->queue_locks[0] : &d->queue_locks[1],
			     msg, msg_size);
}

static void vkb_fill_props(vkb_dev *d, odx_backend_device_props *props)
{
	VkPhysicalDevicePushDescriptorPropertiesKHR push = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PUSH_DESCRIPTOR_PROPERTIES_KHR};
	VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
					  .pNext = &push};
	VkPhysicalDevicePCIBusInfoPropertiesEXT pci = {
		.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT};
	VkExtensionProperties exts[256];
	uint32_t next = 256, i;
	uint64_t heap = 0;

	d->st->fn.vkEnumerateDeviceExtensionProperties(d->phys, NULL, &next, exts);
	/* The PCI address places the device in the hwloc topology, where the driver knows it. */
	if (vkb_has_ext(exts, next, VK_EXT_PCI_BUS_INFO_EXTENSION_NAME))
		push.pNext = &pci;
	d->st->fn.vkGetPhysicalDeviceProperties2(d->phys, &p2);
	d->limits = p2.properties.limits;
	d->max_push_descriptors = push.maxPushDescriptors;
	d->st->fn.vkGetPhysicalDeviceMemoryProperties(d->phys, &d->memprops);
	for (i = 0; i < d->memprops.memoryHeapCount; i++)
		if ((d->memprops.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) &&
		    d->memprops.memoryHeaps[i].size > heap)
			heap = d->memprops.memoryHeaps[i].size;
	snprintf(d->name, sizeof(d->name), "%s", p2.properties.deviceName);
	snprintf(props->name, sizeof(props->name), "%s", p2.properties.deviceName);
	props->memory_bytes = heap;
	props->compute_lanes = 1;
	props->copy_lanes = 1;
	props->threads = 0;
	props->host_visible = false;
	/* One compute queue, a barrier before every launch, one completion thread reporting the
	 * launches in timeline order: both orders of ABI 1.1 hold. */
	props->ordered_compute = true;
	/* A descriptor's offset must be a multiple of minStorageBufferOffsetAlignment; 16 keeps
	 * vkCmdFillBuffer (4) and the 16-byte rounding of ranges whole. */
	d->mem_align = d->limits.minStorageBufferOffsetAlignment > 16
			       ? (uint32_t)d->limits.minStorageBufferOffsetAlignment
			       : 16;
	props->mem_align = d->mem_align;
	props->pci_bus_id[0] = '\0';
	if (push.pNext == &pci)
		snprintf(props->pci_bus_id, sizeof(props->pci_bus_id), "%04x:%02x:%02x.%x",
			 pci.pciDomain, pci.pciBus, pci.pciDevice, pci.pciFunction);
}

static int vkb_device_open(void *state, int index, int odx_device, odx_backend_device_props *props,
			   void **out)
{
	vkb_state *st = state;
	vkb_dev *d;
	char msg[VKB_MSG_MAX];
	int rc;

	if (index < 0 || index >= st->ndevices)
		return ODX_ENODEV;
	d = calloc(1, sizeof(*d));
	if (!d)
		return ODX_ENOMEM;
	d->st = st;
	d->odx_device = odx_device;
	d->phys = st->phys[index];
	d->force_staging = st->force_staging;
	atomic_store(&d->msg_seen, 0);
	vkb_fill_props(d, props);
	rc = vkb_create_device(d, msg, sizeof(msg));
	if (rc) {
		/* device_open has no message buffer: the log carries the detail. */
		vkb_log(st, ODX_LOG_ERROR, "vulkan: cannot open %s: %s", d->name, msg);
		vkb_device_close(d);
		return rc;
	}
	vkb_log(st, ODX_LOG_INFO, "vulkan: device %d is %s%s", odx_device, d->name,
		d->compute.queue == d->copy.queue ? " (one queue for compute and copies)"
		: d->copy.family != d->compute.family ? " (dedicated transfer queue)"
						      : " (second compute queue for copies)");
	*out = d;
	return 0;
}

static void vkb_device_close(void *dev)
{
	vkb_dev *d = dev;

	if (d->device) {
		d->fn.vkDeviceWaitIdle(d->device);
		vkb_lane_fini(d, &d->compute);
		vkb_lane_fini(d, &d->copy);
		pthread_mutex_destroy(&d->queue_locks[0]);
		pthread_mutex_destroy(&d->queue_locks[1]);
		d->fn.vkDestroyDevice(d->device, NULL);
	}
	free(d);
}

/* ---- memory handles ------------------------------------------------------------------------ */

/* Submits `cmd` on a lane and waits for it: only for the rare synchronous paths (zero fill). */
static int vkb_run_sync(vkb_lane *ln, VkCommandBuffer cmd, char *msg, size_t msg_size)
{
	vkb_pending *p = calloc(1, sizeof(*p));
	uint64_t value;
	int rc;

	if (!p) {
		snprintf(msg, msg_size, "out of memory");
		return ODX_ENOMEM;
	}
	rc = vkb_lane_submit(ln, cmd, p, msg, msg_size);
	if (rc) {
		free(p);
		return rc;
	}
	value = ln->submitted;
	pthread_mutex_unlock(&ln->lock);
	rc = vkb_lane_wait(ln, value, msg, msg_size);
	pthread_mutex_lock(&ln->lock);
	return rc;
}

static int vkb_mem_alloc(void *dev, size_t size, bool zero, uint64_t *handle)
{
	vkb_dev *d = dev;
	vkb_mem *m = calloc(1, sizeof(*m));
	char msg[VKB_MSG_MAX];
	VkCommandBuffer cmd;
	int rc;

	if (!m)
		return ODX_ENOMEM;
	if (size > d->limits.maxStorageBufferRange && size > (size_t)1 << 32) {
		vkb_log(d->st, ODX_LOG_ERROR,
			"vulkan: device %d (%s): cannot allocate %zu bytes: larger than a buffer "
			"may be", d->odx_device, d->name, size);
		free(m);
		return ODX_ENOMEM;
	}
	rc = vkb_buffer_create(d, size, false, m, msg, sizeof(msg));
	if (rc) {
		/* mem_alloc has no message buffer: device and size go to the log. */
		vkb_log(d->st, ODX_LOG_ERROR, "vulkan: device %d (%s): cannot allocate %zu bytes: %s",
			d->odx_device, d->name, size, msg);
		free(m);
		return rc;
	}
	if (zero && m->map && !d->force_staging) {
		memset(m->map, 0, size);
	} else if (zero) {
		pthread_mutex_lock(&d->copy.lock);
		rc = vkb_lane_begin(&d->copy, &cmd, msg, sizeof(msg));
		if (rc == 0) {
			d->fn.vkCmdFillBuffer(cmd, m->buf, 0, VK_WHOLE_SIZE, 0);
			rc = vkb_run_sync(&d->copy, cmd, msg, sizeof(msg));
		}
		pthread_mutex_unlock(&d->copy.lock);
		if (rc) {
			vkb_log(d->st, ODX_LOG_ERROR, "vulkan: device %d: zero fill failed: %s",
				d->odx_device, msg);
			vkb_buffer_destroy(d, m);
			free(m);
			return rc;
		}
	}
	*handle = (uint64_t)(uintptr_t)m;
	return 0;
}

static void vkb_mem_free(void *dev, uint64_t handle, size_t size)
{
	vkb_mem *m = (vkb_mem *)(uintptr_t)handle;

	(void)size;
	/* The core frees a replica only when no queued work uses it any more. */
	vkb_buffer_destroy(dev, m);
	free(m);
}

/* Host-visible, coherent device memory (all of it on lavapipe and integrated GPUs, a resizable
 * BAR on discrete ones) is mapped for its whole life: the core copies through the map. */
static int vkb_mem_map(void *dev, uint64_t handle, void **ptr)
{
	const vkb_dev *d = dev;
	const vkb_mem *m = (const vkb_mem *)(uintptr_t)handle;

	if (!m->map || d->force_staging)
		return ODX_ENOSYS;
	*ptr = m->map;
	return 0;
}

/* ---- copies ------------------------------------------------------------------------------- */

/* A staging buffer of at least n bytes from the lane's pool (lane lock held). */
static int vkb_staging_get(vkb_lane *ln, size_t n, vkb_staging **out, char *msg, size_t msg_size)
{
	vkb_staging **pp, *s;
	size_t cap = VKB_STAGING_MIN;
	int rc;

	for (pp = &ln->free_staging; *pp; pp = &(*pp)->next)
		if ((*pp)->m.size >= n) {
			s = *pp;
			*pp = s->next;
			ln->nfree_staging--;
			*out = s;
			return 0;
		}
	while (cap < n)
		cap *= 2;
	s = calloc(1, sizeof(*s));
	if (!s)
		return ODX_ENOMEM;
	rc = vkb_buffer_create(ln->dev, cap, true, &s->m, msg, msg_size);
	if (rc == 0 && !s->m.map) {
		snprintf(msg, msg_size, "the staging memory could not be mapped");
		vkb_buffer_destroy(ln->dev, &s->m);
		rc = ODX_EBACKEND;
	}
	if (rc) {
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

static void vkb_copy_failed(vkb_dev *d, const char *what, int rc, const char *msg)
{
	vkb_log(d->st, ODX_LOG_ERROR, "vulkan: device %d: %s not queued: %s (%s)", d->odx_device,
		what, msg, odx_err_name(rc));
}

/*
 * One copy between host memory and a device buffer, on the copy lane. Mapped device memory
 * (unless vulkan.force_staging) is copied by the completion thread once earlier work of the
 * lane is done; otherwise through a staging buffer and vkCmdCopyBuffer.
 */
static int vkb_copy(vkb_dev *d, vkb_mem *m, size_t off, void *host, size_t n, bool to_device,
		    odx_backend_done_fn done, void *arg)
{
	vkb_lane *ln = &d->copy;
	vkb_pending *p = calloc(1, sizeof(*p));
	char msg[VKB_MSG_MAX] = "";
	VkCommandBuffer cmd;
	VkBufferCopy region;
	int rc;

	if (!p)
		return ODX_ENOMEM;
	if (off > m->size || n > m->size - off) {
		free(p);
		return ODX_ERANGE;
	}
	p->done = done;
	p->arg = arg;
	pthread_mutex_lock(&ln->lock);
	if (m->map && !d->force_staging) {
		p->copy_dst = to_device ? (char *)m->map + off : host;
		p->copy_src = to_device ? host : (const char *)m->map + off;
		p->copy_n = n;
		p->value = ln->submitted;
		vkb_lane_push(ln, p);
		pthread_mutex_unlock(&ln->lock);
		return 0;
	}
	rc = vkb_staging_get(ln, n ? n : 1, &p->staging, msg, sizeof(msg));
	if (rc)
		goto out_unlock;
	rc = vkb_lane_begin(ln, &cmd, msg, sizeof(msg));
	if (rc)
		goto out_put_staging;
	region = (VkBufferCopy){.srcOffset = to_device ? 0 : off,
				.dstOffset = to_device ? off : 0,
				.size = n};
	if (to_device) {
		/* Host writes before vkQueueSubmit are visible to the copy. */
		memcpy(p->staging->m.map, host, n);
		if (n)
			d->fn.vkCmdCopyBuffer(cmd, p->staging->m.buf, m->buf, 1, &region);
	} else {
		p->copy_dst = host;
		p->copy_src = p->staging->m.map;
		p->copy_n = n;
		if (n)
			d->fn.vkCmdCopyBuffer(cmd, m->buf, p->staging->m.buf, 1, &region);
	}
	rc = vkb_lane_submit(ln, cmd, p, msg, sizeof(msg));
	if (rc) {
		vkb_lane_recycle_cmd(ln, cmd);
		goto out_put_staging;
	}
	pthread_mutex_unlock(&ln->lock);
	return 0;

out_put_staging:
	vkb_staging_put(ln, p->staging);
out_unlock:
	pthread_mutex_unlock(&ln->lock);
	free(p);
	vkb_copy_failed(d, to_device ? "host-to-device copy" : "device-to-host copy", rc, msg);
	return rc;
}

static int vkb_copy_h2d(void *dev, uint64_t dst, size_t dst_off, const void *src, size_t n,
			odx_backend_done_fn done, void *arg)
{
	/* The source is only read; the shared helper takes a plain pointer for both ways. */
	return vkb_copy(dev, (vkb_mem *)(uintptr_t)dst, dst_off, (void *)(uintptr_t)src, n, true,
			done, arg);
}

static int vkb_copy_d2h(void *dev, void *dst, uint64_t src, size_t src_off, size_t n,
			odx_backend_done_fn done, void *arg)
{
	return vkb_copy(dev, (vkb_mem *)(uintptr_t)src, src_off, dst, n, false, done, arg);
}

/* Between two ODX devices of this backend: one VkDevice each, so through host memory. */
typedef struct vkb_bounce {
	vkb_dev *dst_dev;
	vkb_mem *dst;
	size_t dst_off, n;
	void *buf;
	odx_backend_done_fn done;
	void *arg;
} vkb_bounce;

static void vkb_bounce_second_done(void *arg, int status, const char *msg)
{
	vkb_bounce *b = arg;

	b->done(b->arg, status, msg);
	free(b->buf);
	free(b);
}

static void vkb_bounce_first_done(void *arg, int status, const char *msg)
{
	vkb_bounce *b = arg;
	int rc;

	if (status == 0) {
		rc = vkb_copy(b->dst_dev, b->dst, b->dst_off, b->buf, b->n, true,
			      vkb_bounce_second_done, b);
		if (rc == 0)
			return;
		status = rc;
		msg = "could not queue the second hop of a device-to-device copy";
	}
	vkb_bounce_second_done(b, status, msg);
}

static int vkb_copy_d2d(void *dev, uint64_t dst, size_t dst_off, void *src_dev, uint64_t src,
			size_t src_off, size_t n, odx_backend_done_fn done, void *arg)
{
	vkb_dev *d = dev;
	vkb_mem *dm = (vkb_mem *)(uintptr_t)dst, *sm = (vkb_mem *)(uintptr_t)src;
	vkb_lane *ln = &d->copy;
	char msg[VKB_MSG_MAX] = "";
	VkBufferCopy region = {.srcOffset = src_off, .dstOffset = dst_off, .size = n};
	VkCommandBuffer cmd;
	vkb_pending *p;
	vkb_bounce *b;
	int rc;

	if (dst_off > dm->size || n > dm->size - dst_off || src_off > sm->size ||
	    n > sm->size - src_off)
		return ODX_ERANGE;
	if (src_dev != dev) {
		b = calloc(1, sizeof(*b));
		if (!b || !(b->buf = malloc(n ? n : 1))) {
			free(b);
			return ODX_ENOMEM;
		}
		*b = (vkb_bounce){.dst_dev = d, .dst = dm, .dst_off = dst_off, .n = n,
				  .buf = b->buf, .done = done, .arg = arg};
		rc = vkb_copy(src_dev, sm, src_off, b->buf, n, false, vkb_bounce_first_done, b);
		if (rc) {
			free(b->buf);
			free(b);
		}
		return rc;
	}
	p = calloc(1, sizeof(*p));
	if (!p)
		return ODX_ENOMEM;
	p->done = done;
	p->arg = arg;
	pthread_mutex_lock(&ln->lock);
	rc = vkb_lane_begin(ln, &cmd, msg, sizeof(msg));
	if (rc == 0) {
		if (n)
			d->fn.vkCmdCopyBuffer(cmd, sm->buf, dm->buf, 1, &region);
		rc = vkb_lane_submit(ln, cmd, p, msg, sizeof(msg));
		if (rc)
			vkb_lane_recycle_cmd(ln, cmd);
	}
	pthread_mutex_unlock(&ln->lock);
	if (rc) {
		free(p);
		vkb_copy_failed(d, "device-to-device copy", rc, msg);
	}
	return rc;
}

/* ---- kernels --------------------------------------------------------------------------------- */

static int vkb_module_load(void *dev, const odx_kernel_variant *v, void **out, char *err,
			   size_t err_size)
{
	vkb_dev *d = dev;
	const char *entry = v->entry && v->entry[0] ? v->entry : "main";
	VkShaderModuleCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
		.codeSize = v->code_size,
		.pCode = v->code,
	};
	vkb_module *m;
	char msg[VKB_MSG_MAX];
	int rc;

	if (v->format != ODX_FORMAT_SPIRV || !v->code) {
		snprintf(err, err_size, "the Vulkan backend runs SPIR-V variants only (format %d)",
			 (int)v->format);
		return ODX_EINVAL;
	}
	if (strlen(entry) >= sizeof(m->entry)) {
		snprintf(err, err_size, "entry point name too long");
		return ODX_EINVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return ODX_ENOMEM;
	snprintf(m->entry, sizeof(m->entry), "%s", entry);
	/* Checked here, before the driver sees it: a broken blob must not crash a driver. */
	rc = vkb_spirv_inspect(v->code, v->code_size, entry, &m->iface, err, err_size);
	if (rc)
		goto out_free;
	rc = vkb_check(d->fn.vkCreateShaderModule(d->device, &ci, NULL, &m->shader),
		       "vkCreateShaderModule", msg, sizeof(msg));
	if (rc) {
		snprintf(err, err_size, "%s", msg);
		rc = rc == ODX_ENOMEM ? rc : ODX_EBACKEND;
		goto out_free;
	}
	/* The validation layer checks the SPIR-V in this call: its verdict fails the load. */
	if (vkb_take_message(d, err, err_size)) {
		d->fn.vkDestroyShaderModule(d->device, m->shader, NULL);
		rc = ODX_EBACKEND;
		goto out_free;
	}
	pthread_mutex_init(&m->lock, NULL);
	*out = m;
	return 0;

out_free:
	free(m);
	return rc == ODX_EINVAL ? ODX_EBACKEND : rc;
}

static void vkb_module_unload(void *dev, void *module)
{
	vkb_dev *d = dev;
	vkb_module *m = module;
	vkb_pipeline *p;

	while ((p = m->pipelines) != NULL) {
		m->pipelines = p->next;
		d->fn.vkDestroyPipeline(d->device, p->pipeline, NULL);
		d->fn.vkDestroyPipelineLayout(d->device, p->layout, NULL);
		if (p->set_layout)
			d->fn.vkDestroyDescriptorSetLayout(d->device, p->set_layout, NULL);
		free(p);
	}
	d->fn.vkDestroyShaderModule(d->device, m->shader, NULL);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static int vkb_pipeline_create(vkb_dev *d, vkb_module *m, const uint32_t block[3], int nbuffers,
			       uint32_t push_size, vkb_pipeline **out, char *msg, size_t msg_size)
{
	VkDescriptorSetLayoutBinding bindings[VKB_SPIRV_MAX_BINDINGS];
	VkDescriptorSetLayoutCreateInfo sci = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
		.flags = VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR,
		.bindingCount = (uint32_t)nbuffers,
		.pBindings = bindings,
	};
	VkPushConstantRange range = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .size = push_size};
	VkPipelineLayoutCreateInfo lci = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
		.pushConstantRangeCount = push_size ? 1 : 0,
		.pPushConstantRanges = &range,
	};
	/* The work-group size is specialisation constants 0, 1, 2 (docs/kernel-abi.md). */
	VkSpecializationMapEntry spec[3] = {
		{0, 0, 4},
		{1, 4, 4},
		{2, 8, 4},
	};
	VkSpecializationInfo si = {3, spec, sizeof(uint32_t) * 3, block};
	VkComputePipelineCreateInfo pci = {
		.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
		.stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
			  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
			  .module = m->shader,
			  .pName = m->entry,
			  .pSpecializationInfo = &si},
	};
	vkb_pipeline *p = calloc(1, sizeof(*p));
	int rc, i;

	if (!p)
		return ODX_ENOMEM;
	memcpy(p->block, block, sizeof(p->block));
	p->nbuffers = nbuffers;
	p->push_size = push_size;
	for (i = 0; i < nbuffers; i++)
		bindings[i] = (VkDescriptorSetLayoutBinding){
			.binding = (uint32_t)i,
			.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
			.descriptorCount = 1,
			.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
		};
	if (nbuffers > 0) {
		rc = vkb_check(d->fn.vkCreateDescriptorSetLayout(d->device, &sci, NULL,
								  &p->set_layout),
			       "vkCreateDescriptorSetLayout", msg, msg_size);
		if (rc)
			goto out_free;
		lci.setLayoutCount = 1;
		lci.pSetLayouts = &p->set_layout;
	}
	rc = vkb_check(d->fn.vkCreatePipelineLayout(d->device, &lci, NULL, &p->layout),
		       "vkCreatePipelineLayout", msg, msg_size);
	if (rc)
		goto out_set_layout;
	pci.layout = p->layout;
	rc = vkb_check(d->fn.vkCreateComputePipelines(d->device, VK_NULL_HANDLE, 1, &pci, NULL,
						      &p->pipeline),
		       "vkCreateComputePipelines", msg, msg_size);
	if (rc)
		goto out_layout;
	*out = p;
	return 0;

out_layout:
	d->fn.vkDestroyPipelineLayout(d->device, p->layout, NULL);
out_set_layout:
	if (p->set_layout)
		d->fn.vkDestroyDescriptorSetLayout(d->device, p->set_layout, NULL);
out_free:
	free(p);
	return rc;
}

static int vkb_pipeline_get(vkb_dev *d, vkb_module *m, const uint32_t block[3], int nbuffers,
			    uint32_t push_size, vkb_pipeline **out, char *msg, size_t msg_size)
{
	vkb_pipeline *p;
	int rc = 0;

	pthread_mutex_lock(&m->lock);
	for (p = m->pipelines; p; p = p->next)
		if (memcmp(p->block, block, sizeof(p->block)) == 0 && p->nbuffers == nbuffers &&
		    p->push_size == push_size)
			break;
	if (!p) {
		rc = vkb_pipeline_create(d, m, block, nbuffers, push_size, &p, msg, msg_size);
		if (rc == 0) {
			p->next = m->pipelines;
			m->pipelines = p;
		}
	}
	pthread_mutex_unlock(&m->lock);
	*out = p;
	return rc;
}

/*
 * Lays the scalars out in std430 (4 bytes for i32/f32, 8 aligned to 8 for i64/f64) into `push`
 * and checks every argument against the kernel's interface and the device's limits, so that a
 * mismatch is refused here with a message instead of reaching the driver.
 */
static int vkb_marshal(vkb_dev *d, const vkb_module *m, odx_backend_launch *l, uint8_t *push,
		       uint32_t *push_size, int *nbuffers)
{
	const vkb_spirv_iface *f = &m->iface;
	int i, nb = 0, ns = 0;
	uint32_t off = 0, max_push = d->limits.maxPushConstantsSize;

	if (max_push > VKB_PUSH_MAX)
		max_push = VKB_PUSH_MAX;

	for (i = 0; i < l->nargs; i++) {
		const odx_backend_arg *a = &l->args[i];
		uint32_t size = a->kind == ODX_ARG_I64 || a->kind == ODX_ARG_F64 ? 8 : 4;

		if (a->kind == ODX_ARG_BUFFER) {
			if (!a->mem) {
				snprintf(l->error, l->error_size, "argument %d: no buffer", i);
				return ODX_EINVAL;
			}
			nb++;
			continue;
		}
		if (a->kind < ODX_ARG_I32 || a->kind > ODX_ARG_F64) {
			snprintf(l->error, l->error_size, "argument %d: unknown kind %d", i,
				 (int)a->kind);
			return ODX_EINVAL;
		}
		off = (off + size - 1) & ~(size - 1);
		if (f->push_members >= 0 &&
		    (ns >= f->push_members || f->member_kind[ns] != a->kind ||
		     f->member_offset[ns] != off)) {
			if (ns >= f->push_members)
				snprintf(l->error, l->error_size,
					 "argument %d is scalar %d but kernel '%s' takes %d scalars",
					 i, ns + 1, m->entry, f->push_members);
			else
				snprintf(l->error, l->error_size,
					 "argument %d is %s at push-constant offset %u but kernel "
					 "'%s' has %s at offset %u there",
					 i, odx_backend_arg_kind_name(a->kind), off, m->entry,
					 odx_backend_arg_kind_name(f->member_kind[ns]), f->member_offset[ns]);
			return ODX_EINVAL;
		}
		if (off + size > max_push) {
			snprintf(l->error, l->error_size,
				 "scalars need %u bytes of push constants; %s allows %u", off + size,
				 d->name, max_push);
			return ODX_EINVAL;
		}
		memcpy(push + off, &a->v, size);
		off += size;
		ns++;
	}
	if (f->push_members > ns) {
		snprintf(l->error, l->error_size, "kernel '%s' takes %d scalars; the launch has %d",
			 m->entry, f->push_members, ns);
		return ODX_EINVAL;
	}
	if (nb < 64 && (f->bindings >> nb)) {
		snprintf(l->error, l->error_size,
			 "kernel '%s' uses buffer binding %d; the launch has %d buffers", m->entry,
			 63 - __builtin_clzll(f->bindings), nb);
		return ODX_EINVAL;
	}
	if ((uint32_t)nb > d->max_push_descriptors) {
		snprintf(l->error, l->error_size, "%d buffers; %s pushes at most %u descriptors", nb,
			 d->name, d->max_push_descriptors);
		return ODX_EINVAL;
	}
	*push_size = off;
	*nbuffers = nb;
	return 0;
}

static int vkb_check_geometry(vkb_dev *d, odx_backend_launch *l)
{
	const VkPhysicalDeviceLimits *lim = &d->limits;
	uint64_t items = (uint64_t)l->block[0] * l->block[1] * l->block[2];

	for (int i = 0; i < 3; i++)
		if (l->block[i] > lim->maxComputeWorkGroupSize[i] ||
		    l->grid[i] > lim->maxComputeWorkGroupCount[i]) {
			snprintf(l->error, l->error_size,
				 "grid %ux%ux%u of blocks %ux%ux%u exceeds %s's limits (groups "
				 "%ux%ux%u, block %ux%ux%u)",
				 l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1],
				 l->block[2], d->name, lim->maxComputeWorkGroupCount[0],
				 lim->maxComputeWorkGroupCount[1], lim->maxComputeWorkGroupCount[2],
				 lim->maxComputeWorkGroupSize[0], lim->maxComputeWorkGroupSize[1],
				 lim->maxComputeWorkGroupSize[2]);
			return ODX_EINVAL;
		}
	if (items > lim->maxComputeWorkGroupInvocations) {
		snprintf(l->error, l->error_size, "a block of %llu work-items exceeds %s's %u",
			 (unsigned long long)items, d->name, lim->maxComputeWorkGroupInvocations);
		return ODX_EINVAL;
	}
	return 0;
}

/*
 * The bytes a descriptor at `off` covers for an argument of `size` bytes: rounded up to 16 (the
 * buffer itself is, see vkb_buffer_create) but never past the buffer's end, and at most
 * maxStorageBufferRange.
 */
static VkDeviceSize vkb_arg_range(const vkb_dev *d, const vkb_mem *bm, VkDeviceSize off,
				  VkDeviceSize size)
{
	/* size 0 (a core that does not say): the rest of the buffer. */
	VkDeviceSize end = ((VkDeviceSize)bm->size + 15) & ~(VkDeviceSize)15;
	VkDeviceSize range = (size + 15) & ~(VkDeviceSize)15;

	if (range == 0 || range > end - off)
		range = end - off;
	if (range > d->limits.maxStorageBufferRange)
		range = d->limits.maxStorageBufferRange;
	return range;
}

static int vkb_launch(void *dev, odx_backend_launch *l, odx_backend_done_fn done, void *arg)
{
	vkb_dev *d = dev;
	vkb_module *m = l->module;
	vkb_lane *ln = &d->compute;
	VkWriteDescriptorSet writes[VKB_SPIRV_MAX_BINDINGS];
	VkDescriptorBufferInfo infos[VKB_SPIRV_MAX_BINDINGS];
	uint8_t push[VKB_PUSH_MAX] = {0};
	uint32_t push_size = 0;
	char msg[VKB_MSG_MAX];
	vkb_pipeline *pipe;
	VkCommandBuffer cmd;
	vkb_pending *p;
	int rc, i, nb = 0;

	if (!m) {
		snprintf(l->error, l->error_size, "no module loaded for this variant");
		return ODX_EINVAL;
	}
	rc = vkb_check_geometry(d, l);
	if (rc)
		return rc;
	rc = vkb_marshal(d, m, l, push, &push_size, &nb);
	if (rc)
		return rc;
	nb = 0;
	for (i = 0; i < l->nargs; i++) {
		const odx_backend_arg *a = &l->args[i];
		const vkb_mem *bm = (const vkb_mem *)(uintptr_t)a->mem;
		VkDeviceSize off, range;

		if (a->kind != ODX_ARG_BUFFER)
			continue;
		off = a->v.offset;
		if (off != 0 && (off % d->mem_align != 0 || off > bm->size ||
				 a->size > bm->size - off)) {
			snprintf(l->error, l->error_size,
				 "argument %d: %zu bytes at offset %llu of a %zu-byte allocation "
				 "(offsets are multiples of %u, inside the allocation)",
				 i, a->size, (unsigned long long)off, bm->size,
				 (unsigned)d->mem_align);
			return ODX_EINVAL;
		}
		range = vkb_arg_range(d, bm, off, a->size);
		/* ABI 1.2: a suballocated argument is a descriptor at its offset, so the kernel
		 * still indexes from 0. */
		infos[nb] = (VkDescriptorBufferInfo){.buffer = bm->buf, .offset = off, .range = range};
		writes[nb] = (VkWriteDescriptorSet){
			.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
			.dstBinding = (uint32_t)nb,
			.descriptorCount = 1,
			.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
			.pBufferInfo = &infos[nb],
		};
		nb++;
	}
	rc = vkb_pipeline_get(d, m, l->block, nb, push_size, &pipe, msg, sizeof(msg));
	if (rc)
		goto out_error;
	p = calloc(1, sizeof(*p));
	if (!p) {
		rc = ODX_ENOMEM;
		snprintf(msg, sizeof(msg), "out of memory");
		goto out_error;
	}
	p->done = done;
	p->arg = arg;
	pthread_mutex_lock(&ln->lock);
	if (ln->open_n) {
		/* Behind the launches already in the batch: their shader writes are done and
		 * visible before this dispatch reads or writes (the core may launch a task right
		 * behind the unfinished predecessor it depends on: ordered_compute). */
		VkMemoryBarrier mb = {
			.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
			.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
			.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT,
		};

		cmd = ln->open_cmd;
		d->fn.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
					   VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0,
					   NULL, 0, NULL);
	} else {
		/* A new command buffer starts with a barrier against everything submitted
		 * before on this queue (earlier batches, and copies when the copy lane shares
		 * the queue): a superset of the compute-to-compute one above. */
		rc = vkb_lane_begin(ln, &cmd, msg, sizeof(msg));
		if (rc)
			goto out_unlock;
	}
	d->fn.vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe->pipeline);
	if (nb)
		d->fn.vkCmdPushDescriptorSetKHR(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe->layout,
						0, (uint32_t)nb, writes);
	if (push_size)
		d->fn.vkCmdPushConstants(cmd, pipe->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
					 push_size, push);
	d->fn.vkCmdDispatch(cmd, l->grid[0], l->grid[1], l->grid[2]);
	if (ln->open_n == 0 && atomic_load(&ln->completed) >= ln->submitted) {
		/* The lane is idle: submit at once, a batch would only add latency. Failing
		 * here, the launch fails alone and done is not called. */
		rc = vkb_lane_submit(ln, cmd, p, msg, sizeof(msg));
		if (rc) {
			vkb_lane_recycle_cmd(ln, cmd);
			goto out_unlock;
		}
		pthread_mutex_unlock(&ln->lock);
		return ODX_BACKEND_PENDING;
	}
	/* A submission is in flight: record now, submit when the completion thread retires it
	 * (the ABI has no idle hook for the worker) or when the batch is full. */
	p->next = NULL;
	if (ln->open_tail)
		ln->open_tail->next = p;
	else
		ln->open_head = p;
	ln->open_tail = p;
	ln->open_cmd = cmd;
	if (++ln->open_n >= VKB_BATCH_MAX)
		vkb_lane_flush(ln);
	pthread_mutex_unlock(&ln->lock);
	return ODX_BACKEND_PENDING;

out_unlock:
	pthread_mutex_unlock(&ln->lock);
	free(p);
out_error:
	snprintf(l->error, l->error_size, "%s", msg);
	return rc;
}

/*
 * ABI 1.4 progress: an application thread waiting for this device waits on the lanes' timelines
 * itself (any of them) and retires what completed, so the driver wakes the waiting thread
 * directly instead of the completion thread, which would then have to wake it.
 */
static int vkb_progress(void *bdev, uint64_t timeout_ns)
{
	vkb_dev *d = bdev;
	vkb_lane *lanes[2] = {&d->compute, &d->copy}, *mine[2];
	VkSemaphore sems[2];
	uint64_t values[2];
	VkSemaphoreWaitInfo wi = {
		.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
		.flags = VK_SEMAPHORE_WAIT_ANY_BIT,
		.pSemaphores = sems,
		.pValues = values,
	};
	int i, n = 0, ran = 0;
	VkResult r;

	/* Take the head of each lane that nobody retires now. */
	for (i = 0; i < 2; i++) {
		vkb_lane *ln = lanes[i];

		pthread_mutex_lock(&ln->lock);
		if (ln->head && !ln->stop && !ln->retiring) {
			ln->retiring = true;
			mine[n] = ln;
			sems[n] = ln->timeline;
			values[n++] = ln->head->status ? 0 : ln->head->value;
		}
		pthread_mutex_unlock(&ln->lock);
	}
	/* Nothing in flight, or the completion thread retires it now: it reports it. */
	if (n == 0)
		return 0;
	wi.semaphoreCount = (uint32_t)n;
	r = d->fn.vkWaitSemaphores(d->device, &wi, timeout_ns);
	for (i = 0; i < n; i++) {
		vkb_lane *ln = mine[i];
		uint64_t now = 0;

		if (r == VK_SUCCESS || r == VK_TIMEOUT)
			d->fn.vkGetSemaphoreCounterValue(d->device, ln->timeline, &now);
		pthread_mutex_lock(&ln->lock);
		if (r != VK_SUCCESS && r != VK_TIMEOUT) {
			/* A lost device: the completion thread's own wait reports it. */
		} else if (ln->head->status || now >= ln->head->value) {
			uint_fast64_t seen = atomic_load(&ln->completed);

			while (seen < now && !atomic_compare_exchange_weak(&ln->completed, &seen, now))
				;
			vkb_lane_retire(ln, ln->head, false);
			ln->driven = true;
			ln->caller_retired++;
			ran = 1;
			pthread_mutex_unlock(&ln->lock);
			continue;
		}
		ln->retiring = false;
		if (ln->retire_wait)
			pthread_cond_signal(&ln->cond);
		pthread_mutex_unlock(&ln->lock);
	}
	return ran;
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
