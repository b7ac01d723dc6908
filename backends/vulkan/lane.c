/* SPDX-License-Identifier: Apache-2.0 */
/*
 * lane.c - a lane's command buffers, submissions on its timeline semaphore and the completion
 * thread that reports them in order; ABI 1.4 progress, where application threads retire them.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy2d.h"
#include "vkb.h"

int vkb_lane_begin(vkb_lane *ln, VkCommandBuffer *out, char *msg, size_t msg_size)
{
	VkCommandBufferBeginInfo bi = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
		.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
	};
	VkMemoryBarrier mb = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
		.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT,
		.dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT,
	};
	VkCommandBuffer cmd;
	int rc;

	if (ln->nfree_cmds > 0) {
		cmd = ln->free_cmds[--ln->nfree_cmds];
	} else {
		VkCommandBufferAllocateInfo ai = {
			.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
			.commandPool = ln->pool,
			.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
			.commandBufferCount = 1,
		};

		rc = vkb_check(ln->dev->fn.vkAllocateCommandBuffers(ln->dev->device, &ai, &cmd),
			       "vkAllocateCommandBuffers", msg, msg_size);
		if (rc)
			return rc;
	}
	/* Begin resets it (the pool allows it); the lane lock serialises pool use. */
	rc = vkb_check(ln->dev->fn.vkBeginCommandBuffer(cmd, &bi), "vkBeginCommandBuffer", msg,
		       msg_size);
	if (rc)
		return rc;
	/* Earlier submissions of this queue (in submission order) finish their writes first. */
	ln->dev->fn.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
					 VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &mb, 0, NULL, 0,
					 NULL);
	*out = cmd;
	return 0;
}

void vkb_lane_recycle_cmd(vkb_lane *ln, VkCommandBuffer cmd)
{
	if (!cmd)
		return;
	if (ln->nfree_cmds == ln->cap_cmds) {
		int cap = ln->cap_cmds ? 2 * ln->cap_cmds : 16;
		VkCommandBuffer *grown = realloc(ln->free_cmds, (size_t)cap * sizeof(*grown));

		if (!grown)
			return; /* leaks into the pool, freed with it */
		ln->free_cmds = grown;
		ln->cap_cmds = cap;
	}
	ln->free_cmds[ln->nfree_cmds++] = cmd;
}

/* Signals the lane's next timeline value with an empty submission (after everything queued
 * before it): wakes a completion thread waiting ahead for an entry that needs no submission of
 * its own. If it fails, that thread's wait slice ends soon anyway. Lane lock held. */
static void vkb_lane_signal_ahead(vkb_lane *ln)
{
	uint64_t signal = ln->submitted + 1;
	VkTimelineSemaphoreSubmitInfo ts = {
		.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
		.signalSemaphoreValueCount = 1,
		.pSignalSemaphoreValues = &signal,
	};
	VkSubmitInfo si = {
		.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
		.pNext = &ts,
		.signalSemaphoreCount = 1,
		.pSignalSemaphores = &ln->timeline,
	};
	VkResult r;

	pthread_mutex_lock(ln->queue_lock);
	r = ln->dev->fn.vkQueueSubmit(ln->queue, 1, &si, VK_NULL_HANDLE);
	pthread_mutex_unlock(ln->queue_lock);
	if (r == VK_SUCCESS)
		ln->submitted = signal;
}

/* Appends a pending entry; the lane lock is held. */
void vkb_lane_push(vkb_lane *ln, vkb_pending *p)
{
	odx__lane_append(&ln->lane, &p->link);
	/* The completion thread waits ahead for a value no submission has signalled yet: an
	 * entry without a submission of its own (a copy through mapped memory, a failed batch)
	 * makes one. */
	if (ln->waiting_ahead && ln->submitted < ln->waiting_ahead)
		vkb_lane_signal_ahead(ln);
	/* Not while callers retire: the completion thread takes over by itself if they stop. */
	if (!ln->driven_sleep)
		odx__lane_wake(&ln->lane);
}

