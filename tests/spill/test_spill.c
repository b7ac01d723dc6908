/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_spill.c - the disk tier's I/O engine (core/mem/spill.c): round trips, concurrency, capacity,
 * injected I/O failures, checksums, permissions and cleanup, on both engines and with direct I/O
 * on and off.
 *
 * Every spill space is opened under a parent directory that the group setup creates and the
 * teardown removes with rmdir, which fails if any spill space left something behind. Tests that
 * need io_uring or O_DIRECT and do not get it say so and skip; a fallback is never counted as
 * the real thing. Every wait has a timeout.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "odx/odx.h"
#include "mem/spill.h"

#define WAIT_MS 60000
#define MIB (1024u * 1024u)
#define TMPFS_MAGIC_NUMBER 0x01021994

static char parent[256];

/* One request's completion. */
struct completion {
	bool done;
	int status;
	char msg[512];
};

static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cv = PTHREAD_COND_INITIALIZER;

static void on_done(void *arg, int status, const char *msg)
{
	struct completion *c = arg;

	pthread_mutex_lock(&done_lock);
	c->status = status;
	snprintf(c->msg, sizeof(c->msg), "%s", msg ? msg : "");
	c->done = true;
	pthread_cond_broadcast(&done_cv);
	pthread_mutex_unlock(&done_lock);
}

/* Waits for n completions, failing the test after WAIT_MS. */
static void wait_all(struct completion *c, size_t n)
{
	struct timespec deadline;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += WAIT_MS / 1000;
	pthread_mutex_lock(&done_lock);
	for (size_t i = 0; i < n; i++) {
		while (!c[i].done) {
			if (pthread_cond_timedwait(&done_cv, &done_lock, &deadline) == ETIMEDOUT) {
				pthread_mutex_unlock(&done_lock);
				fail_msg("request %zu of %zu did not complete within %d ms", i, n,
					 WAIT_MS);
			}
		}
	}
	pthread_mutex_unlock(&done_lock);
}

static int write_wait(odx__spill *s, const void *src, size_t len, uint64_t *slot,
		      struct completion *c)
{
	int rc;

	*c = (struct completion){0};
	rc = odx__spill_write(s, src, len, slot, on_done, c);
	if (rc)
		return rc;
	wait_all(c, 1);
	return c->status;
}

