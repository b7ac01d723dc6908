/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend.h - the ODX backend ABI, for people writing a backend (in this tree or outside it).
 *
 * A backend is a shared module `libodx-backend-<name>.so` that exports one function,
 * `odx_backend_entry` (see odx_backend_entry_fn). ODX finds modules in the directories of
 * $ODX_BACKEND_PATH (colon-separated, searched first), then in $libdir/odx; the same source may
 * also be linked into libodx (the host backend is). Nothing but this header and odx.h is needed
 * to build one: the core hands the backend everything else through odx_backend_host.
 *
 * Versioning (Vulkan-loader style negotiation, libfabric-style tables):
 *  - ODX_BACKEND_ABI_VERSION is major << 16 | minor. The core calls the entry point with the
 *    newest version it knows; the backend answers a descriptor carrying the version it
 *    implements. The majors must be equal; the minors may differ either way.
 *  - odx_backend_ops and odx_backend_host start with their own size and only ever grow at the
 *    end. A reader checks that an operation lies inside the size the other side was built with
 *    (ODX_BACKEND_HAS_OP) before calling it. Optional operations may also be NULL; the core then
 *    falls back (see each operation) or reports ODX_ENOSYS.
 *
 * Threads: open/close/device_* are called from the thread opening or closing the context;
 * launch from the device's worker thread only; mem_*, copies and mem_map from the worker, from
 * completion callbacks and from application threads (odx_buffer_read/write run on the caller),
 * so a backend must accept them for one device from several threads at once, and calls for
 * different devices concurrently. Completion callbacks may be called from any thread of the
 * backend, but never from inside the call that queued the work.
 *
 * Errors: operations return 0 or a negative ODX_E* code. A backend translates vendor codes at its
 * edge and writes the vendor's own name and number into the message buffer it is given.
 */
#ifndef ODX_BACKEND_H
#define ODX_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "odx.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ODX_BACKEND_ABI_MAJOR 1
#define ODX_BACKEND_ABI_MINOR 8
#define ODX_BACKEND_ABI_VERSION ((ODX_BACKEND_ABI_MAJOR << 16) | ODX_BACKEND_ABI_MINOR)

/** True if table `t` (whose first member is its size) was built with member `op` in it. */
#define ODX_BACKEND_HAS_OP(t, type, op)                                                             \
	((t)->size >= offsetof(type, op) + sizeof((t)->op) && (t)->op != NULL)

/**
 * Completion of asynchronous work. `status` is 0 or a negative ODX_E* code; `msg` (may be NULL)
 * details a failure, valid only during the call.
 */
typedef void (*odx_backend_done_fn)(void *arg, int status, const char *msg);

/** What the core offers a backend. Valid from open until close returns. */
typedef struct odx_backend_host {
	size_t size;             /* sizeof(odx_backend_host) as the core was built */
	uint32_t abi_version;    /* ODX_BACKEND_ABI_VERSION of the core */
	unsigned host_cores;     /* processing units this process may use */
	uint64_t host_memory;    /* physical RAM in bytes */
	void *core;              /* opaque; the first argument of every callback below */

	/* Configuration values of this context (keys like "vulkan.allow_cpu"). Each returns
	 * ODX_ENOENT for a key the core does not know, and does not touch *out then. Strings
	 * stay valid until close. */
	int (*config_str)(void *core, const char *key, const char **out);
	int (*config_int)(void *core, const char *key, int64_t *out);
	int (*config_bool)(void *core, const char *key, bool *out);
	/* Sizes: bytes, or `percent_of` * share when the value was given as "NN%". */
	int (*config_size)(void *core, const char *key, uint64_t percent_of, uint64_t *out);

	/* Binds the calling thread to processing unit `slot` (modulo the machine's); a no-op when
	 * binding is disabled. */
	int (*bind_thread)(void *core, unsigned slot);
	/* Logs through the context's log sink. */
	void (*log)(void *core, odx_log_level level, const char *msg);

	/* ABI 1.1. Explains the failure the backend is about to return from an operation that
	 * has no message buffer (mem_alloc, device_open): the core puts `msg` into the error it
	 * reports ("...: vkAllocateMemory: VK_ERROR_OUT_OF_DEVICE_MEMORY (-2)"). Call it from the
	 * thread making the failing call, just before returning. Check it with
	 * ODX_BACKEND_HAS_OP(host, odx_backend_host, error_detail) first. */
	void (*error_detail)(void *core, const char *msg);
} odx_backend_host;

