/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spirv.h - what the Vulkan backend needs to know about a SPIR-V module before a driver sees it:
 * that it is well formed at the instruction level, that it has the compute entry point asked
 * for, and its argument interface (storage-buffer bindings of set 0, push-constant members).
 * With that a launch whose arguments do not match the kernel is refused in ODX, with a message,
 * instead of reaching the driver.
 */
#ifndef ODX_VULKAN_SPIRV_H
#define ODX_VULKAN_SPIRV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "odx/odx.h"

#define VKB_SPIRV_MAX_BINDINGS 64
#define VKB_SPIRV_MAX_MEMBERS 32
/* The specialization constant (SpecId) by which a standard kernel's GLSL says which kernel it is,
 * for the check of lavapipe's loop budget (budget.c): `ODX_LOOP_KERNEL` in kernels/glsl. */
#define VKB_SPIRV_LOOP_KERNEL_SPEC_ID 100u

/** The argument interface of one compute entry point. */
typedef struct vkb_spirv_iface {
	uint64_t bindings;                    /* bit b: storage buffer at set 0, binding b */
	int push_members;                     /* -1: no push-constant block */
	odx_arg_kind member_kind[VKB_SPIRV_MAX_MEMBERS];
	uint32_t member_offset[VKB_SPIRV_MAX_MEMBERS];
	uint32_t loop_kernel; /* VKB_SPIRV_LOOP_KERNEL_SPEC_ID's default value; 0 when absent */
} vkb_spirv_iface;

/**
 * Checks `code[0..size)` (the SPIR-V header, every instruction's length, an OpEntryPoint
 * GLCompute named `entry`) and fills `iface`. Returns 0, or ODX_EINVAL with the reason in
 * err[0..err_size).
 */
int vkb_spirv_inspect(const void *code, size_t size, const char *entry, vkb_spirv_iface *iface,
		      char *err, size_t err_size);

#endif /* ODX_VULKAN_SPIRV_H */