static int read_wait(odx__spill *s, uint64_t slot, void *dst, size_t len, struct completion *c)
{
	int rc;

	*c = (struct completion){0};
	rc = odx__spill_read(s, slot, dst, len, on_done, c);
	if (rc)
		return rc;
	wait_all(c, 1);
	return c->status;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;

	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

/* ---- configurations -------------------------------------------------------------------- */

struct config {
	const char *name;
	int engine, direct;
};

static const struct config pread_buffered = {"pread/pwrite, buffered", 0, 0};
static const struct config pread_direct = {"pread/pwrite, O_DIRECT", 0, 1};
static const struct config uring_buffered = {"io_uring, buffered", 1, 0};
static const struct config uring_direct = {"io_uring, O_DIRECT", 1, 1};

static void params_for(odx__spill_params *p, const struct config *cfg, uint64_t capacity)
{
	odx__spill_params_init(p);
	p->path = parent;
	p->capacity = capacity;
	p->engine = cfg->engine;
	p->direct = cfg->direct;
}

/* Opens a spill space with cfg exactly, or skips the test saying why. */
static odx__spill *open_or_skip(const struct config *cfg, uint64_t capacity, size_t block,
				const char *fault)
{
	odx__spill_params p;
	odx__spill_stats st;
	odx__spill *s = NULL;
	char err[512];
	int rc;

	params_for(&p, cfg, capacity);
	p.block_size = block;
	p.fault = fault;
	rc = odx__spill_open(&p, &s, err, sizeof(err));
	if (rc == ODX_EUNAVAIL) {
		print_message("[  SKIPPED ] %s not available here: %s\n", cfg->name, err);
		skip();
	}
	if (rc)
		fail_msg("odx__spill_open (%s): error %d: %s", cfg->name, rc, err);
	odx__spill_get_stats(s, &st);
	assert_int_equal(st.uring, cfg->engine == 1);
	assert_int_equal(st.direct, cfg->direct == 1);
	print_message("[   INFO   ] ran with %s (engine %s, direct %s) in %s\n", cfg->name,
		      st.uring ? "io_uring" : "pread/pwrite", st.direct ? "on" : "off", st.dir);
	return s;
}

/* ---- round trips ----------------------------------------------------------------------- */

static void round_trip(void **state)
{
	/* 0 is allowed: it takes no space and completes through done like any other size. */
	static const size_t sizes[] = {0, 1, 4095, 4096, MIB + 3, 64 * MIB};
	const struct config *cfg = *state;
	uint8_t *src_mem = malloc(64 * MIB + 4096 + 1), *dst_mem = malloc(64 * MIB + 4096 + 1);
	odx__spill *s;
	odx__spill_stats st;
	uint64_t total = 0;

	assert_non_null(src_mem);
	assert_non_null(dst_mem);
	s = open_or_skip(cfg, 256 * MIB, 0, NULL);
	for (int misalign = 0; misalign < 2; misalign++) {
		/* Page-aligned memory goes straight to the disk under O_DIRECT; memory one byte
		 * off goes through the bounce buffers. */
		uint8_t *src = (uint8_t *)(((uintptr_t)src_mem + 4095) / 4096 * 4096) + misalign;
		uint8_t *dst = (uint8_t *)(((uintptr_t)dst_mem + 4095) / 4096 * 4096) + misalign;

		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			struct completion c;
			uint64_t slot;

			fill(src, sizes[i], (uint32_t)(i + 1));
			memset(dst, 0xee, sizes[i] + 1);
			assert_int_equal(write_wait(s, src, sizes[i], &slot, &c), 0);
			assert_int_equal(read_wait(s, slot, dst, sizes[i], &c), 0);
			if (memcmp(src, dst, sizes[i]))
				fail_msg("%zu bytes (misaligned %d): data differs", sizes[i],
					 misalign);
			assert_int_equal(dst[sizes[i]], 0xee); /* nothing written past the end */
			odx__spill_free(s, slot);
			total += sizes[i];
		}
	}
	odx__spill_get_stats(s, &st);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.bytes_written, total);
	assert_int_equal(st.bytes_read, total);
	assert_int_equal(st.writes, 12);
	assert_int_equal(st.reads, 12);
	assert_int_equal(st.errors, 0);
	odx__spill_close(s);
	free(src_mem);
	free(dst_mem);
}

/* ---- concurrency ---------------------------------------------------------------------- */

#define BURST 48

static size_t burst_size(unsigned i)
{
	return (size_t)(i * 37 % 11) * 300001 + i * 4096 + 17 * (i % 3);
}

/* Many writes in flight at once, then many reads, then slots freed in a shuffled order while
 * the extent allocator reuses holes for a second round. */
static void concurrent_burst(void **state)
{
	const struct config *cfg = *state;
	static struct completion c[BURST];
	uint8_t *src[BURST], *dst[BURST];
	uint64_t slot[BURST];
	odx__spill_stats st;
	odx__spill *s = open_or_skip(cfg, 1024 * MIB, 64 * 1024, NULL);

	for (int round = 0; round < 2; round++) {
		for (unsigned i = 0; i < BURST; i++) {
			size_t n = burst_size(i + round);

			src[i] = malloc(n + 1);
			dst[i] = malloc(n + 1);
			assert_true(src[i] && dst[i]);
			fill(src[i], n, i * 7 + (unsigned)round);
			c[i] = (struct completion){0};
			assert_int_equal(odx__spill_write(s, src[i], n, &slot[i], on_done, &c[i]),
					 0);
		}
		wait_all(c, BURST);
		for (unsigned i = 0; i < BURST; i++) {
			if (c[i].status)
				fail_msg("write %u: %s", i, c[i].msg);
			c[i] = (struct completion){0};
			assert_int_equal(odx__spill_read(s, slot[i], dst[i], burst_size(i + round),
							 on_done, &c[i]),
					 0);
		}
		wait_all(c, BURST);
		for (unsigned i = 0; i < BURST; i++) {
			unsigned j = (i * 17 + 5) % BURST; /* a permutation: 17 is prime to 48 */

			if (c[j].status)
				fail_msg("read %u: %s", j, c[j].msg);
			assert_memory_equal(src[j], dst[j], burst_size(j + round));
			odx__spill_free(s, slot[j]);
			free(src[j]);
			free(dst[j]);
		}
	}
	odx__spill_get_stats(s, &st);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.writes, 2 * BURST);
	assert_int_equal(st.reads, 2 * BURST);
	odx__spill_close(s);
}