/*
 * Ends `cmd` (making its writes visible to the host) and submits it signalling the lane's next
 * timeline value, which becomes ln->submitted. Lane lock held.
 *
 * The submission also waits on the other lane's last completed value: already reached, so it
 * costs nothing, but it orders the memory accesses of the two queues formally. This is what
 * makes a copy the core saw complete (done called) visible to a later launch, and a launch it
 * saw complete visible to a later copy: the completion thread raises `completed` before it
 * calls done, so the wait value read here covers every copy completed before the launch call
 * (and a batched launch is submitted later still, with a value at least as large). The signal
 * makes the other queue's writes available and the wait (all commands) makes them visible.
 * Copies through mapped memory are host writes done before done is called, hence before this
 * vkQueueSubmit, which makes host writes visible to the device.
 */
static int vkb_lane_submit_cmd(vkb_lane *ln, VkCommandBuffer cmd, char *msg, size_t msg_size)
{
	vkb_dev *d = ln->dev;
	VkMemoryBarrier mb = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
		.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT,
		.dstAccessMask = VK_ACCESS_HOST_READ_BIT,
	};
	uint64_t signal = ln->submitted + 1;
	uint64_t wait = atomic_load(&ln->other->completed);
	VkPipelineStageFlags wait_stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
	VkTimelineSemaphoreSubmitInfo ts = {
		.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
		.waitSemaphoreValueCount = wait ? 1 : 0,
		.pWaitSemaphoreValues = &wait,
		.signalSemaphoreValueCount = 1,
		.pSignalSemaphoreValues = &signal,
	};
	VkSubmitInfo si = {
		.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
		.pNext = &ts,
		.waitSemaphoreCount = wait ? 1 : 0,
		.pWaitSemaphores = &ln->other->timeline,
		.pWaitDstStageMask = &wait_stage,
		.commandBufferCount = 1,
		.pCommandBuffers = &cmd,
		.signalSemaphoreCount = 1,
		.pSignalSemaphores = &ln->timeline,
	};
	int rc;

	d->fn.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
				   VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
	rc = vkb_check(d->fn.vkEndCommandBuffer(cmd), "vkEndCommandBuffer", msg, msg_size);
	if (rc)
		return rc;
	pthread_mutex_lock(ln->queue_lock);
	rc = vkb_check(d->fn.vkQueueSubmit(ln->queue, 1, &si, VK_NULL_HANDLE), "vkQueueSubmit", msg,
		       msg_size);
	pthread_mutex_unlock(ln->queue_lock);
	if (rc)
		return rc;
	ln->submitted = signal;
	return 0;
}

/* Submits `cmd` and queues `p` for the completion thread, which recycles `cmd`. Lane lock held. */
int vkb_lane_submit(vkb_lane *ln, VkCommandBuffer cmd, vkb_pending *p, char *msg,
		    size_t msg_size)
{
	int rc = vkb_lane_submit_cmd(ln, cmd, msg, msg_size);

	if (rc)
		return rc;
	p->value = ln->submitted;
	p->cmd = cmd;
	vkb_lane_push(ln, p);
	return 0;
}

/*
 * Submits the open batch, if any, and hands its launches to the completion thread: all share
 * the one timeline value the submission signals, and the last one returns the command buffer.
 * If the submission fails, every launch of the batch completes with the error (some already
 * returned ODX_BACKEND_PENDING, so done is how they learn). Lane lock held.
 */
void vkb_lane_flush(vkb_lane *ln)
{
	vkb_pending *p = ln->open_head, *next;
	int rc;

	if (!ln->open_n)
		return;
	rc = vkb_lane_submit_cmd(ln, ln->open_cmd, ln->fail_msg, sizeof(ln->fail_msg));
	if (rc)
		vkb_lane_recycle_cmd(ln, ln->open_cmd);
	for (; p; p = next) {
		next = p->next;
		p->value = rc ? 0 : ln->submitted;
		p->status = rc;
		p->cmd = rc || next ? VK_NULL_HANDLE : ln->open_cmd;
		vkb_lane_push(ln, p);
	}
	ln->open_cmd = VK_NULL_HANDLE;
	ln->open_head = ln->open_tail = NULL;
	ln->open_n = 0;
}

/* One wait of at most `ns` for the lane's timeline to reach `value` (submitted or not yet). */
static VkResult vkb_timeline_wait(vkb_lane *ln, uint64_t value, uint64_t ns)
{
	VkSemaphoreWaitInfo wi = {
		.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
		.semaphoreCount = 1,
		.pSemaphores = &ln->timeline,
		.pValues = &value,
	};

	return ln->dev->fn.vkWaitSemaphores(ln->dev->device, &wi, ns);
}

