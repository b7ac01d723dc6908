/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vkb.h - internals of the Vulkan backend, shared by its files (never installed).
 *
 * The Vulkan entry points the backend calls are listed once (VKB_INSTANCE_FNS, VKB_DEVICE_FNS)
 * and resolved at run time; the objects below are a backend state, its devices with their two
 * lanes, device buffers and kernel modules. vulkan.c holds the overview of the design.
 */
#ifndef ODX_BACKENDS_VULKAN_VKB_H
#define ODX_BACKENDS_VULKAN_VKB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include "lanes.h"
#include "log.h"
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
 * doubling up to 1 ms for as long as callers keep retiring (each look costs a wake-up), back to
 * 250 us once it took over. */
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
	odx__lane_link link;       /* in the lane's queue */
	struct vkb_pending *next;  /* in the compute lane's open batch */
	uint64_t value;            /* complete when the lane's timeline reaches this */
	VkCommandBuffer cmd;       /* returned to the lane's free list (or VK_NULL_HANDLE) */
	vkb_staging *staging;      /* returned to the lane's staging pool (or NULL) */
	void *copy_dst;            /* a memcpy to do once complete (d2h, mapped h2d) */
	const void *copy_src;
	size_t copy_n;             /* bytes, or bytes per run when copy_rows > 1 (copy_2d) */
	size_t copy_rows;          /* 0 or 1: one run; more: runs one pitch apart each side */
	size_t copy_dst_pitch, copy_src_pitch;
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

	odx__lane lane;              /* queue and completion thread; its lock guards everything
				      * below, and the command pool */
	uint64_t submitted;          /* last timeline value a submission signals */
	atomic_uint_fast64_t completed; /* last value the completion thread saw reached */
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
	bool llvmpipe;      /* Mesa's lavapipe: its shaders' loop budget applies (budget.c) */
	uint32_t max_push_descriptors;
	VkPhysicalDeviceMemoryProperties memprops;
	uint32_t device_type_bits;  /* memory types usable for device buffers */
	bool force_staging;
	pthread_mutex_t queue_locks[2];
	vkb_lane compute, copy;
	atomic_uint_fast64_t msg_seen; /* validation messages already reported */
};

/* ---- vulkan.c: errors and validation messages ---- */
/* The one place VkResults become ODX codes; the message names the call, the result, its number. */
int vkb_check(VkResult r, const char *what, char *msg, size_t msg_size);
void vkb_log(vkb_state *st, odx_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The debug-utils messenger: every warning or error is logged and fails the next completion. */
VKAPI_ATTR VkBool32 VKAPI_CALL vkb_on_message(
	VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT types,
	const VkDebugUtilsMessengerCallbackDataEXT *data, void *user);
/* A validation message this device has not reported yet goes into `msg`; returns true then. */
bool vkb_take_message(vkb_dev *d, char *msg, size_t msg_size);

/* ---- instance.c ---- */
bool vkb_has_ext(const VkExtensionProperties *exts, uint32_t n, const char *name);
int vkb_create_instance(vkb_state *st, char *reason, size_t n);
int vkb_pick_devices(vkb_state *st, char *reason, size_t n);

/* ---- device.c ---- */
int vkb_device_open(void *state, int index, int odx_device, odx_backend_device_props *props,
		    void **out);
void vkb_device_close(void *dev);

/* ---- memory.c ---- */
void vkb_buffer_destroy(vkb_dev *d, vkb_mem *m);
int vkb_buffer_create(vkb_dev *d, size_t size, bool staging, vkb_mem *m, char *msg,
		      size_t msg_size);
/* Lane lock held: a staging buffer from, and back to, the lane's bounded pool. */
int vkb_staging_get(vkb_lane *ln, size_t n, vkb_staging **out, char *msg, size_t msg_size);
void vkb_staging_put(vkb_lane *ln, vkb_staging *s);
int vkb_mem_alloc(void *dev, size_t size, bool zero, uint64_t *handle);
void vkb_mem_free(void *dev, uint64_t handle, size_t size);
int vkb_mem_map(void *dev, uint64_t handle, void **ptr);

/* ---- lane.c: recording, submission, completion (functions marked so need the lane lock) ---- */
/* Lane lock held: a command buffer begun behind a barrier against earlier work of the queue. */
int vkb_lane_begin(vkb_lane *ln, VkCommandBuffer *out, char *msg, size_t msg_size);
void vkb_lane_recycle_cmd(vkb_lane *ln, VkCommandBuffer cmd);
/* Lane lock held: queues `p` for the completion thread. */
void vkb_lane_push(vkb_lane *ln, vkb_pending *p);
/* Lane lock held: submits `cmd` and queues `p`; the completion thread recycles `cmd`. */
int vkb_lane_submit(vkb_lane *ln, VkCommandBuffer cmd, vkb_pending *p, char *msg,
		    size_t msg_size);
/* Lane lock held: submits the open batch of launches, if any. */
void vkb_lane_flush(vkb_lane *ln);
int vkb_lane_init(vkb_dev *d, vkb_lane *ln, const char *name, uint32_t family,
		  uint32_t index, pthread_mutex_t *queue_lock, char *msg, size_t msg_size);
void vkb_lane_fini(vkb_dev *d, vkb_lane *ln);
/* Lane lock held: submits `cmd` and waits for it (the rare synchronous paths). */
int vkb_run_sync(vkb_lane *ln, VkCommandBuffer cmd, char *msg, size_t msg_size);
int vkb_progress(void *bdev, uint64_t timeout_ns);

/* ---- copy.c ---- */
int vkb_copy_h2d(void *dev, uint64_t dst, size_t dst_off, const void *src, size_t n,
		 odx_backend_done_fn done, void *arg);
int vkb_copy_d2h(void *dev, void *dst, uint64_t src, size_t src_off, size_t n,
		 odx_backend_done_fn done, void *arg);
int vkb_copy_d2d(void *dev, uint64_t dst, size_t dst_off, void *src_dev, uint64_t src,
		 size_t src_off, size_t n, odx_backend_done_fn done, void *arg);
int vkb_copy_2d(void *dev, const odx_backend_copy2d *c, odx_backend_done_fn done, void *arg);

/* ---- pipeline.c ---- */
int vkb_module_load(void *dev, const odx_kernel_variant *v, void **out, char *err,
		    size_t err_size);
void vkb_module_unload(void *dev, void *module);
int vkb_pipeline_get(vkb_dev *d, vkb_module *m, const uint32_t block[3], int nbuffers,
		     uint32_t push_size, vkb_pipeline **out, char *msg, size_t msg_size);

/* ---- budget.c ---- */
/* Lavapipe's loop budget: refuses (ODX_ERANGE, the reason in l->error) a launch of a standard
 * kernel whose work-items would need more loop rounds than lavapipe runs; 0 otherwise, and
 * always on other drivers or for kernels that do not say which they are. `push` holds the
 * launch's scalars as vkb_marshal laid them out. */
int vkb_budget_check(const vkb_dev *d, const vkb_module *m, odx_backend_launch *l,
		     const uint8_t *push);

/* ---- launch.c ---- */
int vkb_launch(void *dev, odx_backend_launch *l, odx_backend_done_fn done, void *arg);

#endif /* ODX_BACKENDS_VULKAN_VKB_H */