struct worker_arg {
	odx__spill *s;
	unsigned id;
	int failures;
};

/* Write, read back, compare and free in a loop, from several threads into one spill space. */
static void *worker(void *p)
{
	struct worker_arg *w = p;

	for (unsigned k = 0; k < 24; k++) {
		size_t n = (size_t)((w->id * 131 + k * 977) % 700) * 1031 + k;
		uint8_t *src = malloc(n + 1), *dst = malloc(n + 1);
		struct completion c;
		uint64_t slot;

		fill(src, n, w->id * 1000 + k);
		if (write_wait(w->s, src, n, &slot, &c) || read_wait(w->s, slot, dst, n, &c) ||
		    memcmp(src, dst, n))
			w->failures++;
		odx__spill_free(w->s, slot);
		free(src);
		free(dst);
	}
	return NULL;
}

static void concurrent_threads(void **state)
{
	const struct config *cfg = *state;
	odx__spill *s = open_or_skip(cfg, 256 * MIB, 4096, NULL);
	struct worker_arg w[6];
	pthread_t t[6];
	odx__spill_stats st;

	for (unsigned i = 0; i < 6; i++) {
		w[i] = (struct worker_arg){.s = s, .id = i};
		assert_int_equal(pthread_create(&t[i], NULL, worker, &w[i]), 0);
	}
	for (unsigned i = 0; i < 6; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(w[i].failures, 0);
	}
	odx__spill_get_stats(s, &st);
	assert_int_equal(st.used, 0);
	assert_int_equal(st.writes, 6 * 24);
	odx__spill_close(s);
}

/* ---- capacity -------------------------------------------------------------------------- */

static void capacity_refusal(void **state)
{
	uint8_t *buf = calloc(1, 8000);
	struct completion c;
	uint64_t a, b;
	odx__spill_stats st;
	odx__spill *s = open_or_skip(&pread_buffered, 10000, 0, NULL);
	const char *msg;

	assert_int_equal(write_wait(s, buf, 6000, &a, &c), 0);
	/* Synchronous refusal, done not called, both sizes in the message. */
	c = (struct completion){0};
	assert_int_equal(odx__spill_write(s, buf, 4001, &b, on_done, &c), ODX_ENOSPC);
	msg = odx__spill_last_error();
	print_message("[   INFO   ] refusal: %s\n", msg);
	assert_non_null(strstr(msg, "4001 bytes"));
	assert_non_null(strstr(msg, "10000"));
	assert_non_null(strstr(msg, "6000"));
	assert_false(c.done);
	/* What fits still fits: exactly the rest. */
	assert_int_equal(write_wait(s, buf, 4000, &b, &c), 0);
	odx__spill_get_stats(s, &st);
	assert_int_equal(st.used, 10000);
	assert_int_equal(st.capacity, 10000);
	odx__spill_free(s, a);
	odx__spill_free(s, a); /* a stale handle is ignored */
	assert_int_equal(write_wait(s, buf, 6000, &a, &c), 0);
	odx__spill_free(s, a);
	odx__spill_free(s, b);
	odx__spill_get_stats(s, &st);
	assert_int_equal(st.used, 0);
	odx__spill_close(s);
	free(buf);
}

/* ---- injected failures ----------------------------------------------------------------- */

/* The second write fails (its last chunk, after earlier chunks landed): the slot is released,
 * the capacity comes back, the first slot is untouched, the message names file, offset and
 * errno text. */