/* Waits until the lane's timeline reaches `value`, in slices, so close is never stuck. */
static int vkb_lane_wait(vkb_lane *ln, uint64_t value, char *msg, size_t msg_size)
{
	VkResult r;

	if (atomic_load(&ln->completed) >= value)
		return 0;
	do
		r = vkb_timeline_wait(ln, value, VKB_WAIT_NS);
	while (r == VK_TIMEOUT);
	if (r == VK_SUCCESS) {
		/* Two threads may wait (completion thread, a synchronous fill): keep the maximum. */
		uint_fast64_t seen = atomic_load(&ln->completed);

		while (seen < value && !atomic_compare_exchange_weak(&ln->completed, &seen, value))
			;
	}
	return vkb_check(r, "vkWaitSemaphores", msg, msg_size);
}

/*
 * Lane lock held, `p` the head, taken by this thread (ln->retiring set): waits for it, does its
 * host side, unlinks it and calls its callback with the lock released. Returns with the lock held
 * again and `retiring` cleared. `wait`: wait as long as it takes (the completion thread); else
 * the caller checked that the timeline reached p's value.
 */
static void vkb_lane_retire(vkb_lane *ln, vkb_pending *p, bool wait)
{
	char msg[VKB_MSG_MAX];
	odx_backend_done_fn done;
	void *done_arg;
	int status = p->status;

	if (status)
		snprintf(msg, sizeof(msg), "%s", ln->fail_msg);
	pthread_mutex_unlock(&ln->lane.lock);

	if (!status) {
		msg[0] = '\0';
		status = wait ? vkb_lane_wait(ln, p->value, msg, sizeof(msg)) : 0;
	}
	/* The copy's host side: staging to user memory, or straight through the map. */
	if (status == 0 && p->copy_n && p->copy_rows > 1)
		odx__copy2d_memcpy(p->copy_dst, p->copy_dst_pitch, p->copy_src, p->copy_src_pitch,
				   p->copy_n, p->copy_rows);
	else if (status == 0 && p->copy_n)
		memcpy(p->copy_dst, p->copy_src, p->copy_n);
	if (status == 0 && vkb_take_message(ln->dev, msg, sizeof(msg)))
		status = ODX_EBACKEND;
	done = p->done;
	done_arg = p->arg;

	pthread_mutex_lock(&ln->lane.lock);
	/* Nothing in flight any more: the launches recorded meanwhile go to the queue now,
	 * before the callbacks run. A launch reads `completed` under this lock, and it was
	 * raised before the lock was taken, so either that launch submitted by itself or
	 * its batch is seen here: none is left behind. */
	if (ln->open_n && atomic_load(&ln->completed) >= ln->submitted)
		vkb_lane_flush(ln);
	odx__lane_pop(&ln->lane);
	vkb_lane_recycle_cmd(ln, p->cmd);
	if (p->staging)
		vkb_staging_put(ln, p->staging);
	pthread_mutex_unlock(&ln->lane.lock);
	free(p);
	/* No lock held: the core may queue more work from inside its callback. */
	if (done)
		done(done_arg, status, status ? msg : NULL);
	pthread_mutex_lock(&ln->lane.lock);
	/* Cleared after the callback: callbacks stay in order whoever runs them. */
	ln->retiring = false;
	if (ln->retire_wait)
		odx__lane_wake(&ln->lane);
}

