/* SPDX-License-Identifier: Apache-2.0 */
/*
 * backend.h - the interface between the core and a backend (internal for now).
 *
 * This is the seed of the public backend ABI (include/odx/backend.h, issue 4): an operations table
 * that starts with its own size and only grows at the end, device memory as opaque 64-bit handles
 * plus offsets, asynchronous copies and launches that report completion through a callback.
 * The core never assumes device memory is host-addressable; the host backend merely happens to
 * implement handles as pointers.
 */
#ifndef ODX_CORE_BACKEND_H
#define ODX_CORE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "odx/odx.h"

typedef struct odx__config odx__config;

/* Completion of an asynchronous operation. `status` is 0 or a negative ODX_E* code; `msg` (may be
 * NULL) details a failure and is only valid during the call. Called from a backend thread. */
typedef void (*odx__done_fn)(void *arg, int status, const char *msg);

/* What the core offers a backend when opening it. Valid until the backend is closed. */
typedef struct odx__backend_env {
	const odx__config *config;
	unsigned host_cores;     /* usable processing units of this process */
	uint64_t host_memory;    /* physical RAM in bytes */
	void *core;              /* passed back to the callbacks below */
	/* Binds the calling thread to processing unit `slot` (modulo the machine); no-op when
	 * binding is disabled. Returns 0 or a negative code. */
	int (*bind_thread)(void *core, unsigned slot);
	/* Logs a message at `level` through the context's log sink. */
	void (*log)(void *core, odx_log_level level, const char *msg);
} odx__backend_env;

typedef struct odx__device_props {
	char name[128];
	uint64_t memory_bytes;
	int compute_lanes;
	int copy_lanes;
	int threads;             /* host threads serving the compute lane (host backend) */
	char pci_bus_id[32];     /* "" when not a PCI device */
} odx__device_props;

/* One argument of a launch, in signature order. */
typedef struct odx__launch_arg {
	odx_arg_kind kind;
	uint64_t mem;            /* buffers: device memory handle */
	size_t size;             /* buffers: bytes */
	union {
		int32_t i32;
		int64_t i64;
		float f32;
		double f64;
	} v;
} odx__launch_arg;

typedef struct odx__launch {
	const odx_kernel_variant *variant;
	const odx__launch_arg *args;
	int nargs;
	uint32_t grid[3];
	uint32_t block[3];
	int device;              /* ODX device index, for messages and the host launch struct */
	const char *tag;
	char *error;             /* failure message written by the backend or the kernel */
	size_t error_size;
	int native;              /* out: the native code of a failure (kernel return, vendor code) */
} odx__launch;

/* Launch result meaning "completion will be reported through the callback". */
#define ODX__PENDING 1

typedef struct odx__backend_ops {
	size_t size;             /* sizeof(odx__backend_ops) as the backend was built */
	const char *name;
	odx_backend_kind kind;

	/* Opens the driver. On failure returns ODX_EUNAVAIL (or another code) and explains why in
	 * reason[0..reason_size). */
	int (*open)(const odx__backend_env *env, void **state, char *reason, size_t reason_size);
	void (*close)(void *state);
	int (*device_count)(void *state);
	int (*device_open)(void *state, int index, int odx_device, odx__device_props *props,
			   void **dev);
	void (*device_close)(void *dev);

	/* Device memory. `zero` asks for zero-filled memory. */
	int (*mem_alloc)(void *dev, size_t size, bool zero, uint64_t *handle);
	void (*mem_free)(void *dev, uint64_t handle, size_t size);

	/* Asynchronous copies on the device's copy lane. Return 0 when queued (done is called later)
	 * or a negative code when nothing was queued (done is not called). */
	int (*copy_h2d)(void *dev, uint64_t dst, size_t dst_off, const void *src, size_t n,
			odx__done_fn done, void *arg);
	int (*copy_d2h)(void *dev, void *dst, uint64_t src, size_t src_off, size_t n,
			odx__done_fn done, void *arg);
	/* Copy between two devices of this backend, queued on `dev` (the destination). */
	int (*copy_d2d)(void *dev, uint64_t dst, size_t dst_off, void *src_dev, uint64_t src,
			size_t src_off, size_t n, odx__done_fn done, void *arg);

	/* Runs a kernel variant on the compute lane. Called only from the device's worker thread.
	 * Returns 0 when it completed synchronously (done is not called), ODX__PENDING when done will
	 * be called, or a negative code on failure (message in l->error, native code in l->native). */
	int (*launch)(void *dev, odx__launch *l, odx__done_fn done, void *arg);

	/* Optional: can this device run this variant? NULL means "variant.backend == kind". */
	bool (*can_run)(void *dev, const odx_kernel_variant *v);
} odx__backend_ops;

/* Built-in backends. */
extern const odx__backend_ops odx__host_backend;

#endif /* ODX_CORE_BACKEND_H */
