/* SPDX-License-Identifier: Apache-2.0 */
/*
 * deps_property_engine.h - dependency inference checked as a property over random task graphs,
 * on whatever devices a context has. Used by tests/unit/test_deps_property.c (host devices,
 * every policy) and by the conformance suite (each backend).
 *
 * Each graph runs a few dozen tasks over a handful of shared buffers with random access modes.
 * Every task records into its buffers in an order-sensitive way, so any violated RAW, WAR or WAW
 * dependency changes some byte:
 *  - a W buffer is overwritten entirely with a hash of the task id and of what the task read;
 *  - an RW buffer folds the id and the reads into every element (x = x * 31 + id + reads + i),
 *    which does not commute between two tasks;
 *  - every task writes a private witness buffer (W) with a checksum of what it read.
 * The final buffers and every witness are compared with the same graph executed sequentially on
 * plain arrays. Host reads and writes (odx_buffer_read/odx_buffer_write) are mixed in, since they
 * too follow program order.
 *
 * The task kernel has a host variant (the sequential reference's own code, split by
 * work-groups) and whatever device variants the caller passes (tests/common/record.cl and
 * record.comp compiled for OpenCL, Vulkan, CUDA, HIP). Failures are reported through cmocka;
 * include <cmocka.h> before calling.
 */
#ifndef ODX_TESTS_DEPS_PROPERTY_ENGINE_H
#define ODX_TESTS_DEPS_PROPERTY_ENGINE_H

#include <stdint.h>

#include "odx/odx.h"

#define DPE_MAXARGS 3 /* shared buffers per task, at most */
#define DPE_MAXVARIANTS 8

/* Device variants of the task kernel with k shared buffers, at index k - 1 (entry record_<k>;
 * launched with block 1 and grid = the task's work-group count). */
typedef struct dpe_variants {
	odx_kernel_variant v[DPE_MAXARGS][DPE_MAXVARIANTS];
	int n[DPE_MAXARGS];
} dpe_variants;

typedef struct dpe_options {
	const char *name; /* shown in failure messages */
	uint64_t seed;
	long graphs;		      /* graphs to draw and check */
	const dpe_variants *variants; /* NULL: host variant only */
} dpe_options;

/* Draws, runs and checks `o->graphs` graphs on `ctx` (tasks spread over all its devices, some
 * forced to one). Fails the current cmocka test on the first difference. */
void dpe_run(odx_context *ctx, const dpe_options *o);

#endif /* ODX_TESTS_DEPS_PROPERTY_ENGINE_H */