static void injected_write_error(const struct config *cfg, const char *fault, int code,
				 const char *errtext)
{
	size_t n = 9 * MIB + 5;
	uint8_t *src = malloc(n), *dst = malloc(n);
	struct completion c;
	uint64_t a, b;
	odx__spill_stats st;
	odx__spill *s = open_or_skip(cfg, 20 * MIB, 0, fault);

	fill(src, n, 99);
	assert_int_equal(write_wait(s, src, n, &a, &c), 0);
	assert_int_equal(write_wait(s, src, n, &b, &c), code);
	print_message("[   INFO   ] injected: %s\n", c.msg);
	assert_non_null(strstr(c.msg, odx__spill_file_path(s)));
	assert_non_null(strstr(c.msg, "offset"));
	assert_non_null(strstr(c.msg, errtext));
	odx__spill_get_stats(s, &st);
	assert_int_equal(st.used, n);
	assert_int_equal(st.errors, 1);
	assert_int_equal(st.writes, 1);
	/* The failed slot is gone; the good one reads back intact. */
	assert_int_equal(odx__spill_read(s, b, dst, n, on_done, &c), ODX_ENOENT);
	assert_int_equal(read_wait(s, a, dst, n, &c), 0);
	assert_memory_equal(src, dst, n);
	/* Capacity restored: another write of the same size fits and succeeds. */
	assert_int_equal(write_wait(s, src, n, &b, &c), 0);
	assert_int_equal(read_wait(s, b, dst, n, &c), 0);
	assert_memory_equal(src, dst, n);
	odx__spill_free(s, a);
	odx__spill_free(s, b);
	odx__spill_close(s);
	free(src);
	free(dst);
}

static void write_eio(void **state)
{
	injected_write_error(*state, "write_eio=2", ODX_EIO, strerror(EIO));
}

static void write_enospc(void **state)
{
	injected_write_error(*state, "write_enospc=2", ODX_ENOSPC, strerror(ENOSPC));
}

static void read_eio(void **state)
{
	const struct config *cfg = *state;
	size_t n = 3 * MIB + 1;
	uint8_t *src = malloc(n), *dst = malloc(n);
	struct completion c;
	uint64_t a;
	odx__spill_stats st;
	odx__spill *s = open_or_skip(cfg, 20 * MIB, 0, "read_eio=1");

	fill(src, n, 5);
	assert_int_equal(write_wait(s, src, n, &a, &c), 0);
	assert_int_equal(read_wait(s, a, dst, n, &c), ODX_EIO);
	print_message("[   INFO   ] injected: %s\n", c.msg);
	assert_non_null(strstr(c.msg, odx__spill_file_path(s)));
	assert_non_null(strstr(c.msg, "read of"));
	assert_non_null(strstr(c.msg, strerror(EIO)));
	/* The slot is still there and the next read succeeds. */
	assert_int_equal(read_wait(s, a, dst, n, &c), 0);
	assert_memory_equal(src, dst, n);
	odx__spill_get_stats(s, &st);
	assert_int_equal(st.errors, 1);
	assert_int_equal(st.reads, 1);
	odx__spill_free(s, a);
	odx__spill_close(s);
	free(src);
	free(dst);
}

/* A flipped byte on disk is found by the block's checksum and reported, never as data. */
static void corruption(void **state)
{
	const struct config *cfg = *state;
	size_t n = 5 * 65536 + 100, where = 2 * 65536 + 777;
	uint8_t *src = malloc(n), *dst = malloc(n);
	struct completion c;
	uint64_t a, b;
	odx__spill_stats st;
	odx__spill *s = open_or_skip(cfg, 20 * MIB, 65536, "corrupt=3");
	char expect[128];

	fill(src, n, 11);
	assert_int_equal(write_wait(s, src, n, &a, &c), 0);
	assert_int_equal(write_wait(s, src, n, &b, &c), 0);
	assert_int_equal(odx__spill_corrupt_for_test(s, a, where), 0);
	assert_int_equal(odx__spill_corrupt_for_test(s, a, n), ODX_ERANGE);
	assert_int_equal(read_wait(s, a, dst, n, &c), ODX_ECORRUPT);
	print_message("[   INFO   ] detected: %s\n", c.msg);
	snprintf(expect, sizeof(expect), "slot %#llx block 2 (slot offset %u",
		 (unsigned long long)a, 2 * 65536);
	assert_non_null(strstr(c.msg, expect));
	assert_non_null(strstr(c.msg, odx__spill_file_path(s)));
	/* The other copy is fine. */
	assert_int_equal(read_wait(s, b, dst, n, &c), 0);
	assert_memory_equal(src, dst, n);
	/* The third write is corrupted by the injected fault: detected the same way. */
	odx__spill_free(s, b);
	assert_int_equal(write_wait(s, src, n, &b, &c), 0);
	assert_int_equal(read_wait(s, b, dst, n, &c), ODX_ECORRUPT);
	odx__spill_get_stats(s, &st);
	assert_int_equal(st.corrupt, 2);
	assert_int_equal(st.errors, 2);
	assert_int_equal(st.reads, 1);
	odx__spill_free(s, a);
	odx__spill_free(s, b);
	odx__spill_close(s);
	free(src);
	free(dst);
}