/** Static properties of one device, filled by device_open. */
typedef struct odx_backend_device_props {
	char name[128];          /* e.g. "NVIDIA H100 80GB HBM3" */
	uint64_t memory_bytes;   /* device memory usable by ODX */
	int compute_lanes;       /* queues that run kernels */
	int copy_lanes;          /* queues that run copies */
	int threads;             /* host threads serving compute (CPU-like devices), else 0 */
	char pci_bus_id[32];     /* "0000:65:00.0" for hwloc locality, "" if not a PCI device */
	bool host_visible;       /* device memory handles are host pointers (host backend) */
	/* ABI 1.1: launches on the compute lane execute in launch order, and their `done`
	 * callbacks come in that order too (a CUDA stream with one completion thread). The core
	 * may then launch a task right behind the unfinished predecessor it depends on, instead of
	 * waiting for it to complete. Leave false unless both orders are guaranteed. */
	bool ordered_compute;
	uint8_t reserved_pad[2]; /* zero; keeps mem_align where the 1.1 reserved bytes were */
	/* ABI 1.2: the alignment, in bytes (a power of two), that an offset into device memory
	 * must have when it names the start of a launch argument (odx_backend_arg.v.offset) or of
	 * a copy into or out of suballocated memory. The core carves pooled buffers on these
	 * boundaries. 0 means 256. A 1.0/1.1 backend leaves it 0 and never sees an offset. */
	uint32_t mem_align;
	uint8_t reserved[60];
} odx_backend_device_props;

/**
 * One argument of a launch, in the kernel's signature order.
 *
 * A buffer argument is the `size` bytes at byte `v.offset` of the memory `mem` (ABI 1.2): the
 * core suballocates buffers from a few large mem_alloc allocations. The kernel sees those bytes
 * as its whole buffer, starting at its index 0. The offset is a multiple of the device's
 * mem_align and offset + size never exceeds the allocation. The core passes a nonzero offset
 * only to backends whose descriptor says abi_version >= 1.2; for older ones v.offset is 0.
 */
typedef struct odx_backend_arg {
	odx_arg_kind kind;
	uint64_t mem;            /* buffers: the device memory handle (from mem_alloc) */
	size_t size;             /* buffers: bytes */
	union {
		int32_t i32;
		int64_t i64;
		float f32;
		double f64;
		uint64_t offset; /* buffers (ABI 1.2): byte offset into mem */
	} v;                     /* scalars; buffers: the offset */
} odx_backend_arg;

typedef struct odx_backend_launch {
	const odx_kernel_variant *variant; /* the variant chosen for this device */
	void *module;            /* what module_load returned for it (NULL if no module_load) */
	const odx_backend_arg *args;
	int nargs;
	uint32_t grid[3];        /* work-groups per dimension (each >= 1) */
	uint32_t block[3];       /* work-items per group per dimension (each >= 1) */
	int device;              /* ODX device index, for messages */
	const char *tag;         /* the task's tag ("" if none) */
	char *error;             /* a failure message goes here ... */
	size_t error_size;       /* ... NUL-terminated, at most this many bytes */
	int native;              /* out: native code of a failure (kernel return, vendor code) */
	/* ABI 1.7: per argument, the layout of a buffer argument's bytes where it is passed
	 * (odx_shape; scalars {0}). A 2D tile of a partitioned buffer (odx_buffer_partition) is
	 * packed in device memory ({w, n, w}), but in host memory it stays inside its parent
	 * ({w, n, parent pitch}): a host backend hands these to odx_host_launch.buffer_shapes.
	 * NULL for a backend that declares an older minor. */
	const odx_shape *shapes;
	/* ABI 1.8 (docs/sizes.md): per argument, a buffer argument's length in bytes when the
	 * task starts (<= size; scalars 0); a host backend hands the buffers' ones to
	 * odx_host_launch.buffer_lengths. NULL for a backend that declares an older minor. */
	const size_t *lengths;
	/* ABI 1.8: what odx_host_launch.set_length reaches: records that buffer argument `arg`
	 * (its index in the signature, not among buffers) gets length `bytes` (part `part`, or
	 * ODX_WHOLE_BUFFER) when the task succeeds. The core checks the request (a refused one
	 * fails the task with a message) and keeps the last call per (arg, part). Callable from
	 * any thread of the launch until its completion is reported (`done`, or launch's return);
	 * set_length_ctx is its first argument. NULL for a backend that declares an older minor. */
	void (*set_length)(void *set_length_ctx, int arg, int part, size_t bytes);
	void *set_length_ctx;
} odx_backend_launch;

