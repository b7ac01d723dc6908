/* SPDX-License-Identifier: Apache-2.0 */
/*
 * copy.c - copies between host memory and device buffers, and between devices, on the copy lane:
 * plain ones (copy_h2d, copy_d2h, copy_d2d) and strided ones (ABI 1.7 copy_2d).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy2d.h"
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

/* ---- strided copies (ABI 1.7 copy_2d) ---------------------------------------------------------- */

/*
 * The regions of one vkCmdCopyBuffer moving `rows` runs of `width` bytes from src_off (runs
 * src_pitch apart) to dst_off (dst_pitch apart): one VkBufferCopy per run, or one for all when
 * both sides are contiguous. Recorded into the command buffer, so freed right after.
 */
static VkBufferCopy *vkb_runs(size_t width, size_t rows, size_t src_off, size_t src_pitch,
			      size_t dst_off, size_t dst_pitch, uint32_t *count)
{
	bool whole = src_pitch == width && dst_pitch == width;
	size_t n = whole ? 1 : rows;
	VkBufferCopy *r;

	if (n > UINT32_MAX)
		return NULL;
	r = malloc(n * sizeof(*r));
	if (!r)
		return NULL;
	for (size_t i = 0; i < n; i++)
		r[i] = (VkBufferCopy){.srcOffset = src_off + i * src_pitch,
				      .dstOffset = dst_off + i * dst_pitch,
				      .size = whole ? width * rows : width};
	*count = (uint32_t)n;
	return r;
}

/*
 * Host memory and a device buffer, on the copy lane, like vkb_copy. Mapped memory: the
 * completion thread does the strided memcpy once earlier work of the lane is done. Otherwise the
 * runs are packed in a staging buffer of width * rows bytes (whatever the pitches: a 2048-column
 * tile of a large matrix stages only its own bytes) and one vkCmdCopyBuffer with a region per run
 * scatters them to, or gathers them from, the device buffer; a d2h's completion unpacks them.
 */
static int vkb_copy_2d_host(vkb_dev *d, const odx_backend_copy2d *c, odx_backend_done_fn done,
			    void *arg)
{
	const bool to_device = c->src_host != NULL;
	vkb_mem *m = (vkb_mem *)(uintptr_t)(to_device ? c->dst : c->src);
	const size_t off = to_device ? c->dst_off : c->src_off;
	const size_t dpitch = to_device ? c->dst_pitch : c->src_pitch;
	const size_t hpitch = to_device ? c->src_pitch : c->dst_pitch;
	const size_t packed = c->width * c->rows;
	vkb_lane *ln = &d->copy;
	char msg[VKB_MSG_MAX] = "";
	VkBufferCopy *runs = NULL;
	VkCommandBuffer cmd;
	vkb_pending *p;
	uint32_t nruns = 0;
	size_t span = 0;
	int rc;

	/* Checked by the caller: the span fits in a size_t, and so does width * rows. */
	odx__copy2d_span(c->width, c->rows, dpitch, &span);
	if (off > m->size || span > m->size - off)
		return ODX_ERANGE;
	p = calloc(1, sizeof(*p));
	if (!p)
		return ODX_ENOMEM;
	p->done = done;
	p->arg = arg;
	p->copy_n = c->width;
	p->copy_rows = c->rows;
	pthread_mutex_lock(&ln->lane.lock);
	if (m->map && !d->force_staging) {
		p->copy_dst = to_device ? (char *)m->map + off : c->dst_host;
		p->copy_dst_pitch = to_device ? dpitch : hpitch;
		p->copy_src = to_device ? c->src_host : (const char *)m->map + off;
		p->copy_src_pitch = to_device ? hpitch : dpitch;
		p->value = ln->submitted;
		vkb_lane_push(ln, p);
		pthread_mutex_unlock(&ln->lane.lock);
		return 0;
	}
	runs = to_device ? vkb_runs(c->width, c->rows, 0, c->width, off, dpitch, &nruns)
			 : vkb_runs(c->width, c->rows, off, dpitch, 0, c->width, &nruns);
	if (!runs) {
		rc = ODX_ENOMEM;
		snprintf(msg, sizeof(msg), "no memory for %zu copy regions", c->rows);
		goto out_unlock;
	}
	rc = vkb_staging_get(ln, packed ? packed : 1, &p->staging, msg, sizeof(msg));
	if (rc)
		goto out_unlock;
	rc = vkb_lane_begin(ln, &cmd, msg, sizeof(msg));
	if (rc)
		goto out_put_staging;
	if (to_device) {
		/* Host writes before vkQueueSubmit are visible to the copy. */
		odx__copy2d_memcpy(p->staging->m.map, c->width, c->src_host, hpitch, c->width,
				   c->rows);
		p->copy_n = 0; /* nothing left for the completion thread */
		if (packed)
			d->fn.vkCmdCopyBuffer(cmd, p->staging->m.buf, m->buf, nruns, runs);
	} else {
		p->copy_dst = c->dst_host;
		p->copy_dst_pitch = hpitch;
		p->copy_src = p->staging->m.map;
		p->copy_src_pitch = c->width;
		if (packed)
			d->fn.vkCmdCopyBuffer(cmd, m->buf, p->staging->m.buf, nruns, runs);
	}
	rc = vkb_lane_submit(ln, cmd, p, msg, sizeof(msg));
	if (rc) {
		vkb_lane_recycle_cmd(ln, cmd);
		goto out_put_staging;
	}
	pthread_mutex_unlock(&ln->lane.lock);
	free(runs);
	return 0;

out_put_staging:
	vkb_staging_put(ln, p->staging);
out_unlock:
	pthread_mutex_unlock(&ln->lane.lock);
	free(runs);
	free(p);
	vkb_copy_failed(d, to_device ? "2D host-to-device copy" : "2D device-to-host copy", rc,
			msg);
	return rc;
}