/* ---- files ----------------------------------------------------------------------------- */

static void modes_and_cleanup(void **state)
{
	odx__spill_params p;
	odx__spill_stats st;
	odx__spill *s;
	struct stat sb;
	char err[512];
	mode_t old = umask(0); /* permissive: the modes must not come from the umask */

	params_for(&p, &pread_buffered, MIB);
	assert_int_equal(odx__spill_open(&p, &s, err, sizeof(err)), 0);
	umask(old);
	odx__spill_get_stats(s, &st);
	assert_int_equal(stat(st.dir, &sb), 0);
	assert_true(S_ISDIR(sb.st_mode));
	assert_int_equal(sb.st_mode & 07777, 0700);
	assert_int_equal(sb.st_uid, getuid());
	assert_int_equal(stat(odx__spill_file_path(s), &sb), 0);
	assert_true(S_ISREG(sb.st_mode));
	assert_int_equal(sb.st_mode & 07777, 0600);
	assert_non_null(strstr(st.dir, parent));
	odx__spill_close(s);
	assert_int_equal(stat(st.dir, &sb), -1);
	assert_int_equal(errno, ENOENT);
}

/* Close with requests queued and in flight: every done is called once (success or
 * ODX_ECANCELED), and nothing is left on disk. */
static void close_with_pending(void **state)
{
	const struct config *cfg = *state;
	static struct completion c[64];
	size_t n = 2 * MIB;
	uint8_t *src = malloc(n);
	uint64_t slot;
	odx__spill_stats st;
	struct stat sb;
	int canceled = 0;
	odx__spill *s = open_or_skip(cfg, 512 * MIB, 0, NULL);

	fill(src, n, 3);
	for (int i = 0; i < 64; i++) {
		c[i] = (struct completion){0};
		assert_int_equal(odx__spill_write(s, src, n, &slot, on_done, &c[i]), 0);
	}
	odx__spill_get_stats(s, &st);
	odx__spill_close(s);
	for (int i = 0; i < 64; i++) {
		assert_true(c[i].done); /* close returned: all done, no wait needed */
		assert_true(c[i].status == 0 || c[i].status == ODX_ECANCELED);
		canceled += c[i].status == ODX_ECANCELED;
	}
	print_message("[   INFO   ] %d of 64 writes canceled by close\n", canceled);
	assert_int_equal(stat(st.dir, &sb), -1);
	free(src);
}

/* Free before the write completed: the release waits for it. */
static void free_while_writing(void **state)
{
	const struct config *cfg = *state;
	size_t n = 16 * MIB;
	uint8_t *src = malloc(n);
	struct completion c = {0};
	uint64_t slot;
	odx__spill_stats st;
	odx__spill *s = open_or_skip(cfg, n, 0, NULL);

	fill(src, n, 8);
	assert_int_equal(odx__spill_write(s, src, n, &slot, on_done, &c), 0);
	odx__spill_free(s, slot);
	wait_all(&c, 1);
	assert_int_equal(c.status, 0);
	odx__spill_get_stats(s, &st);
	assert_int_equal(st.used, 0);
	assert_int_equal(odx__spill_read(s, slot, src, n, on_done, &c), ODX_ENOENT);
	assert_int_equal(write_wait(s, src, n, &slot, &c), 0); /* all the capacity is back */
	odx__spill_close(s);
	free(src);
}

/* ---- direct I/O and engine selection ---------------------------------------------------- */