/**
 * A strided copy (ABI 1.7, odx_backend_ops.copy_2d): `rows` runs of `width` bytes; run r starts at
 * byte off + r * pitch on each side (pitch >= width; rows >= 1). Exactly one of dst_host and a
 * device destination: host memory at `dst_host` (pitch dst_pitch; dst and dst_off unused) or the
 * device memory `dst` at byte dst_off. Likewise for the source: host memory at `src_host`, or
 * device memory `src` at src_off, of `src_dev` (a device of the same backend; NULL: `dev`).
 * Host to host never reaches a backend.
 */
typedef struct odx_backend_copy2d {
	size_t width;            /* bytes per run */
	size_t rows;             /* runs */
	void *dst_host;          /* host destination, or NULL */
	uint64_t dst;            /* device destination (dst_host NULL) ... */
	size_t dst_off;          /* ... at this byte offset (a multiple of mem_align) */
	size_t dst_pitch;        /* bytes between the starts of two runs at the destination */
	const void *src_host;    /* host source, or NULL */
	void *src_dev;           /* device of the source memory (NULL: the `dev` argument) */
	uint64_t src;            /* device source (src_host NULL) ... */
	size_t src_off;          /* ... at this byte offset */
	size_t src_pitch;        /* bytes between the starts of two runs at the source */
} odx_backend_copy2d;

/** "buffer", "i32", "i64", "f32", "f64" (or "?"): for a backend's argument-check messages. */
static inline const char *odx_backend_arg_kind_name(odx_arg_kind kind)
{
	switch (kind) {
	case ODX_ARG_BUFFER:
		return "buffer";
	case ODX_ARG_I32:
		return "i32";
	case ODX_ARG_I64:
		return "i64";
	case ODX_ARG_F32:
		return "f32";
	case ODX_ARG_F64:
		return "f64";
	case ODX_ARG_LD: /* resolved by the core into i32 or i64: a backend never sees it */
		return "ld";
	case ODX_ARG_LEN: /* likewise (ABI 1.8) */
		return "len";
	}
	return "?";
}

/** odx_backend_ops.launch returns this when completion will come through `done`. */
#define ODX_BACKEND_PENDING 1

