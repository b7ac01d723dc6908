/* SPDX-License-Identifier: Apache-2.0 */
/*
 * abi_module.h - the harness of the below-the-API backend tests (abi_offsets.c, abi_copy2d.c):
 * one backend module loaded the way the core loads it (dlopen from $ODX_BACKEND_PATH,
 * odx_backend_entry), opened with a minimal odx_backend_host played by the test program
 * (configuration from the environment as the core spells it: vulkan.allow_cpu is
 * ODX_VULKAN_ALLOW_CPU), its device 0 opened, and the waits for its completions, all bounded.
 */
#ifndef ODX_TESTS_CONFORMANCE_ABI_MODULE_H
#define ODX_TESTS_CONFORMANCE_ABI_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "odx/backend.h"

#define ABI_WAIT_S 60 /* every wait is bounded */

typedef struct abi_module {
	const char *name;   /* the module's name: host, vulkan, opencl, cuda, hip */
	void *lib;
	const odx_backend_descriptor *desc;
	const odx_backend_ops *ops;
	void *state;
	void *dev;          /* device 0 */
	odx_backend_device_props props;
	size_t align;       /* props.mem_align, 256 when 0 */
	char detail[512];   /* the last error_detail */
} abi_module;

extern abi_module abi;

/* Loads, opens the backend and its device 0. Returns 0, or -1 with the reason on stderr; exits
 * 77 (skipped, with "SKIP: <name>: <why>" on stdout) when the backend is unavailable here or has
 * no device. */
int abi_open(const char *name);
/* Closes the device and the backend (the module stays loaded). */
void abi_close(void);
/* Prints "SKIP: <name>: <why>" and exits 77. */
void abi_skip(const char *why) __attribute__((noreturn));

/* Completions: every queued operation counts one; wait_all waits for all of them (failing the
 * test on a timeout or on an operation that completed with an error). */
void abi_on_done(void *arg, int status, const char *msg);
void abi_expect_done(void);
/* The argument to pass with abi_on_done. */
void *abi_waiter(void);
void abi_wait_all(void);

/* Queued copies through the ops table; the test fails when one cannot be queued. */
void abi_h2d(uint64_t mem, size_t off, const void *src, size_t n);
void abi_d2h(void *dst, uint64_t mem, size_t off, size_t n);
/* mem_alloc, failing the test with the backend's detail. */
uint64_t abi_alloc(size_t size);

#endif /* ODX_TESTS_CONFORMANCE_ABI_MODULE_H */