static void *vkb_completion_main(void *arg)
{
	vkb_lane *ln = arg;
	vkb_pending *p;

	pthread_mutex_lock(&ln->lane.lock);
	for (;;) {
		/* A batch is open only while a submission is in flight, and its retirement below
		 * flushes it; but when that submission failed (`completed` not raised), the batch
		 * is still open once the list drains, and nothing else would submit it. */
		if (!ln->lane.head && ln->open_n)
			vkb_lane_flush(ln);
		while (ln->driven && !ln->lane.stop) {
			uint64_t seen = ln->caller_retired;
			struct timespec ts;

			if (ln->driven_ns < VKB_DRIVEN_NS)
				ln->driven_ns = VKB_DRIVEN_NS;
			odx__lane_deadline(&ts, ln->driven_ns);
			ln->driven_sleep = true;
			pthread_cond_timedwait(&ln->lane.cond, &ln->lane.lock, &ts);
			ln->driven_sleep = false;
			/* Nobody retired anything meanwhile: this thread takes over again. */
			if (ln->caller_retired == seen && !ln->retiring) {
				ln->driven = false;
				ln->driven_ns = VKB_DRIVEN_NS;
			} else if (ln->driven_ns < VKB_DRIVEN_MAX_NS) {
				ln->driven_ns *= 2;
			}
		}
		for (int ahead = 0, failed = 0; !ln->lane.head && !ln->lane.stop;) {
			uint64_t reached = atomic_load(&ln->completed), next;
			VkResult r;

			/* A submission without an entry of its own (the empty one that woke this
			 * thread, a synchronous fill) leaves `completed` behind `submitted`, and
			 * launches meanwhile go into the open batch: reach it, then submit that. */
			if (ln->open_n && reached >= ln->submitted) {
				vkb_lane_flush(ln);
				continue;
			}
			/* Asleep only with nothing in flight: then a launch submits by itself and
			 * signals `cond` (vkb_lane_push). */
			if ((ahead >= VKB_AHEAD_ROUNDS && reached >= ln->submitted && !ln->open_n) ||
			    failed) {
				pthread_cond_wait(&ln->lane.cond, &ln->lane.lock);
				continue;
			}
			/* The value in flight, else the next one: waiting for a value before it is
			 * submitted is allowed for timeline semaphores, and the next submission
			 * signals exactly that one. */
			next = reached < ln->submitted ? ln->submitted : ln->submitted + 1;
			ln->waiting_ahead = next;
			pthread_mutex_unlock(&ln->lane.lock);
			r = vkb_timeline_wait(ln, next, VKB_AHEAD_NS);
			pthread_mutex_lock(&ln->lane.lock);
			ln->waiting_ahead = 0;
			if (r == VK_SUCCESS) {
				while (reached < next &&
				       !atomic_compare_exchange_weak(&ln->completed, &reached, next))
					;
				ahead = 0;
			} else if (r == VK_TIMEOUT) {
				ahead++;
			} else {
				failed = 1; /* the entries' own waits will report it */
			}
		}
		p = ODX__LANE_ENTRY(ln->lane.head, vkb_pending, link);
		if (!p)
			break; /* stopping and drained */
		/* An application thread retires it (vkb_progress): it signals when done. */
		if (ln->retiring) {
			ln->retire_wait = true;
			pthread_cond_wait(&ln->lane.cond, &ln->lane.lock);
			ln->retire_wait = false;
			continue;
		}
		ln->retiring = true;
		ln->driven = false;
		ln->driven_ns = VKB_DRIVEN_NS;
		vkb_lane_retire(ln, p, true);
	}
	pthread_mutex_unlock(&ln->lane.lock);
	return NULL;
}

int vkb_lane_init(vkb_dev *d, vkb_lane *ln, const char *name, uint32_t family,
		  uint32_t index, pthread_mutex_t *queue_lock, char *msg, size_t msg_size)
{
	VkCommandPoolCreateInfo pci = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
		.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT |
			 VK_COMMAND_POOL_CREATE_TRANSIENT_BIT,
		.queueFamilyIndex = family,
	};
	VkSemaphoreTypeCreateInfo tci = {
		.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
		.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
		.initialValue = 0,
	};
	VkSemaphoreCreateInfo sci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO,
				     .pNext = &tci};
	char thread_name[16], what[32];
	int rc;

	ln->dev = d;
	ln->name = name;
	ln->family = family;
	ln->queue_lock = queue_lock;
	odx__lane_init(&ln->lane);
	d->fn.vkGetDeviceQueue(d->device, family, index, &ln->queue);
	rc = vkb_check(d->fn.vkCreateCommandPool(d->device, &pci, NULL, &ln->pool),
		       "vkCreateCommandPool", msg, msg_size);
	if (rc)
		return rc;
	rc = vkb_check(d->fn.vkCreateSemaphore(d->device, &sci, NULL, &ln->timeline),
		       "vkCreateSemaphore", msg, msg_size);
	if (rc)
		return rc;
	snprintf(thread_name, sizeof(thread_name), "odx-vk%d-%s", d->odx_device, name);
	snprintf(what, sizeof(what), "%s completion", name);
	return odx__lane_start(&ln->lane, vkb_completion_main, ln, thread_name, what, msg,
			       msg_size);
}