typedef struct odx_backend_ops {
	size_t size;             /* sizeof(odx_backend_ops) as the backend was built */

	/* ---- ABI 1.0: required unless marked optional (1.1 changed no operation: it gave
	 * odx_backend_device_props.ordered_compute one of its reserved bytes) ---------------- */

	/** Opens the driver. On failure returns ODX_EUNAVAIL (driver missing, no usable device,
	 * ...) or another code, and says why in reason[0..reason_size) ("libvulkan.so.1 not
	 * found", "only CPU devices; set vulkan.allow_cpu = true"). */
	int (*open)(const odx_backend_host *host, void **state, char *reason, size_t reason_size);
	void (*close)(void *state);
	/** Number of devices this backend offers (>= 0). */
	int (*device_count)(void *state);
	/** Opens device `index` (0-based within the backend); `odx_device` is its ODX index. */
	int (*device_open)(void *state, int index, int odx_device, odx_backend_device_props *props,
			   void **dev);
	void (*device_close)(void *dev);

	/** Device memory: an opaque handle; `zero` asks for zero-filled memory. */
	int (*mem_alloc)(void *dev, size_t size, bool zero, uint64_t *handle);
	void (*mem_free)(void *dev, uint64_t handle, size_t size);

	/** Asynchronous copies on the device's copy lane. 0: queued, `done` is called later;
	 * negative: nothing was queued, `done` is not called. Host memory given to a copy stays
	 * valid and untouched until `done`. */
	int (*copy_h2d)(void *dev, uint64_t dst, size_t dst_off, const void *src, size_t n,
			odx_backend_done_fn done, void *arg);
	int (*copy_d2h)(void *dev, void *dst, uint64_t src, size_t src_off, size_t n,
			odx_backend_done_fn done, void *arg);
	/** Between two devices of this backend, queued on `dev` (the destination). Optional:
	 * without it the core stages through host memory. */
	int (*copy_d2d)(void *dev, uint64_t dst, size_t dst_off, void *src_dev, uint64_t src,
			size_t src_off, size_t n, odx_backend_done_fn done, void *arg);

	/** Optional: prepares a variant for a device (compiles, loads a module) once; the core
	 * caches the result per kernel and device and passes it to launch. Errors (a build log)
	 * go to error[0..error_size). */
	int (*module_load)(void *dev, const odx_kernel_variant *variant, void **module,
			   char *error, size_t error_size);
	void (*module_unload)(void *dev, void *module);

	/** Runs a kernel on the compute lane; called from the device's worker thread. Returns 0
	 * when it already completed (done is not called), ODX_BACKEND_PENDING when `done` will
	 * be called, or a negative code (message in l->error, native code in l->native). `l` and
	 * what it points to are valid only during the call. */
	int (*launch)(void *dev, odx_backend_launch *l, odx_backend_done_fn done, void *arg);

	/** Optional: can this device run this variant? NULL means the variant's backend kind is
	 * the backend's (variant.backend_name equals its kind's name; for the kinds with a
	 * constant, variant.backend == kind says the same: the core sets both). */
	bool (*can_run)(void *dev, const odx_kernel_variant *variant);

	/* ---- ABI 1.2 ------------------------------------------------------------------------ */

	/** Optional: `size` bytes of page-locked host memory that this device copies from and to
	 * fastest (what cuMemHostAlloc or hipHostMalloc give), for the core's pinned staging
	 * pool; *ptr is not touched on failure. Without it the core stages through ordinary
	 * memory. Called from the thread opening the context or from the device's worker. The
	 * memory stays valid until host_free, which the core calls before device_close. */
	int (*host_alloc)(void *dev, size_t size, void **ptr);
	/** Returns what host_alloc gave (same `size`). */
	void (*host_free)(void *dev, void *ptr, size_t size);

	/* ---- ABI 1.3 ------------------------------------------------------------------------ */

	/** Optional: the host address of the first byte of device memory `handle` (from
	 * mem_alloc), when the host can read and write that memory directly and coherently (a
	 * CPU device, an integrated GPU, host-visible coherent memory through a resizable BAR);
	 * otherwise ODX_ENOSYS, and the core copies with copy_h2d / copy_d2h as before. The core
	 * then copies user bytes in and out with memcpy on its own thread, only while no queued or
	 * running work of the device touches those bytes: host writes made before a later copy or
	 * launch is queued must be seen by it, and device writes must be visible to the host once
	 * their `done` callback was called. The address stays valid until mem_free. Must be cheap:
	 * the core asks at every access instead of caching. */
	int (*mem_map)(void *dev, uint64_t handle, void **ptr);

	/** Optional (1.3): page-locks the `size` bytes of application memory at `ptr` for this
	 * device's copies (cuMemHostRegister, hipHostRegister), so that copies to and from it run
	 * at full speed without a bounce. The core calls it for memory handed to it with
	 * odx_buffer_register, at registration, from the application's thread. A failure (the
	 * memory cannot be locked, ODX_ENOSYS) costs only speed: the core logs it and goes on. */
	int (*host_register)(void *dev, void *ptr, size_t size);
	/** Undoes host_register (same arguments), before the memory goes back to the application. */
	void (*host_unregister)(void *dev, void *ptr, size_t size);

	/** Optional (1.3): one copy between the `n` bytes of host memory at `host` and device
	 * memory `mem` at byte `off` (to the device if `to_device`), returning once it completed:
	 * 0, or a negative code with the reason in error[0..error_size). For a caller that waits
	 * anyway (odx_buffer_read and odx_buffer_write run on the application's thread, and the
	 * core uses this when mem_map is not offered): no completion callback and no thread
	 * hand-off. Called with no core lock held; it may wait for copies queued before it on the
	 * copy lane, never for work queued after it. Without it the core queues copy_h2d /
	 * copy_d2h and waits for their `done`. */
	int (*copy_sync)(void *dev, bool to_device, uint64_t mem, size_t off, void *host, size_t n,
			 char *error, size_t error_size);

	/* ---- ABI 1.4 ------------------------------------------------------------------------ */

	/** Optional (1.4): lets a thread that waits for this device's work drive its completions
	 * instead of sleeping until a backend thread reports them (one thread hand-off less per
	 * wait: an application thread in odx_buffer_write waiting for the kernel before it).
	 * Waits at most `timeout_ns` for the oldest launch or copy still in flight on the device,
	 * and calls the `done` callbacks of what completed, on the calling thread, in the order
	 * the backend guarantees for them anyway. Returns 1 if it ran a callback (the caller looks
	 * again), 0 if nothing is in flight, another thread of the backend is retiring it, or
	 * nothing completed in time (the caller then sleeps until the backend's own thread reports
	 * it), or a negative code. Each operation's
	 * callback is still called exactly once, by whichever thread retires it. Called with no
	 * core lock held, from application threads only; never from inside a callback. */
	int (*progress)(void *dev, uint64_t timeout_ns);

	/* ---- ABI 1.5 ------------------------------------------------------------------------ */

	/** Optional (1.5): copy_sync queued behind the launches already queued on this device's
	 * compute lane: the copy starts once they completed (the lane orders it after them, as
	 * an in-order queue does), and the call returns once the copy completed. The core calls
	 * it for an odx_buffer_read or odx_buffer_write whose only unfinished predecessors are
	 * such launches (a read of what a kernel just wrote, a write of a buffer a kernel still
	 * reads), so the waiting thread sleeps once, for both, instead of once for the kernel
	 * and once for the copy. Before it returns the backend should call the `done` callbacks
	 * of the launches it waited behind, on the calling thread, as progress does (the core
	 * otherwise waits for them to be reported: the copy is complete only when they are).
	 * Same arguments and errors as copy_sync; called with no core lock held, from
	 * application threads only, never from inside a callback. */
	int (*copy_sync_after)(void *dev, bool to_device, uint64_t mem, size_t off, void *host,
			       size_t n, char *error, size_t error_size);

	/* ---- ABI 1.6: no new operation ------------------------------------------------------
	 * One-call host variants (ODX_FORMAT_HOST_CALL). A backend of kind ODX_BACKEND_HOST that
	 * declares 1.6 or later runs such a variant's host_fn once per launch, with the whole
	 * grid, and fills the odx_host_launch members added in 1.6 (threads, run, run_state) for
	 * every host variant. The core hands one-call variants only to host backends that declare
	 * 1.6 or later; an older one never sees them (it would split them into chunks). */

	/* ---- ABI 1.7 ------------------------------------------------------------------------ */

	/** Optional (1.7): one strided copy (odx_backend_copy2d) on the device's copy lane, for the
	 * tiles of partitioned buffers: `rows` runs of `width` bytes each, one pitch apart on
	 * each side. `dev` is the device whose memory is involved (for a copy between two devices
	 * of this backend, the destination). 0: queued, `done` is called later; negative: nothing
	 * was queued and `done` is not called (ODX_ENOSYS for a direction the backend cannot do:
	 * the core then copies row by row with the 1D operations). Host memory given to it stays
	 * valid and untouched until `done`. Map it to the hardware's 2D copy (cuMemcpy2DAsync,
	 * hipMemcpy2DAsync, clEnqueue{Read,Write,Copy}BufferRect, one VkBufferCopy per row). */
	int (*copy_2d)(void *dev, const odx_backend_copy2d *c, odx_backend_done_fn done, void *arg);

	/* ---- ABI 1.8: no new operation ------------------------------------------------------
	 * Run-time lengths (docs/sizes.md). odx_backend_launch gained `lengths` and `set_length`
	 * (with its context): a host backend that declares 1.8 fills odx_host_launch's
	 * buffer_lengths and set_length for every host variant, its set_length turning the buffer
	 * parameter index into the argument index and calling the launch's set_length. Other
	 * backends need nothing: the core applies length rules after the task itself (reading the
	 * counts from device memory with the copy operations above), and resolves ODX_LEN into
	 * a scalar before launch, like ODX_LD. */
} odx_backend_ops;

