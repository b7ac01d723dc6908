/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spill_engine.c - the I/O side of one spill space: the engines (io_uring, or pwrite/pread one
 * chunk at a time) and the I/O thread that cuts requests into chunks, keeps them in flight,
 * checksums and verifies them, and completes requests in order (see spill.c for the allocator and
 * the calls of spill.h, spill_internal.h for the state both share).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "spill_internal.h"

/* ---- engines ------------------------------------------------------------------------------ */

static void chunk_complete(odx__spill *s, struct chunk *c, ssize_t res);

static ssize_t sync_io(odx__spill *s, bool write, uint8_t *buf, size_t n, uint64_t off)
{
	size_t done = 0;

	while (done < n) {
		ssize_t r = write ? pwrite(s->fd, buf + done, n - done, (off_t)(off + done))
				  : pread(s->fd, buf + done, n - done, (off_t)(off + done));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break; /* end of file: chunk_complete reports it */
		done += (size_t)r;
	}
	return (ssize_t)done;
}

#ifdef ODX_HAVE_LIBURING
int odx__spill_uring_setup(odx__spill *s)
{
	return io_uring_queue_init(s->depth, &s->ring, 0);
}

void odx__spill_uring_teardown(odx__spill *s)
{
	if (s->uring)
		io_uring_queue_exit(&s->ring);
}

/* Queues the rest of a chunk; the ring has an entry for every chunk, so get_sqe cannot fail
 * unless the ring is in a state we never leave it in. */
static void uring_prep(odx__spill *s, struct chunk *c, bool write, uint64_t off)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);

	if (!sqe) {
		chunk_complete(s, c, -EBUSY);
		return;
	}
	if (write)
		io_uring_prep_write(sqe, s->fd, c->buf + c->done, (unsigned)(c->io_len - c->done),
				    off);
	else
		io_uring_prep_read(sqe, s->fd, c->buf + c->done, (unsigned)(c->io_len - c->done),
				   off);
	io_uring_sqe_set_data(sqe, c);
	if (!s->direct)
		/* Buffered I/O that misses the page cache would be retried by the ring after a
		 * readahead callback; going straight to the kernel's workers keeps each chunk one
		 * plain blocking read or write with normal readahead, and several in parallel. */
		io_uring_sqe_set_flags(sqe, IOSQE_ASYNC);
	s->kernel_inflight++;
	s->to_submit++;
}

static void uring_submit(odx__spill *s)
{
	if (s->to_submit) {
		int r;

		do
			r = io_uring_submit(&s->ring);
		while (r == -EINTR);
		s->to_submit = 0;
	}
}

/* Waits for one completion (when wait), then takes all that are there. */
static void uring_reap(odx__spill *s, bool wait)
{
	struct io_uring_cqe *cqe;
	int r;

	if (wait) {
		do
			r = io_uring_wait_cqe(&s->ring, &cqe);
		while (r == -EINTR);
		if (r < 0)
			return;
	}
	while (io_uring_peek_cqe(&s->ring, &cqe) == 0) {
		struct chunk *c = io_uring_cqe_get_data(cqe);
		ssize_t res = cqe->res;

		io_uring_cqe_seen(&s->ring, cqe);
		s->kernel_inflight--;
		chunk_complete(s, c, res);
	}
}
#else
int odx__spill_uring_setup(odx__spill *s)
{
	return -ENOSYS;
}

void odx__spill_uring_teardown(odx__spill *s)
{
}

static void uring_prep(odx__spill *s, struct chunk *c, bool write, uint64_t off)
{
	chunk_complete(s, c, -ENOSYS);
}

static void uring_submit(odx__spill *s)
{
}

static void uring_reap(odx__spill *s, bool wait)
{
}
#endif

/* (Re)issues the untransferred rest of a chunk. */
static void chunk_issue(odx__spill *s, struct chunk *c)
{
	struct req *r = c->r;
	bool write = r->kind == REQ_WRITE;
	uint64_t off = r->off + c->pos + c->done;

	if (r->fault_errno && c->pos + c->len == r->len) {
		chunk_complete(s, c, -r->fault_errno);
		return;
	}
	if (s->uring)
		uring_prep(s, c, write, off);
	else
		chunk_complete(s, c, sync_io(s, write, c->buf + c->done, c->io_len - c->done, off));
}

/* ---- requests (I/O thread) ---------------------------------------------------------------- */