static bool is_tmpfs(const char *path)
{
	struct statfs f;

	return statfs(path, &f) == 0 && (unsigned long)f.f_type == TMPFS_MAGIC_NUMBER;
}

/* Whether this kernel's tmpfs takes O_DIRECT (Linux 6.6 and later do; older ones refuse it). */
static bool tmpfs_takes_direct(const char *dir)
{
	char file[300];
	int fd;

	snprintf(file, sizeof(file), "%s/probe", dir);
	fd = open(file, O_RDWR | O_CREAT | O_DIRECT, 0600);
	if (fd >= 0) {
		close(fd);
		unlink(file);
	}
	return fd >= 0;
}

/* direct=1 on tmpfs: refused with a clear error where tmpfs refuses O_DIRECT, used where the
 * kernel's tmpfs takes it. direct=-1 works either way and reports what it got. */
static void direct_on_tmpfs(void **state)
{
	char shm_parent[] = "/dev/shm/odx-test-spill-XXXXXX";
	odx__spill_params p;
	odx__spill_stats st;
	odx__spill *s = NULL;
	struct completion c;
	uint8_t buf[5000], back[5000];
	uint64_t slot;
	char err[512];
	bool takes;
	int rc;

	if (!is_tmpfs("/dev/shm") || !mkdtemp(shm_parent)) {
		print_message("[  SKIPPED ] no tmpfs at /dev/shm\n");
		skip();
	}
	takes = tmpfs_takes_direct(shm_parent);
	odx__spill_params_init(&p);
	p.path = shm_parent;
	p.capacity = MIB;
	p.direct = 1;
	rc = odx__spill_open(&p, &s, err, sizeof(err));
	if (takes) {
		print_message(
			"[   INFO   ] this kernel's tmpfs takes O_DIRECT (Linux >= 6.6): "
			"direct=1 opens; the refusal path is tested by direct_auto_fallback\n");
		assert_int_equal(rc, 0);
		odx__spill_get_stats(s, &st);
		assert_true(st.direct);
		odx__spill_close(s);
		s = NULL;
	} else {
		assert_int_equal(rc, ODX_EUNAVAIL);
		print_message("[   INFO   ] direct=1 on tmpfs: %s\n", err);
		assert_non_null(strstr(err, "O_DIRECT"));
		assert_non_null(strstr(err, shm_parent));
		assert_null(s);
	}
	/* Nothing left behind by the open, failed or closed. */
	assert_int_equal(rmdir(shm_parent), 0);
	assert_non_null(mkdtemp(strcpy(shm_parent, "/dev/shm/odx-test-spill-XXXXXX")));
	p.direct = -1;
	assert_int_equal(odx__spill_open(&p, &s, err, sizeof(err)), 0);
	odx__spill_get_stats(s, &st);
	assert_int_equal(st.direct, takes); /* what auto got is reported */
	fill(buf, sizeof(buf), 1);
	assert_int_equal(write_wait(s, buf, sizeof(buf), &slot, &c), 0);
	assert_int_equal(read_wait(s, slot, back, sizeof(back), &c), 0);
	assert_memory_equal(buf, back, sizeof(buf));
	odx__spill_close(s);
	assert_int_equal(rmdir(shm_parent), 0);
}

/* direct=-1 where the probe fails (injected, as tmpfs would) falls back and says so. */
static void direct_auto_fallback(void **state)
{
	odx__spill_params p;
	odx__spill_stats st;
	odx__spill *s;
	char err[512];

	params_for(&p, &pread_buffered, MIB);
	p.direct = -1;
	p.fault = "direct_probe=1";
	assert_int_equal(odx__spill_open(&p, &s, err, sizeof(err)), 0);
	odx__spill_get_stats(s, &st);
	assert_false(st.direct);
	odx__spill_close(s);
	p.direct = 1;
	assert_int_equal(odx__spill_open(&p, &s, err, sizeof(err)), ODX_EUNAVAIL);
	print_message("[   INFO   ] direct=1 where O_DIRECT is refused: %s\n", err);
	assert_non_null(strstr(err, "O_DIRECT"));
	assert_non_null(strstr(err, "Invalid argument"));
	assert_non_null(strstr(err, parent));
}

