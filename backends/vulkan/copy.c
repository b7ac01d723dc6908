/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy.c - copies between host memory and device buffers, and between devices, on the copy lane.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vkb.h"

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
	pthread_mutex_lock(&ln->lane.lock);
	if (m->map && !d->force_staging) {
		p->copy_dst = to_device ? (char *)m->map + off : host;
		p->copy_src = to_device ? host : (const char *)m->map + off;
		p->copy_n = n;
		p->value = ln->submitted;
		vkb_lane_push(ln, p);
		pthread_mutex_unlock(&ln->lane.lock);
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
	pthread_mutex_unlock(&ln->lane.lock);
	return 0;

out_put_staging:
	vkb_staging_put(ln, p->staging);
out_unlock:
	pthread_mutex_unlock(&ln->lane.lock);
	free(p);
	vkb_copy_failed(d, to_device ? "host-to-device copy" : "device-to-host copy", rc, msg);
	return rc;
}

int vkb_copy_h2d(void *dev, uint64_t dst, size_t dst_off, const void *src, size_t n,
		 odx_backend_done_fn done, void *arg)
{
	/* The source is only read; the shared helper takes a plain pointer for both ways. */
	return vkb_copy(dev, (vkb_mem *)(uintptr_t)dst, dst_off, (void *)(uintptr_t)src, n, true,
			done, arg);
}

int vkb_copy_d2h(void *dev, void *dst, uint64_t src, size_t src_off, size_t n,
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

int vkb_copy_d2d(void *dev, uint64_t dst, size_t dst_off, void *src_dev, uint64_t src,
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
	pthread_mutex_lock(&ln->lane.lock);
	rc = vkb_lane_begin(ln, &cmd, msg, sizeof(msg));
	if (rc == 0) {
		if (n)
			d->fn.vkCmdCopyBuffer(cmd, sm->buf, dm->buf, 1, &region);
		rc = vkb_lane_submit(ln, cmd, p, msg, sizeof(msg));
		if (rc)
			vkb_lane_recycle_cmd(ln, cmd);
	}
	pthread_mutex_unlock(&ln->lane.lock);
	if (rc) {
		free(p);
		vkb_copy_failed(d, "device-to-device copy", rc, msg);
	}
	return rc;
}