static void req_fail(odx__spill *s, struct req *r, int code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void req_fail(odx__spill *s, struct req *r, int code, const char *fmt, ...)
{
	va_list ap;

	if (r->status)
		return; /* the first error is the one reported */
	r->status = code;
	va_start(ap, fmt);
	vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
	va_end(ap);
}

/*
 * One step of checksum work on a request: up to CRC_STEP bytes of the block at crc_pos, within
 * what is available (a read: the completed prefix; a write: all of it, src is the caller's).
 * Small steps let the I/O thread reap and reissue chunks between them, so the device never waits
 * for a whole block's checksum. A read compares at the end of each block; a write stores it.
 * Returns false when there is nothing to do now.
 */
static bool crc_step(odx__spill *s, struct req *r)
{
	size_t avail = r->kind == REQ_READ ? r->prefix : r->len;
	size_t bstart = r->crc_pos / s->block * s->block;
	size_t bend = bstart + s->block < r->len ? bstart + s->block : r->len;
	size_t n = (bend < avail ? bend : avail) - r->crc_pos;
	size_t b = bstart / s->block;

	if (r->status || r->crc_pos >= avail)
		return false;
	if (n > CRC_STEP)
		n = CRC_STEP;
	r->crc_run =
		(uint32_t)crc32_z(r->crc_pos == bstart ? 0 : r->crc_run, r->user + r->crc_pos, n);
	r->crc_pos += n;
	if (r->crc_pos < bend)
		return true;
	if (r->kind == REQ_WRITE)
		r->crc[b] = r->crc_run;
	else if (r->crc_run != r->crc[b])
		req_fail(s, r, ODX_ECORRUPT,
			 "spill file %s: slot %#" PRIx64 " block %zu (slot offset %zu, file offset "
			 "%" PRIu64
			 ", %zu bytes) failed its checksum: stored crc32 %08x, read back "
			 "%08x",
			 s->file, r->handle, b, bstart, r->off + bstart, bend - bstart, r->crc[b],
			 r->crc_run);
	return true;
}

static void chunk_complete(odx__spill *s, struct chunk *c, ssize_t res)
{
	struct req *r = c->r;
	const char *what = r->kind == REQ_WRITE ? "write" : "read";

	if (res < 0) {
		req_fail(s, r, odx_code((int)-res),
			 "spill file %s: %s of %zu bytes at offset %" PRIu64 " failed: %s", s->file,
			 what, c->io_len - c->done, r->off + c->pos + c->done, strerror((int)-res));
	} else if (res == 0 && c->done < c->io_len) {
		req_fail(s, r, ODX_EIO,
			 "spill file %s: %s of %zu bytes at offset %" PRIu64
			 " stopped at the end of the file",
			 s->file, what, c->io_len - c->done, r->off + c->pos + c->done);
	} else {
		c->done += (size_t)res;
		if (c->done < c->io_len && !r->status) {
			chunk_issue(s, c); /* short transfer: the rest */
			return;
		}
		if (r->kind == REQ_READ && c->buf == c->bounce && !r->status)
			memcpy(r->user + c->pos, c->bounce, c->len);
		r->window |= 1ull << ((c->pos - r->prefix) / s->chunk);
		while (r->window & 1) {
			r->window >>= 1;
			r->prefix = r->prefix + s->chunk < r->len ? r->prefix + s->chunk : r->len;
		}
	}
	r->inflight--;
	c->r = NULL;
	c->next_free = s->free_chunks;
	s->free_chunks = c;
}

/* Starts as many chunks as there are free ones, oldest request first. */
static void issue(odx__spill *s)
{
	for (struct req *r = s->active_head; r && s->free_chunks; r = r->next) {
		if (r->kind == REQ_WRITE && !r->reserved && r->len && !r->status && s->falloc &&
		    (r->reserved = true) && fallocate(s->fd, 0, (off_t)r->off, (off_t)r->alloc)) {
			/* Reserving the blocks first turns a full disk into one clean error before
			 * any byte is written, and spares O_DIRECT the extending-write path. */
			if (errno == EOPNOTSUPP)
				s->falloc = false;
			else
				req_fail(s, r, odx_code(errno),
					 "spill file %s: reserving %" PRIu64
					 " bytes at offset %" PRIu64 " failed: %s",
					 s->file, r->alloc, r->off, strerror(errno));
		}
		while (!r->status && r->issued < r->len && s->free_chunks &&
		       (r->issued - r->prefix) / s->chunk < WINDOW) {
			struct chunk *c = s->free_chunks;
			uint8_t *mem;

			s->free_chunks = c->next_free;
			c->r = r;
			c->pos = r->issued;
			c->len = r->len - r->issued < s->chunk ? r->len - r->issued : s->chunk;
			c->done = 0;
			c->io_len = c->len;
			mem = r->user + c->pos;
			c->buf = mem;
			if (s->direct && ((uintptr_t)mem % ALIGN || c->len % ALIGN)) {
				if (!c->bounce &&
				    posix_memalign((void **)&c->bounce, ALIGN, s->chunk)) {
					c->bounce = NULL;
					c->r = NULL;
					c->next_free = s->free_chunks;
					s->free_chunks = c;
					req_fail(
						s, r, ODX_ENOMEM,
						"spill file %s: no memory for a %zu-byte bounce buffer",
						s->file, s->chunk);
					break;
				}
				c->io_len = round_up(c->len, ALIGN);
				c->buf = c->bounce;
				if (r->kind == REQ_WRITE) {
					memcpy(c->bounce, mem, c->len);
					memset(c->bounce + c->len, 0, c->io_len - c->len);
				}
			}
			r->issued += c->len;
			r->inflight++;
			chunk_issue(s, c);
			if (!s->uring)
				return; /* one blocking chunk, then its checksum (see io_thread) */
		}
	}
	if (s->uring)
		uring_submit(s);
}

static void finish(odx__spill *s, struct req *r)
{
	struct slot *sl;
	bool release;

	if (r->kind == REQ_WRITE && !r->status) {
		if (r->fault_corrupt && r->len) {
			int code = 0;

			odx__spill_flip_byte(s, r->off + r->len / 2, r->msg, sizeof(r->msg), &code);
			if (code)
				r->status = code;
		}
	}
	pthread_mutex_lock(&s->lock);
	sl = &s->slots[r->index];
	sl->busy--;
	if (r->status) {
		s->stats.errors += r->status != ODX_ECANCELED;
		s->stats.corrupt += r->status == ODX_ECORRUPT;
	} else if (r->kind == REQ_WRITE) {
		s->stats.writes++;
		s->stats.bytes_written += r->len;
	} else {
		s->stats.reads++;
		s->stats.bytes_read += r->len;
	}
	if (r->kind == REQ_WRITE) {
		sl->state = r->status ? SLOT_RELEASING : SLOT_STORED;
		if (r->status)
			sl->gen++; /* the handle dies with the write */
	}
	release = !sl->busy && (sl->free_pending || sl->state == SLOT_RELEASING);
	if (release)
		odx__spill_slot_release(s, r->index);
	pthread_mutex_unlock(&s->lock);
	r->done(r->arg, r->status, r->status ? r->msg : NULL);
	free(r);
}

/* Completes finished requests, in order of completion rather than of arrival. */
static void sweep(odx__spill *s)
{
	struct req **pp = &s->active_head, *prev = NULL;

	while (*pp) {
		struct req *r = *pp;

		if (!r->inflight && (r->status || (r->issued == r->len && r->crc_pos == r->len))) {
			*pp = r->next;
			if (s->active_tail == r)
				s->active_tail = prev;
			finish(s, r);
			continue;
		}
		prev = r;
		pp = &r->next;
	}
}

/* One checksum step on the oldest request that has work; false if none has. */
static bool crc_work(odx__spill *s)
{
	for (struct req *r = s->active_head; r; r = r->next)
		if (crc_step(s, r))
			return true;
	return false;
}

void *odx__spill_io_thread(void *arg)
{
	odx__spill *s = arg;
	bool orphaned;

	pthread_setname_np(pthread_self(), "odx-spill");
	/* Writes past RLIMIT_FSIZE fail with EFBIG here (reported as ODX_ENOSPC), never kill. */
	odx__fsize_block_thread();
	for (;;) {
		struct req *cancel = NULL, *taken;

		pthread_mutex_lock(&s->lock);
		while (!s->queue_head && !s->closing && !s->active_head)
			pthread_cond_wait(&s->wake, &s->lock);
		taken = s->queue_head;
		s->queue_head = s->queue_tail = NULL;
		if (s->closing) {
			cancel = taken;
			taken = NULL;
		}
		pthread_mutex_unlock(&s->lock);
		if (taken) {
			if (s->active_tail)
				s->active_tail->next = taken;
			else
				s->active_head = taken;
			while (taken->next)
				taken = taken->next;
			s->active_tail = taken;
		}
		while (cancel) {
			struct req *r = cancel;

			cancel = r->next;
			req_fail(s, r, ODX_ECANCELED, "spill file %s: %s canceled by close",
				 s->file, r->kind == REQ_WRITE ? "write" : "read");
			finish(s, r);
		}
		if (!s->active_head) {
			if (s->closing)
				break;
			continue;
		}
		/* Keep the device busy first, then checksum in small steps, and sleep only when
		 * there is nothing to compute. */
		if (s->uring) {
			issue(s);
			if (s->kernel_inflight)
				uring_reap(s, false);
			if (!crc_work(s) && s->kernel_inflight)
				uring_reap(s, true);
		} else if (!crc_work(s)) {
			/* pread/pwrite block: alternate one chunk and its checksum. */
			issue(s);
		}
		sweep(s);
	}
	pthread_mutex_lock(&s->lock);
	s->thread_done = true;
	orphaned = s->orphaned;
	pthread_cond_signal(&s->exited);
	pthread_mutex_unlock(&s->lock);
	if (orphaned)
		odx__spill_destroy_orphan(s);
	return NULL;
}
