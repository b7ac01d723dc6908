/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memory.c - device buffers (what an ODX memory handle points to), their memory types and the
 * lanes' pools of staging buffers.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkb.h"

/* ---- device buffers -------------------------------------------------------------------------- */

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

void vkb_buffer_destroy(vkb_dev *d, vkb_mem *m)
{
	if (m->buf)
		d->fn.vkDestroyBuffer(d->device, m->buf, NULL);
	if (m->mem)
		d->fn.vkFreeMemory(d->device, m->mem, NULL);
	*m = (vkb_mem){0};
}

/*
 * One VkBuffer with its own allocation (the core pools and suballocates, not the backend).
 * Device buffers prefer device-local memory; staging buffers need host-visible, coherent memory.
 */
int vkb_buffer_create(vkb_dev *d, size_t size, bool staging, vkb_mem *m, char *msg,
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

/* ---- staging buffers: a pool per lane -------------------------------------------------------- */

/* A staging buffer of at least n bytes from the lane's pool (lane lock held). */
int vkb_staging_get(vkb_lane *ln, size_t n, vkb_staging **out, char *msg, size_t msg_size)
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

void vkb_staging_put(vkb_lane *ln, vkb_staging *s)
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

/* ---- memory handles ------------------------------------------------------------------------ */

int vkb_mem_alloc(void *dev, size_t size, bool zero, uint64_t *handle)
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
		pthread_mutex_lock(&d->copy.lane.lock);
		rc = vkb_lane_begin(&d->copy, &cmd, msg, sizeof(msg));
		if (rc == 0) {
			d->fn.vkCmdFillBuffer(cmd, m->buf, 0, VK_WHOLE_SIZE, 0);
			rc = vkb_run_sync(&d->copy, cmd, msg, sizeof(msg));
		}
		pthread_mutex_unlock(&d->copy.lane.lock);
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

void vkb_mem_free(void *dev, uint64_t handle, size_t size)
{
	vkb_mem *m = (vkb_mem *)(uintptr_t)handle;

	(void)size;
	/* The core frees a replica only when no queued work uses it any more. */
	vkb_buffer_destroy(dev, m);
	free(m);
}

/* Host-visible, coherent device memory (all of it on lavapipe and integrated GPUs, a resizable
 * BAR on discrete ones) is mapped for its whole life: the core copies through the map. */
int vkb_mem_map(void *dev, uint64_t handle, void **ptr)
{
	const vkb_dev *d = dev;
	const vkb_mem *m = (const vkb_mem *)(uintptr_t)handle;

	if (!m->map || d->force_staging)
		return ODX_ENOSYS;
	*ptr = m->map;
	return 0;
}