/* Between two devices of this backend (one VkDevice each): the runs are gathered into packed
 * host memory on the source's copy lane, then scattered from it on the destination's. */
typedef struct vkb_bounce2d {
	vkb_dev *dst_dev;
	odx_backend_copy2d second; /* the second hop, its source the packed bytes */
	void *buf;
	odx_backend_done_fn done;
	void *arg;
} vkb_bounce2d;

static void vkb_bounce2d_second_done(void *arg, int status, const char *msg)
{
	vkb_bounce2d *b = arg;

	b->done(b->arg, status, msg);
	free(b->buf);
	free(b);
}

static void vkb_bounce2d_first_done(void *arg, int status, const char *msg)
{
	vkb_bounce2d *b = arg;
	int rc;

	if (status == 0) {
		rc = vkb_copy_2d_host(b->dst_dev, &b->second, vkb_bounce2d_second_done, b);
		if (rc == 0)
			return;
		status = rc;
		msg = "could not queue the second hop of a 2D device-to-device copy";
	}
	vkb_bounce2d_second_done(b, status, msg);
}

static int vkb_copy_2d_between(vkb_dev *d, vkb_dev *s, const odx_backend_copy2d *c,
			       odx_backend_done_fn done, void *arg)
{
	const size_t packed = c->width * c->rows;
	vkb_bounce2d *b = calloc(1, sizeof(*b));
	int rc;

	if (!b || !(b->buf = malloc(packed ? packed : 1))) {
		free(b);
		return ODX_ENOMEM;
	}
	b->dst_dev = d;
	b->done = done;
	b->arg = arg;
	b->second = (odx_backend_copy2d){.width = c->width, .rows = c->rows, .dst = c->dst,
					 .dst_off = c->dst_off, .dst_pitch = c->dst_pitch,
					 .src_host = b->buf, .src_pitch = c->width};
	rc = vkb_copy_2d_host(s,
			      &(odx_backend_copy2d){.width = c->width, .rows = c->rows,
						    .dst_host = b->buf, .dst_pitch = c->width,
						    .src = c->src, .src_off = c->src_off,
						    .src_pitch = c->src_pitch},
			      vkb_bounce2d_first_done, b);
	if (rc) {
		free(b->buf);
		free(b);
	}
	return rc;
}

int vkb_copy_2d(void *dev, const odx_backend_copy2d *c, odx_backend_done_fn done, void *arg)
{
	vkb_dev *d = dev, *s;
	vkb_mem *dm, *sm;
	vkb_lane *ln = &d->copy;
	char msg[VKB_MSG_MAX] = "";
	size_t dspan = 0, sspan = 0;
	VkBufferCopy *runs;
	VkCommandBuffer cmd;
	vkb_pending *p;
	uint32_t nruns = 0;
	int rc = odx__copy2d_check(c);

	if (rc)
		return rc;
	/* width * rows <= the span on either side, which fits: staging sizes cannot wrap. */
	if (c->src_host || c->dst_host)
		return vkb_copy_2d_host(d, c, done, arg);
	s = c->src_dev ? c->src_dev : d;
	if (s != d)
		return vkb_copy_2d_between(d, s, c, done, arg);

	/* One device: one vkCmdCopyBuffer with a region per run. */
	dm = (vkb_mem *)(uintptr_t)c->dst;
	sm = (vkb_mem *)(uintptr_t)c->src;
	odx__copy2d_span(c->width, c->rows, c->dst_pitch, &dspan);
	odx__copy2d_span(c->width, c->rows, c->src_pitch, &sspan);
	if (c->dst_off > dm->size || dspan > dm->size - c->dst_off || c->src_off > sm->size ||
	    sspan > sm->size - c->src_off)
		return ODX_ERANGE;
	runs = vkb_runs(c->width, c->rows, c->src_off, c->src_pitch, c->dst_off, c->dst_pitch,
			&nruns);
	p = calloc(1, sizeof(*p));
	if (!runs || !p) {
		free(runs);
		free(p);
		return ODX_ENOMEM;
	}
	p->done = done;
	p->arg = arg;
	pthread_mutex_lock(&ln->lane.lock);
	rc = vkb_lane_begin(ln, &cmd, msg, sizeof(msg));
	if (rc == 0) {
		if (c->width)
			d->fn.vkCmdCopyBuffer(cmd, sm->buf, dm->buf, nruns, runs);
		rc = vkb_lane_submit(ln, cmd, p, msg, sizeof(msg));
		if (rc)
			vkb_lane_recycle_cmd(ln, cmd);
	}
	pthread_mutex_unlock(&ln->lane.lock);
	free(runs);
	if (rc) {
		free(p);
		vkb_copy_failed(d, "2D device-to-device copy", rc, msg);
	}
	return rc;
}