/** What a backend module describes itself with. Static storage in the module. */
typedef struct odx_backend_descriptor {
	size_t size;             /* sizeof(odx_backend_descriptor) */
	uint32_t abi_version;    /* the ABI version the backend implements */
	const char *name;        /* "vulkan": matches the `backends` configuration key */
	/* Which kernel variants it runs: one of the kinds odx_backend_kind has a constant for, or
	 * ODX_BACKEND_OTHER: then its kind is `name`, and the variants it runs are those whose
	 * backend_name is `name` (a new vendor's backend needs no change to odx.h). */
	odx_backend_kind kind;
	const char *description; /* one line for `odx info` */
	const odx_backend_ops *ops;
} odx_backend_descriptor;

/**
 * The one function a backend module exports, named "odx_backend_entry". `core_abi_version` is
 * the newest ABI the core knows. Return 0 and a descriptor, or ODX_ENOSYS if the backend cannot
 * serve that major version.
 */
typedef int (*odx_backend_entry_fn)(uint32_t core_abi_version,
				    const odx_backend_descriptor **out);
#define ODX_BACKEND_ENTRY "odx_backend_entry"

/**
 * Defines the entry point of a module that serves one static descriptor and speaks this major
 * version of the ABI: what almost every backend needs, in one line at the end of its source.
 */
