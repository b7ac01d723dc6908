/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu.h - the GPU skeleton shared by the CUDA and HIP backends.
 *
 * The CUDA driver API and HIP's module API have the same shape (devices, streams, events, linear
 * device memory, pinned host memory, modules, launches), so one skeleton (gpu.c) implements the
 * backend ABI for both, and each vendor supplies a table of thin wrappers (gpu_vendor) over its
 * own symbol table (gpu_api). gpu.c is compiled into each module separately; `struct gpu_api` is
 * defined by the one vendor file the module holds and is opaque to the skeleton.
 *
 * Per device the skeleton runs three lanes, each an in-order vendor stream:
 *  - compute: launches go to the stream from the device's worker thread, with an event behind each;
 *  - h2d and d2h: copies are queued to an issue thread that stages the bytes through a few pinned
 *    blocks allocated at device open (chunks of GPU_STAGE_BLOCK bytes), with an event per chunk;
 *    a copy whose host side lies in memory the skeleton knows to be page-locked (a range it
 *    registered with the driver for host_register, or memory from its host_alloc) goes to the
 *    driver in one piece from and to that memory, with no bounce.
 * Each copy lane also serves the blocking copies of copy_sync (ABI 1.3: odx_buffer_read and
 * odx_buffer_write to and from a device's copy, on the application's thread) on a second stream of
 * its own, one caller at a time, so that such a copy waits neither for the lane's queue (prefetches,
 * evictions) nor for anything queued after it; it borrows one staging block of its lane for a large
 * pageable copy (see gpu_copy_sync).
 * Each lane has a completion thread that waits for the oldest event of its lane (a bounded poll of
 * sched.idle_spin_us, then a blocking wait: no spinning) and calls the ABI's done callbacks in
 * order. One completion thread per lane, not per device, so that a long kernel does not hold back
 * the completion of a copy queued behind it on another stream.
 *
 * Every vendor wrapper returns the vendor's native code (0 = success); gpu.c turns a failure into
 * an ODX_E* code with gpu_fail(), which keeps the native name and number in the message and marks
 * the device lost on a sticky error (a corrupted context): from then on every operation on that
 * device fails with ODX_EDEVLOST naming the first error.
 */
#ifndef ODX_BACKENDS_GPU_H
#define ODX_BACKENDS_GPU_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lanes.h"
#include "log.h"
#include "odx/backend.h"

/* Pinned staging per copy lane: GPU_STAGE_BLOCKS blocks of GPU_STAGE_BLOCK bytes. */
#define GPU_STAGE_BLOCKS 4
#define GPU_STAGE_BLOCK (8u << 20)
/* copy_sync: a pageable copy larger than one piece is staged through one block of its lane, in
 * pieces of GPU_SYNC_PIECE bytes, GPU_SYNC_PIECES of them in flight; smaller ones, and copies
 * from and to page-locked memory, go to the driver in one piece. */
#define GPU_SYNC_PIECES 4
#define GPU_SYNC_PIECE (GPU_STAGE_BLOCK / GPU_SYNC_PIECES)
#define GPU_MAX_ARGS 64
#define GPU_MSG_MAX 512

typedef struct gpu_api gpu_api; /* the vendor's symbol table (defined in cuda.c / hip.c) */
typedef void *gpu_handle;       /* a vendor handle: context, stream, event, module, function */

/* The vendor calls the skeleton makes, for messages ("cuMemAlloc", "hipMalloc"). */
typedef enum gpu_call {
	GPU_CALL_INIT,
	GPU_CALL_DEVICE_COUNT,
	GPU_CALL_DEVICE_OPEN,
	GPU_CALL_MAKE_CURRENT,
	GPU_CALL_STREAM_CREATE,
	GPU_CALL_EVENT_CREATE,
	GPU_CALL_EVENT_RECORD,
	GPU_CALL_EVENT_SYNC,
	GPU_CALL_MEM_ALLOC,
	GPU_CALL_MEM_FREE,
	GPU_CALL_MEMSET,
	GPU_CALL_HOST_ALLOC,
	GPU_CALL_HOST_FREE,
	GPU_CALL_H2D,
	GPU_CALL_D2H,
	GPU_CALL_PEER,
	GPU_CALL_MODULE_LOAD,
	GPU_CALL_MODULE_FUNCTION,
	GPU_CALL_LAUNCH,
	GPU_CALL_STREAM_SYNC,
	GPU_CALL_HOST_REGISTER,
	GPU_CALL_HOST_UNREGISTER,
	GPU_CALL_COPY_2D,
	GPU_CALL_COUNT
} gpu_call;

