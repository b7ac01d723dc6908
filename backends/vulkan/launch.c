/* SPDX-License-Identifier: Apache-2.0 */
/*
 * launch.c - a launch: arguments checked against the kernel and the device, marshalled into push
 * constants and push descriptors, and recorded on the compute lane (batched while busy).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkb.h"

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

int vkb_launch(void *dev, odx_backend_launch *l, odx_backend_done_fn done, void *arg)
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
	rc = vkb_budget_check(d, m, l, push);
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
	pthread_mutex_lock(&ln->lane.lock);
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
		pthread_mutex_unlock(&ln->lane.lock);
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
	pthread_mutex_unlock(&ln->lane.lock);
	return ODX_BACKEND_PENDING;

out_unlock:
	pthread_mutex_unlock(&ln->lane.lock);
	free(p);
out_error:
	snprintf(l->error, l->error_size, "%s", msg);
	return rc;
}
