/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spill_io.c - disk-tier throughput: the same bytes written then read back through a spill space
 * (core/mem/spill.c: extents, crc32 per block, its I/O thread) and through a raw sequential
 * pwrite/pread loop, to the same directory, in one run.
 *
 * Fairness: both sides use the same request size, the same source memory and the same
 * directory; in "direct" mode both use O_DIRECT; in "buffered" mode both end the write phase with
 * fdatasync (counted in the time) and drop the file's pages (posix_fadvise DONTNEED, not counted)
 * before reading, so reads come from the disk on both sides. Runs alternate raw and spill so
 * drift hits both, after one untimed warm-up round. Throughputs are medians of the repetitions;
 * "ratio" is the median of the per-round spill/raw ratios, with their min and max.
 *
 * Output: one JSON object per line and phase, with both throughputs and spill/raw.
 *   spill_io [-s bytes] [-r request bytes] [-n reps] [-q requests in flight] [-d dir]
 *            [-m direct|buffered|both]
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "odx/odx.h"
#include "spill.h"

#define MAX_REPS 15
#define WAIT_MS 300000

struct opts {
	size_t total, request;
	int reps;
	unsigned inflight;
	const char *dir;
	const char *mode;
};

/* The spill side's completions: a counter and the first error. */
struct tracker {
	pthread_mutex_t lock;
	pthread_cond_t cv;
	unsigned pending;
	int status;
	char msg[512];
};

static void on_done(void *arg, int status, const char *msg)
{
	struct tracker *t = arg;

	pthread_mutex_lock(&t->lock);
	if (status && !t->status) {
		t->status = status;
		snprintf(t->msg, sizeof(t->msg), "%s", msg);
	}
	t->pending--;
	pthread_cond_broadcast(&t->cv);
	pthread_mutex_unlock(&t->lock);
}

/* Waits until at most `most` requests are pending; exits on timeout. */
static void wait_pending(struct tracker *t, unsigned most)
{
	struct timespec deadline;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += WAIT_MS / 1000;
	pthread_mutex_lock(&t->lock);
	while (t->pending > most) {
		if (pthread_cond_timedwait(&t->cv, &t->lock, &deadline) == ETIMEDOUT) {
			fprintf(stderr, "spill_io: requests did not complete within %d ms\n",
				WAIT_MS);
			exit(1);
		}
	}
	pthread_mutex_unlock(&t->lock);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "spill_io: %s: %s\n", what, detail);
	exit(1);
}

/* Makes sure the data is on the disk, and (buffered) that no page of it stays cached. */
static void settle(const char *file, bool drop)
{
	int fd = open(file, O_RDONLY);

	if (fd < 0)
		die(file, strerror(errno));
	if (fdatasync(fd))
		die("fdatasync", strerror(errno));
	if (drop)
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
}

/* ---- raw side --------------------------------------------------------------------------- */

static void run_raw(const struct opts *o, bool direct, uint8_t *src, uint8_t *dst, double *w_s,
		    double *r_s)
{
	char dir[300], file[320];
	double t0;
	int fd;

	snprintf(dir, sizeof(dir), "%s/odx-bench-raw-XXXXXX", o->dir);
	if (!mkdtemp(dir))
		die(dir, strerror(errno));
	snprintf(file, sizeof(file), "%s/raw", dir);
	fd = open(file, O_RDWR | O_CREAT | O_EXCL | (direct ? O_DIRECT : 0), 0600);
	if (fd < 0)
		die(file, strerror(errno));
	t0 = now_s();
	for (size_t off = 0; off < o->total; off += o->request) {
		size_t n = o->total - off < o->request ? o->total - off : o->request;

		if (pwrite(fd, src + off, n, (off_t)off) != (ssize_t)n)
			die("raw pwrite", strerror(errno));
	}
	if (fdatasync(fd))
		die("raw fdatasync", strerror(errno));
	*w_s = now_s() - t0;
	if (!direct)
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	t0 = now_s();
	for (size_t off = 0; off < o->total; off += o->request) {
		size_t n = o->total - off < o->request ? o->total - off : o->request;

		if (pread(fd, dst + off, n, (off_t)off) != (ssize_t)n)
			die("raw pread", strerror(errno));
	}
	*r_s = now_s() - t0;
	close(fd);
	unlink(file);
	rmdir(dir);
}