typedef struct gpu_dev gpu_dev;

/* A strided copy (ABI 1.7 copy_2d) as a vendor's 2D copy takes it: `rows` runs of `width` bytes,
 * each side host memory (its *_host pointer) or a device address (offset included), runs one
 * pitch apart. */
typedef struct gpu_copy2d {
	size_t width, rows;
	void *dst_host;          /* or NULL: the device address dst */
	uint64_t dst;
	size_t dst_pitch;
	const void *src_host;    /* or NULL: the device address src */
	uint64_t src;
	size_t src_pitch;
} gpu_copy2d;

/* What a vendor tells the skeleton about one device at open. */
typedef struct gpu_dev_info {
	gpu_handle ctx;        /* context to make current on every thread using the device */
	int arch;              /* CUDA: compute capability major * 10 + minor; 0 if unknown */
	uint64_t free_bytes;   /* device memory free at open (0 if unknown) */
} gpu_dev_info;

/*
 * A vendor: names, error translation and thin wrappers. Every function returning int returns the
 * vendor's native code (0 = success) unless its comment says otherwise.
 */
typedef struct gpu_vendor {
	const char *name;                        /* "cuda": the backend's name */
	const char *label;                       /* "CUDA": for messages */
	const char *calls[GPU_CALL_COUNT];       /* vendor function name per gpu_call */
	int not_ready;                           /* native "not ready" of an event query */
	int already_registered;                  /* native "host memory already registered" */

	/* The ODX code for a native failure; *sticky is set when the device's context is unusable
	 * afterwards (illegal address, launch failure, ...). */
	int (*translate)(int native, bool *sticky);
	/* Native name and description of a code, or NULL if the driver does not know it. */
	const char *(*err_name)(gpu_api *api, int native);
	const char *(*err_string)(gpu_api *api, int native);

	/* Opens the vendor library: returns 0 or an ODX code with the reason written. */
	int (*open)(const odx_backend_host *env, gpu_api **api, char *reason, size_t n);
	void (*close)(gpu_api *api);
	int (*device_count)(gpu_api *api, int *count);
	/* Retains the device's context and fills the name, memory and PCI id of props. */
	int (*device_open)(gpu_api *api, int index, odx_backend_device_props *props,
			   gpu_dev_info *info);
	void (*device_close)(gpu_api *api, int index, gpu_handle ctx);
	int (*make_current)(gpu_api *api, int index, gpu_handle ctx);

	int (*stream_create)(gpu_api *api, gpu_handle *stream);
	int (*stream_destroy)(gpu_api *api, gpu_handle stream);
	int (*stream_sync)(gpu_api *api, gpu_handle stream);
	int (*event_create)(gpu_api *api, gpu_handle *event); /* blocking-sync, no timing */
	int (*event_destroy)(gpu_api *api, gpu_handle event);
	int (*event_record)(gpu_api *api, gpu_handle event, gpu_handle stream);
	int (*event_query)(gpu_api *api, gpu_handle event);
	int (*event_sync)(gpu_api *api, gpu_handle event);

	int (*mem_alloc)(gpu_api *api, uint64_t *ptr, size_t n);
	int (*mem_free)(gpu_api *api, uint64_t ptr);
	int (*memset_async)(gpu_api *api, uint64_t ptr, int byte, size_t n, gpu_handle stream);
	int (*host_alloc)(gpu_api *api, void **ptr, size_t n); /* pinned */
	int (*host_free)(gpu_api *api, void *ptr);
	/* Page-locks existing host memory for every context of the process (portable), and undoes
	 * it (`ptr` as registered). */
	int (*host_register)(gpu_api *api, void *ptr, size_t n);
	int (*host_unregister)(gpu_api *api, void *ptr);
	int (*h2d_async)(gpu_api *api, uint64_t dst, const void *src, size_t n, gpu_handle stream);
	int (*d2h_async)(gpu_api *api, void *dst, uint64_t src, size_t n, gpu_handle stream);
	/* Optional (NULL: the core stages device-to-device copies through host memory). */
	int (*peer_async)(gpu_api *api, uint64_t dst, const gpu_dev *ddev, uint64_t src,
			  const gpu_dev *sdev, size_t n, gpu_handle stream);

	/* Optional (NULL, or copy_2d_available false: the core copies tiles row by row): one 2D
	 * copy on `stream` (cuMemcpy2DAsync, hipMemcpy2DAsync); a device side may be memory of
	 * another device of the vendor (unified addressing). */
	bool (*copy_2d_available)(gpu_api *api);
	int (*copy_2d_async)(gpu_api *api, const gpu_copy2d *c, gpu_handle stream);

	/* Can this device run this variant (format, architecture, PTX version)? No vendor call. */
	bool (*can_run)(gpu_api *api, const gpu_dev *dev, const odx_kernel_variant *v);
	/* Loads a variant's image; `log` receives what the vendor's loader said (a JIT log) and
	 * which kind of image it was. Returns the native code, or a negative ODX_E* code for a
	 * failure before the vendor's loader saw an image (a source variant that does not
	 * compile), with the whole explanation in `log`. */
	int (*module_load)(gpu_api *api, const gpu_dev *dev, const odx_kernel_variant *v,
			   gpu_handle *module, char *log, size_t n);
	int (*module_unload)(gpu_api *api, gpu_handle module);
	int (*module_function)(gpu_api *api, gpu_handle module, const char *entry,
			       gpu_handle *fn);
	/* Optional: size of parameter `index` of `fn`; a native failure when there is no such
	 * parameter. Lets launch check the arguments against the kernel before the driver. */
	int (*param_size)(gpu_api *api, gpu_handle fn, int index, size_t *size);
	int (*launch)(gpu_api *api, gpu_handle fn, const uint32_t grid[3], const uint32_t block[3],
		      gpu_handle stream, void **params);
} gpu_vendor;