#define ODX_BACKEND_DEFINE_ENTRY(descriptor)                                                       \
	__attribute__((visibility("default"))) int odx_backend_entry(                              \
		uint32_t core_abi_version, const odx_backend_descriptor **out);                    \
	__attribute__((visibility("default"))) int odx_backend_entry(                              \
		uint32_t core_abi_version, const odx_backend_descriptor **out)                     \
	{                                                                                          \
		if ((core_abi_version >> 16) != ODX_BACKEND_ABI_MAJOR)                             \
			return ODX_ENOSYS;                                                         \
		*out = &(descriptor);                                                              \
		return 0;                                                                          \
	}

/* Fields taken from the reserved bytes must not change the struct's size or move a field that
 * backends built against an older minor write (248 bytes on LP64 since ABI 1.0). */
#ifdef __cplusplus
#define ODX__BACKEND_STATIC_ASSERT static_assert
#else
#define ODX__BACKEND_STATIC_ASSERT _Static_assert
#endif
ODX__BACKEND_STATIC_ASSERT(offsetof(odx_backend_device_props, reserved) +
				   sizeof(((odx_backend_device_props *)0)->reserved) ==
			   sizeof(odx_backend_device_props),
			   "odx_backend_device_props ends with its reserved bytes");
ODX__BACKEND_STATIC_ASSERT(sizeof(void *) != 8 || sizeof(odx_backend_device_props) == 248,
			   "odx_backend_device_props keeps its ABI 1.0 size");
ODX__BACKEND_STATIC_ASSERT(sizeof(void *) != 8 ||
				   offsetof(odx_backend_device_props, mem_align) == 184,
			   "mem_align sits in the ABI 1.1 reserved bytes");
#undef ODX__BACKEND_STATIC_ASSERT

#ifdef __cplusplus
}
#endif

#endif /* ODX_BACKEND_H */