/* ---- spill side ------------------------------------------------------------------------- */

static void run_spill(const struct opts *o, bool direct, int engine, uint8_t *src, uint8_t *dst,
		      double *w_s, double *r_s, bool *uring)
{
	size_t nreq = (o->total + o->request - 1) / o->request;
	uint64_t *slots = calloc(nreq, sizeof(*slots));
	struct tracker t = {.lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
	odx__spill_params p;
	odx__spill_stats st;
	odx__spill *s;
	char err[512];
	double t0;
	int rc;

	odx__spill_params_init(&p);
	p.path = o->dir;
	p.capacity = o->total;
	p.direct = direct;
	p.engine = engine;
	rc = odx__spill_open(&p, &s, err, sizeof(err));
	if (rc)
		die("odx__spill_open", err);
	odx__spill_get_stats(s, &st);
	*uring = st.uring;
	t0 = now_s();
	for (size_t i = 0; i < nreq; i++) {
		size_t off = i * o->request,
		       n = o->total - off < o->request ? o->total - off : o->request;

		wait_pending(&t, o->inflight - 1);
		pthread_mutex_lock(&t.lock);
		t.pending++;
		pthread_mutex_unlock(&t.lock);
		rc = odx__spill_write(s, src + off, n, &slots[i], on_done, &t);
		if (rc)
			die("odx__spill_write", odx__spill_last_error());
	}
	wait_pending(&t, 0);
	settle(odx__spill_file_path(s), false);
	*w_s = now_s() - t0;
	if (t.status)
		die("spill write", t.msg);
	if (!direct)
		settle(odx__spill_file_path(s), true);
	t0 = now_s();
	for (size_t i = 0; i < nreq; i++) {
		size_t off = i * o->request,
		       n = o->total - off < o->request ? o->total - off : o->request;

		wait_pending(&t, o->inflight - 1);
		pthread_mutex_lock(&t.lock);
		t.pending++;
		pthread_mutex_unlock(&t.lock);
		rc = odx__spill_read(s, slots[i], dst + off, n, on_done, &t);
		if (rc)
			die("odx__spill_read", odx__spill_last_error());
	}
	wait_pending(&t, 0);
	*r_s = now_s() - t0;
	if (t.status)
		die("spill read", t.msg);
	for (size_t i = 0; i < nreq; i++)
		odx__spill_free(s, slots[i]);
	odx__spill_close(s);
	free(slots);
}

/* ---- main ------------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static const char *fs_name(const char *dir)
{
	struct statfs f;

	if (statfs(dir, &f))
		return "unknown";
	switch ((unsigned long)f.f_type) {
	case 0xEF53:
		return "ext4";
	case 0x58465342:
		return "xfs";
	case 0x9123683E:
		return "btrfs";
	case 0x01021994:
		return "tmpfs";
	case 0x794C7630:
		return "overlayfs";
	case 0x6969:
		return "nfs";
	default:
		return "other";
	}
}

static void check(const char *who, const uint8_t *src, uint8_t *dst, size_t n)
{
	if (memcmp(src, dst, n))
		die(who, "data read back differs from what was written");
	memset(dst, 0, n);
}

static void run_mode(const struct opts *o, bool direct, uint8_t *src, uint8_t *dst)
{
	/* engines: auto (io_uring where it works), then pread/pwrite */
	static const int engines[2] = {-1, 0};
	double raw_w[MAX_REPS], raw_r[MAX_REPS], sp_w[2][MAX_REPS], sp_r[2][MAX_REPS];
	bool uring[2] = {false, false};
	double gib = (double)o->total / (1u << 30);

	/* Rep -1 is the untimed warm-up; it also checks the bytes read back on both sides. */
	for (int rep = -1; rep < o->reps; rep++) {
		int k = rep < 0 ? 0 : rep;

		run_raw(o, direct, src, dst, &raw_w[k], &raw_r[k]);
		if (rep < 0)
			check("raw", src, dst, o->total);
		for (int e = 0; e < 2; e++) {
			run_spill(o, direct, engines[e], src, dst, &sp_w[e][k], &sp_r[e][k],
				  &uring[e]);
			if (rep < 0)
				check("spill", src, dst, o->total);
		}
	}
	for (int e = 0; e < 2; e++) {
		if (e == 1 && !uring[0])
			break; /* auto already was pread/pwrite */
		for (int phase = 0; phase < 2; phase++) {
			double *raw_t = phase ? raw_r : raw_w, *sp_t = phase ? sp_r[e] : sp_w[e];
			double ratios[MAX_REPS], lo, hi, raw, sp;

			/* Per pair (same rep, run back to back), then the median pair. */
			for (int i = 0; i < o->reps; i++)
				ratios[i] = raw_t[i] / sp_t[i];
			raw = gib / median(raw_t, o->reps);
			sp = gib / median(sp_t, o->reps);
			lo = hi = ratios[0];
			for (int i = 1; i < o->reps; i++) {
				lo = ratios[i] < lo ? ratios[i] : lo;
				hi = ratios[i] > hi ? ratios[i] : hi;
			}

			printf("{\"bench\":\"spill_io\",\"fs\":\"%s\",\"mode\":\"%s\","
			       "\"engine\":\"%s\",\"phase\":\"%s\",\"bytes\":%zu,\"request\":%zu,"
			       "\"inflight\":%u,\"reps\":%d,\"raw_gib_s\":%.3f,\"spill_gib_s\":%.3f,"
			       "\"ratio\":%.3f,\"ratio_min\":%.3f,\"ratio_max\":%.3f}\n",
			       fs_name(o->dir), direct ? "direct" : "buffered",
			       uring[e] ? "io_uring" : "pread", phase ? "read" : "write", o->total,
			       o->request, o->inflight, o->reps, raw, sp, median(ratios, o->reps),
			       lo, hi);
			fflush(stdout);
		}
	}
}