/* ---- the skeleton's objects (read by vendors through these fields only) ---------------------- */

typedef struct gpu_state {
	const gpu_vendor *v;
	gpu_api *api;
	const odx_backend_host *env;
	int ndevices;
	uint64_t poll_ns;        /* bounded poll of an event before a blocking wait */
} gpu_state;

typedef struct gpu_block {
	struct gpu_block *next;
	void *ptr;               /* GPU_STAGE_BLOCK bytes of pinned host memory */
} gpu_block;

typedef struct gpu_xfer gpu_xfer;
typedef struct gpu_pending gpu_pending;

/* One unit of work the completion thread waits for, in stream order. */
struct gpu_pending {
	odx__lane_link link;     /* in the completion thread's queue */
	gpu_pending *next;       /* in the spare list */
	gpu_handle event;        /* created once, reused with the record */
	bool armed;              /* the event was recorded: wait for it */
	odx_backend_done_fn done; /* compute lane: the launch's completion */
	void *arg;
	gpu_xfer *xfer;          /* copy lanes: the job and this chunk */
	bool last;
	gpu_block *blk;
	size_t off, len;
};

typedef struct gpu_lane {
	gpu_dev *dev;
	const char *name;        /* "compute", "h2d", "d2h" */
	gpu_handle stream;
	/* The completion thread and its queue of pending records; its lock guards `spare` and
	 * the staging blocks too. */
	odx__lane completion;
	gpu_pending *spare;      /* recycled records, each with its event */

	/* Copy lanes only: the issue thread with its queue of copy jobs, and the staging blocks. */
	odx__lane issue;
	pthread_cond_t block_cond;
	gpu_block *free_blocks;
	gpu_block blocks[GPU_STAGE_BLOCKS];

	/* Copy lanes only: copy_sync's stream and an event per piece in flight, given to one
	 * caller at a time by sync_lock (held for the whole copy). */
	pthread_mutex_t sync_lock;
	gpu_handle sync_stream;
	gpu_handle sync_events[GPU_SYNC_PIECES];
} gpu_lane;

struct gpu_dev {
	gpu_state *st;
	int index;               /* within the backend */
	int odx_device;
	gpu_dev_info info;
	char name[128];
	gpu_lane compute, h2d, d2h;
	gpu_handle aux_stream;   /* zero-fills of new allocations */
	pthread_mutex_t aux_lock;
	atomic_int lost;         /* native code of the first sticky error, 0 while healthy */
	pthread_mutex_t lost_lock;
	char lost_msg[GPU_MSG_MAX];
};

/* ---- skeleton entry points ------------------------------------------------------------------- */

/* A vendor's open op calls this with its vendor table (static storage). */
int gpu_open(const gpu_vendor *v, const odx_backend_host *env, void **state, char *reason,
	     size_t n);
void gpu_close(void *state);
int gpu_device_count(void *state);
int gpu_device_open(void *state, int index, int odx_device, odx_backend_device_props *props,
		    void **dev);