static void engine_fallback(void **state)
{
	odx__spill_params p;
	odx__spill_stats st;
	odx__spill *s;
	char err[512];

	params_for(&p, &pread_buffered, MIB);
	p.engine = -1;
	p.fault = "uring_init=1";
	assert_int_equal(odx__spill_open(&p, &s, err, sizeof(err)), 0);
	odx__spill_get_stats(s, &st);
	assert_false(st.uring); /* fell back, and says so */
	odx__spill_close(s);
	p.engine = 1;
	assert_int_equal(odx__spill_open(&p, &s, err, sizeof(err)), ODX_EUNAVAIL);
	print_message("[   INFO   ] engine=1 without io_uring: %s\n", err);
	assert_non_null(strstr(err, "io_uring"));
	/* And what auto picks here without faults, for the log. */
	p.engine = -1;
	p.fault = NULL;
	assert_int_equal(odx__spill_open(&p, &s, err, sizeof(err)), 0);
	odx__spill_get_stats(s, &st);
	print_message("[   INFO   ] engine=-1 picks %s here\n",
		      st.uring ? "io_uring" : "pread/pwrite");
	odx__spill_close(s);
}

static void bad_params(void **state)
{
	odx__spill_params p;
	odx__spill *s = NULL;
	char err[512];

	params_for(&p, &pread_buffered, MIB);
	p.block_size = 1000;
	assert_int_equal(odx__spill_open(&p, &s, err, sizeof(err)), ODX_EINVAL);
	assert_non_null(strstr(err, "block_size 1000"));
	p.block_size = 0;
	p.fault = "write_eio=0";
	assert_int_equal(odx__spill_open(&p, &s, err, sizeof(err)), ODX_EINVAL);
	p.fault = "bogus=1";
	assert_int_equal(odx__spill_open(&p, &s, err, sizeof(err)), ODX_EINVAL);
	assert_non_null(strstr(err, "bogus=1"));
	p.fault = NULL;
	p.path = "/nonexistent/odx-spill-parent";
	assert_int_equal(odx__spill_open(&p, &s, err, sizeof(err)), ODX_ENOENT);
	assert_non_null(strstr(err, "/nonexistent/odx-spill-parent"));
	assert_null(s);
}

/* ---- main ------------------------------------------------------------------------------- */

static int make_parent(void **state)
{
	const char *base = getenv("TMPDIR");

	if (!base || !*base)
		base = "/var/tmp"; /* usually a disk, so O_DIRECT can be tested */
	snprintf(parent, sizeof(parent), "%s/odx-test-spill-XXXXXX", base);
	return mkdtemp(parent) ? 0 : -1;
}

/* rmdir fails if any spill space left a file or a directory behind. */
static int remove_parent(void **state)
{
	if (rmdir(parent)) {
		fprintf(stderr, "test_spill: %s not empty after all closes: %s\n", parent,
			strerror(errno));
		return -1;
	}
	return 0;
}

#define PER_CONFIG(fn)                                                                             \
	cmocka_unit_test_prestate(fn, (void *)&pread_buffered),                                    \
		cmocka_unit_test_prestate(fn, (void *)&pread_direct),                              \
		cmocka_unit_test_prestate(fn, (void *)&uring_buffered),                            \
		cmocka_unit_test_prestate(fn, (void *)&uring_direct)

int main(void)
{
	const struct CMUnitTest tests[] = {
		PER_CONFIG(round_trip),
		PER_CONFIG(concurrent_burst),
		PER_CONFIG(concurrent_threads),
		cmocka_unit_test(capacity_refusal),
		PER_CONFIG(write_eio),
		PER_CONFIG(write_enospc),
		PER_CONFIG(read_eio),
		PER_CONFIG(corruption),
		cmocka_unit_test(modes_and_cleanup),
		PER_CONFIG(close_with_pending),
		PER_CONFIG(free_while_writing),
		cmocka_unit_test(direct_on_tmpfs),
		cmocka_unit_test(direct_auto_fallback),
		cmocka_unit_test(engine_fallback),
		cmocka_unit_test(bad_params),
	};

	return cmocka_run_group_tests_name("spill", tests, make_parent, remove_parent);
}