int main(int argc, char **argv)
{
	struct opts o = {.total = 512u << 20, .request = 4u << 20, .reps = 5, .inflight = 8};
	uint8_t *src, *dst;
	int c;

	o.dir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/var/tmp";
	o.mode = "both";
	while ((c = getopt(argc, argv, "s:r:n:q:d:m:")) != -1) {
		switch (c) {
		case 's':
			o.total = strtoull(optarg, NULL, 0);
			break;
		case 'r':
			o.request = strtoull(optarg, NULL, 0);
			break;
		case 'n':
			o.reps = atoi(optarg);
			break;
		case 'q':
			o.inflight = (unsigned)atoi(optarg);
			break;
		case 'd':
			o.dir = optarg;
			break;
		case 'm':
			o.mode = optarg;
			break;
		default:
			fprintf(stderr, "usage: spill_io [-s bytes] [-r request] [-n reps] "
					"[-q inflight] [-d dir] [-m direct|buffered|both]\n");
			return 2;
		}
	}
	if (!o.total || !o.request || o.request % 4096 || o.reps < 1 || o.reps > MAX_REPS ||
	    !o.inflight) {
		fprintf(stderr,
			"spill_io: need bytes > 0, a request that is a multiple of 4096, "
			"1 to %d reps and inflight > 0\n",
			MAX_REPS);
		return 2;
	}
	/* Page-aligned memory, as the tier manager's staging buffers are, so O_DIRECT can go
	 * straight from it on both sides. */
	if (posix_memalign((void **)&src, 4096, o.total) ||
	    posix_memalign((void **)&dst, 4096, o.total))
		die("memory", strerror(ENOMEM));
	for (size_t i = 0; i < o.total / 8; i++) /* incompressible, and every page touched */
		((uint64_t *)src)[i] = (i + 1) * 0x9E3779B97F4A7C15ull ^ (i >> 7);
	memset(dst, 0, o.total);
	if (!strcmp(o.mode, "direct") || !strcmp(o.mode, "both"))
		run_mode(&o, true, src, dst);
	if (!strcmp(o.mode, "buffered") || !strcmp(o.mode, "both"))
		run_mode(&o, false, src, dst);
	free(src);
	free(dst);
	return 0;
}