void gpu_device_close(void *dev);
int gpu_mem_alloc(void *dev, size_t size, bool zero, uint64_t *handle);
void gpu_mem_free(void *dev, uint64_t handle, size_t size);
int gpu_host_alloc(void *dev, size_t size, void **ptr);
void gpu_host_free(void *dev, void *ptr, size_t size);
int gpu_host_register(void *dev, void *ptr, size_t size);
void gpu_host_unregister(void *dev, void *ptr, size_t size);
int gpu_copy_h2d(void *dev, uint64_t dst, size_t dst_off, const void *src, size_t n,
		 odx_backend_done_fn done, void *arg);
int gpu_copy_d2h(void *dev, void *dst, uint64_t src, size_t src_off, size_t n,
		 odx_backend_done_fn done, void *arg);
int gpu_copy_d2d(void *dev, uint64_t dst, size_t dst_off, void *src_dev, uint64_t src,
		 size_t src_off, size_t n, odx_backend_done_fn done, void *arg);
int gpu_copy_2d(void *dev, const odx_backend_copy2d *c, odx_backend_done_fn done, void *arg);
int gpu_copy_sync(void *dev, bool to_device, uint64_t mem, size_t off, void *host, size_t n,
		  char *error, size_t error_size);
int gpu_module_load(void *dev, const odx_kernel_variant *variant, void **module, char *error,
		    size_t error_size);
void gpu_module_unload(void *dev, void *module);
int gpu_launch(void *dev, odx_backend_launch *l, odx_backend_done_fn done, void *arg);
bool gpu_can_run(void *dev, const odx_kernel_variant *variant);

/* The ops table of a vendor's backend, `open_fn` calling gpu_open with its vendor table. No
 * mem_map (ABI 1.3): the host cannot address discrete device memory; copy_sync instead. */
#define GPU_OPS_INIT(open_fn)                                                                      \
	{                                                                                          \
		.size = sizeof(odx_backend_ops), .open = (open_fn), .close = gpu_close,            \
		.device_count = gpu_device_count, .device_open = gpu_device_open,                  \
		.device_close = gpu_device_close, .mem_alloc = gpu_mem_alloc,                      \
		.mem_free = gpu_mem_free, .copy_h2d = gpu_copy_h2d, .copy_d2h = gpu_copy_d2h,      \
		.copy_d2d = gpu_copy_d2d, .module_load = gpu_module_load,                          \
		.module_unload = gpu_module_unload, .launch = gpu_launch, .can_run = gpu_can_run,  \
		.host_alloc = gpu_host_alloc, .host_free = gpu_host_free,                          \
		.host_register = gpu_host_register, .host_unregister = gpu_host_unregister,        \
		.copy_sync = gpu_copy_sync, .copy_2d = gpu_copy_2d,                                \
	}

/*
 * Formats "<call>: <NAME> (<number>): <description>" into msg, marks `d` lost on a sticky error
 * (d may be NULL) and returns the ODX code.
 */
int gpu_fail(const gpu_state *st, gpu_dev *d, gpu_call call, int native, char *msg, size_t n);

/* Logs through the context's sink. */
void gpu_log(const gpu_state *st, odx_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- between gpu.c (devices, memory, launches) and gpu_lane.c (lanes and copies) ------------ */

/* ODX_EDEVLOST with the first error in msg if the device is lost, else 0. */
int gpu_check_lost(gpu_dev *d, char *msg, size_t n);
/* Makes the device's context current on the calling thread (gpu_fail's code on failure). */
int gpu_make_current(gpu_dev *d, char *msg, size_t n);
/* Do the `n` bytes at `p` lie in memory the driver keeps page-locked for our copies? */
bool gpu_pinned_covers(const void *p, size_t n);

/* A pending record with an event, recycled or new. Needs the device's context current. */
int gpu_pending_get(gpu_lane *lane, gpu_pending **out, char *msg, size_t n);
/* Puts a record (its event kept) back on the lane's spare list. */
void gpu_pending_recycle(gpu_lane *lane, gpu_pending *p);
/* Hands a record to the lane's completion thread, in stream order. */
void gpu_pending_push(gpu_lane *lane, gpu_pending *p);
/* Creates the lane's stream (and staging blocks for a copy lane) and starts its threads. The
 * device's context is current. On failure gpu_lane_fini undoes what was done. */
int gpu_lane_init(gpu_dev *d, gpu_lane *lane, const char *name, bool copy, char *msg,
		  size_t n);
/* Stops the lane's threads (the issue thread first) and frees its records, blocks and streams. */
void gpu_lane_fini(gpu_lane *lane);

#endif /* ODX_BACKENDS_GPU_H */