/* Stops the completion thread once everything queued has completed, then frees the lane. */
void vkb_lane_fini(vkb_dev *d, vkb_lane *ln)
{
	odx__lane_stop(&ln->lane);
	while (ln->free_staging) {
		vkb_staging *s = ln->free_staging;

		ln->free_staging = s->next;
		vkb_buffer_destroy(d, &s->m);
		free(s);
	}
	free(ln->free_cmds);
	if (ln->pool)
		d->fn.vkDestroyCommandPool(d->device, ln->pool, NULL);
	if (ln->timeline)
		d->fn.vkDestroySemaphore(d->device, ln->timeline, NULL);
	if (ln->dev)
		odx__lane_fini(&ln->lane);
}

/* Submits `cmd` on a lane and waits for it: only for the rare synchronous paths (zero fill). */
int vkb_run_sync(vkb_lane *ln, VkCommandBuffer cmd, char *msg, size_t msg_size)
{
	vkb_pending *p = calloc(1, sizeof(*p));
	uint64_t value;
	int rc;

	if (!p) {
		snprintf(msg, msg_size, "out of memory");
		return ODX_ENOMEM;
	}
	rc = vkb_lane_submit(ln, cmd, p, msg, msg_size);
	if (rc) {
		free(p);
		return rc;
	}
	value = ln->submitted;
	pthread_mutex_unlock(&ln->lane.lock);
	rc = vkb_lane_wait(ln, value, msg, msg_size);
	pthread_mutex_lock(&ln->lane.lock);
	return rc;
}

/*
 * ABI 1.4 progress: an application thread waiting for this device waits on the lanes' timelines
 * itself (any of them) and retires what completed, so the driver wakes the waiting thread
 * directly instead of the completion thread, which would then have to wake it.
 */
int vkb_progress(void *bdev, uint64_t timeout_ns)
{
	vkb_dev *d = bdev;
	vkb_lane *lanes[2] = {&d->compute, &d->copy}, *mine[2];
	VkSemaphore sems[2];
	uint64_t values[2];
	VkSemaphoreWaitInfo wi = {
		.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO,
		.flags = VK_SEMAPHORE_WAIT_ANY_BIT,
		.pSemaphores = sems,
		.pValues = values,
	};
	int i, n = 0, ran = 0;
	VkResult r;

	/* Take the head of each lane that nobody retires now. */
	for (i = 0; i < 2; i++) {
		vkb_lane *ln = lanes[i];

		pthread_mutex_lock(&ln->lane.lock);
		vkb_pending *head = ODX__LANE_ENTRY(ln->lane.head, vkb_pending, link);

		if (head && !ln->lane.stop && !ln->retiring) {
			ln->retiring = true;
			mine[n] = ln;
			sems[n] = ln->timeline;
			values[n++] = head->status ? 0 : head->value;
		}
		pthread_mutex_unlock(&ln->lane.lock);
	}
	/* Nothing in flight, or the completion thread retires it now: it reports it. */
	if (n == 0)
		return 0;
	wi.semaphoreCount = (uint32_t)n;
	r = d->fn.vkWaitSemaphores(d->device, &wi, timeout_ns);
	for (i = 0; i < n; i++) {
		vkb_lane *ln = mine[i];
		vkb_pending *head = ODX__LANE_ENTRY(ln->lane.head, vkb_pending, link);
		uint64_t now = 0;

		if (r == VK_SUCCESS || r == VK_TIMEOUT)
			d->fn.vkGetSemaphoreCounterValue(d->device, ln->timeline, &now);
		pthread_mutex_lock(&ln->lane.lock);
		if (r != VK_SUCCESS && r != VK_TIMEOUT) {
			/* A lost device: the completion thread's own wait reports it. */
		} else if (head->status || now >= head->value) {
			uint_fast64_t seen = atomic_load(&ln->completed);

			while (seen < now && !atomic_compare_exchange_weak(&ln->completed, &seen, now))
				;
			vkb_lane_retire(ln, head, false);
			ln->driven = true;
			ln->caller_retired++;
			ran = 1;
			pthread_mutex_unlock(&ln->lane.lock);
			continue;
		}
		ln->retiring = false;
		if (ln->retire_wait)
			odx__lane_wake(&ln->lane);
		pthread_mutex_unlock(&ln->lane.lock);
	}
	return ran;
}
