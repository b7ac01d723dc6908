/* SPDX-License-Identifier: Apache-2.0 */
/*
 * spill.c - the disk tier's I/O engine (see spill.h for the contract).
 *
 * One spill space = one private directory holding one spill file, one I/O thread, one capacity.
 *
 * Allocator: the file is carved into extents by address-ordered first fit over a sorted array of
 * free extents, coalesced on free, in units of 4 KiB (the O_DIRECT alignment). Spilled objects
 * are whole buffers: few (hundreds to thousands), large and of any size. First fit in address
 * order keeps fragmentation low for such a population and keeps the file compact; scanning a
 * few thousand extents costs nothing next to a disk write of megabytes. A buddy allocator would
 * waste up to half of every non-power-of-two buffer, and size classes suit many small objects,
 * which this tier never sees. Freed extents are hole-punched, so the disk space follows what is
 * live, not the high-water mark.
 *
 * I/O: a request (one slot's write or read) is cut into chunks; the I/O thread keeps up to
 * queue_depth chunks in flight with io_uring (several requests at once), or runs them one by one
 * with pwrite/pread. Checksums are computed and verified on the I/O thread while other chunks are
 * in flight. Under O_DIRECT, chunks whose memory or length is not 4 KiB aligned go through
 * aligned bounce buffers (one per chunk, allocated on first use).
 *
 * This file holds the allocator, the slots, fault injection, the file-size limit, opening and
 * closing a space and the calls of spill.h; the engines and the I/O thread are spill_engine.c.
 * Both work on one spill space's private state (spill_internal.h); spill.h is the whole contract
 * the rest of ODX sees.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "spill_internal.h"

/* A spill directory whose lock is free but whose pid runs (pid reuse, or its owner between mkdtemp
 * and flock) is left alone this many seconds after its last change. */
#define STALE_GRACE_S 60

static _Thread_local char last_error[MSG_MAX];

static const char *const fault_names[] = {"write_eio", "write_enospc", "read_eio",
					  "corrupt",   "uring_init",   "direct_probe"};

static void set_error(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void set_error(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static int fail_sync(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_sync(int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
	return code;
}

const char *odx__spill_last_error(void)
{
	return last_error;
}


/* ---- the file-size limit (RLIMIT_FSIZE, `ulimit -f`) ---------------------------------------- */

/*
 * A write, fallocate or ftruncate past RLIMIT_FSIZE sends SIGXFSZ to the calling thread, whose
 * default action kills the whole process. With SIGXFSZ blocked the call fails with EFBIG instead
 * (the signal stays pending on the thread). ODX's threads block it for good; a call made on an
 * application thread holds it back for its duration, and drops what the call raised before
 * unblocking, so the application never sees a signal caused by ODX.
 */
static void xfsz_set(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGXFSZ);
}

void odx__fsize_guard_begin(odx__fsize_guard *g)
{
	sigset_t xfsz;

	xfsz_set(&xfsz);
	g->was_blocked = true;
	if (pthread_sigmask(SIG_BLOCK, &xfsz, &g->old) == 0)
		g->was_blocked = sigismember(&g->old, SIGXFSZ) == 1;
}

void odx__fsize_guard_end(odx__fsize_guard *g)
{
	const struct timespec now = {0, 0};
	sigset_t xfsz;

	/* Blocked before: the caller's own choice, and any pending signal is theirs. */
	if (g->was_blocked)
		return;
	xfsz_set(&xfsz);
	while (sigtimedwait(&xfsz, NULL, &now) == SIGXFSZ)
		;
	pthread_sigmask(SIG_UNBLOCK, &xfsz, NULL);
}

void odx__fsize_block_thread(void)
{
	sigset_t xfsz;

	xfsz_set(&xfsz);
	pthread_sigmask(SIG_BLOCK, &xfsz, NULL);
}

uint64_t odx__fsize_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_FSIZE, &rl) || rl.rlim_cur == RLIM_INFINITY)
		return UINT64_MAX;
	return (uint64_t)rl.rlim_cur;
}


/* ---- fault injection ------------------------------------------------------------------------ */

/*
 * The one parser of the tier.disk.fault grammar: kind=N[,kind=N...], N >= 1, at most MAX_FAULTS
 * items. odx__spill_open uses it to fill its table, the configuration check (config.c, through
 * odx__spill_fault_check) to refuse a bad value at odx_open whether the disk tier is on or not.
 */
static int parse_faults(const char *spec, struct fault *out, unsigned *nout, char *err,
			size_t errlen)
{
	const char *p = spec;
	unsigned count = 0;

	while (p && *p) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		const char *eq = memchr(p, '=', n);
		unsigned k;
		char *num_end;
		unsigned long long nth;

		if (count == MAX_FAULTS) {
			set_error(err, errlen,
				  "spill fault spec '%s': more than %d items", spec, MAX_FAULTS);
			return ODX_EINVAL;
		}
		if (!eq)
			goto bad;
		for (k = 0; k < sizeof(fault_names) / sizeof(fault_names[0]); k++)
			if (strlen(fault_names[k]) == (size_t)(eq - p) &&
			    !strncmp(p, fault_names[k], (size_t)(eq - p)))
				break;
		if (k == sizeof(fault_names) / sizeof(fault_names[0]))
			goto bad;
		/* strtoull takes blanks and a sign before the digits: the grammar does not */
		if (eq[1] < '0' || eq[1] > '9')
			goto bad;
		errno = 0;
		nth = strtoull(eq + 1, &num_end, 10);
		if (errno || nth == 0 || num_end != p + n)
			goto bad;
		out[count++] = (struct fault){.kind = (enum fault_kind)k, .nth = nth};
		p = end ? end + 1 : NULL;
		continue;
bad:
		set_error(err, errlen,
			  "spill fault spec '%s': '%.*s' is not kind=N with N >= 1 (kinds: "
			  "write_eio, write_enospc, read_eio, corrupt, uring_init, direct_probe)",
			  spec, (int)n, p);
		return ODX_EINVAL;
	}
	*nout = count;
	return 0;
}

int odx__spill_fault_check(const char *spec, char *err, size_t errlen)
{
	struct fault table[MAX_FAULTS];
	unsigned n;

	return parse_faults(spec, table, &n, err, errlen);
}

static bool fault_hits(const odx__spill *s, enum fault_kind kind, uint64_t count)
{
	for (unsigned i = 0; i < s->nfaults; i++)
		if (s->faults[i].kind == kind && s->faults[i].nth == count)
			return true;
	return false;
}

/* ---- extent allocator (under lock) ------------------------------------------------------- */

static int extent_alloc(odx__spill *s, uint64_t len, uint64_t *off)
{
	for (size_t i = 0; i < s->next; i++) {
		struct extent *e = &s->ext[i];

		if (e->len < len)
			continue;
		*off = e->off;
		e->off += len;
		e->len -= len;
		if (!e->len) {
			memmove(e, e + 1, (s->next - i - 1) * sizeof(*e));
			s->next--;
		}
		return 0;
	}
	/* The last free extent, if it ends the file, is grown past the end instead of leaving it. */
	if (s->next && s->ext[s->next - 1].off + s->ext[s->next - 1].len == s->file_end) {
		*off = s->ext[--s->next].off;
		s->file_end = *off + len;
		return 0;
	}
	*off = s->file_end;
	s->file_end += len;
	return 0;
}

static int extent_free(odx__spill *s, uint64_t off, uint64_t len)
{
	size_t lo = 0, hi = s->next;

	while (lo < hi) { /* first extent after off */
		size_t mid = (lo + hi) / 2;

		if (s->ext[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0 && s->ext[lo - 1].off + s->ext[lo - 1].len == off) {
		s->ext[lo - 1].len += len;
		if (lo < s->next && s->ext[lo - 1].off + s->ext[lo - 1].len == s->ext[lo].off) {
			s->ext[lo - 1].len += s->ext[lo].len;
			memmove(&s->ext[lo], &s->ext[lo + 1],
				(s->next - lo - 1) * sizeof(s->ext[0]));
			s->next--;
		}
		lo--;
	} else if (lo < s->next && off + len == s->ext[lo].off) {
		s->ext[lo].off = off;
		s->ext[lo].len += len;
	} else {
		if (s->next == s->ext_cap) {
			size_t cap = s->ext_cap ? 2 * s->ext_cap : 64;
			struct extent *n = realloc(s->ext, cap * sizeof(*n));

			if (!n)
				return ODX_ENOMEM; /* the extent is lost to reuse, not to correctness */
			s->ext = n;
			s->ext_cap = cap;
		}
		memmove(&s->ext[lo + 1], &s->ext[lo], (s->next - lo) * sizeof(s->ext[0]));
		s->ext[lo] = (struct extent){off, len};
		s->next++;
	}
	/* A free extent at the end shortens the file's used range. */
	if (lo == s->next - 1 && s->ext[lo].off + s->ext[lo].len == s->file_end) {
		s->file_end = s->ext[lo].off;
		s->next--;
	}
	return 0;
}

/* ---- slots (under lock) ------------------------------------------------------------------- */

static uint64_t slot_handle(const odx__spill *s, uint32_t index)
{
	return (uint64_t)s->slots[index].gen << 32 | index;
}

static struct slot *slot_lookup(odx__spill *s, uint64_t handle, uint32_t *index)
{
	uint32_t i = (uint32_t)handle;

	if (i >= s->nslots || s->slots[i].gen != (uint32_t)(handle >> 32))
		return NULL;
	if (s->slots[i].state != SLOT_WRITING && s->slots[i].state != SLOT_STORED)
		return NULL;
	*index = i;
	return &s->slots[i];
}

static int slot_new(odx__spill *s, uint32_t *index)
{
	if (s->unused_head != UINT32_MAX) {
		*index = s->unused_head;
		s->unused_head = s->slots[*index].next_unused;
		return 0;
	}
	if (s->nslots == s->slots_cap) {
		uint32_t cap = s->slots_cap ? 2 * s->slots_cap : 64;
		struct slot *n;

		if (cap <= s->slots_cap)
			return ODX_ENOMEM;
		n = realloc(s->slots, cap * sizeof(*n));
		if (!n)
			return ODX_ENOMEM;
		s->slots = n;
		s->slots_cap = cap;
	}
	*index = s->nslots++;
	s->slots[*index] = (struct slot){.gen = 1};
	return 0;
}

/* Gives the slot's extent and capacity back. The caller punched the hole first, while the extent
 * still belonged to the slot, so no new write can land in it before the punch. */
static void slot_release_locked(odx__spill *s, uint32_t index)
{
	struct slot *sl = &s->slots[index];

	if (sl->alloc)
		extent_free(s, sl->off, sl->alloc);
	s->used -= sl->len;
	free(sl->crc);
	sl->crc = NULL;
	sl->state = SLOT_UNUSED;
	sl->free_pending = false;
	sl->gen++;
	if (!sl->gen)
		sl->gen = 1;
	sl->next_unused = s->unused_head;
	s->unused_head = index;
}

static void punch(odx__spill *s, uint64_t off, uint64_t len)
{
	if (s->punch && len &&
	    fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off, (off_t)len))
		s->punch = false; /* not supported here: the space is reused, just not given back */
}

/* Called with lock held, returns with it held; drops it around the punch. */
void odx__spill_slot_release(odx__spill *s, uint32_t index)
{
	uint64_t off = s->slots[index].off, alloc = s->slots[index].alloc;

	s->slots[index].state = SLOT_RELEASING;
	pthread_mutex_unlock(&s->lock);
	punch(s, off, alloc);
	pthread_mutex_lock(&s->lock);
	slot_release_locked(s, index);
}

/* ---- open / close ------------------------------------------------------------------------- */

void odx__spill_params_init(odx__spill_params *p)
{
	*p = (odx__spill_params){.direct = -1, .engine = -1};
}

/* Writes and reads back one aligned block with O_DIRECT: some filesystems take the flag at open
 * and refuse the I/O. Returns the direct descriptor, or -errno. */
static int probe_direct(odx__spill *s)
{
	odx__fsize_guard guard;
	void *buf;
	int fd, e = 0;

	if (fault_hits(s, F_DIRECT_PROBE, 1))
		return -EINVAL;
	fd = open(s->file, O_RDWR | O_DIRECT | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (posix_memalign(&buf, ALIGN, ALIGN)) {
		close(fd);
		return -ENOMEM;
	}
	memset(buf, 0x5a, ALIGN);
	/* Runs on the thread that opens the context: under a file-size limit below one block the
	 * probe fails (EFBIG, so buffered I/O is used) instead of raising SIGXFSZ. */
	odx__fsize_guard_begin(&guard);
	errno = 0;
	if (pwrite(fd, buf, ALIGN, 0) != (ssize_t)ALIGN ||
	    pread(fd, buf, ALIGN, 0) != (ssize_t)ALIGN)
		e = errno ? errno : EIO;
	free(buf);
	if (!e && ftruncate(fd, 0))
		e = errno;
	odx__fsize_guard_end(&guard);
	if (e) {
		close(fd);
		return -e;
	}
	return fd;
}

static void destroy(odx__spill *s)
{
	for (unsigned i = 0; s->chunks && i < s->depth; i++)
		free(s->chunks[i].bounce);
	free(s->chunks);
	for (uint32_t i = 0; i < s->nslots; i++)
		free(s->slots[i].crc);
	free(s->slots);
	free(s->ext);
	pthread_cond_destroy(&s->exited);
	pthread_cond_destroy(&s->wake);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

void odx__spill_destroy_orphan(odx__spill *s)
{
	odx__spill_uring_teardown(s);
	close(s->fd);
	destroy(s);
}

/*
 * Removes the spill directories that processes which died without closing (SIGKILL, a crash)
 * left under base. A directory is named odx-spill-PID-XXXXXX and its owner holds an exclusive
 * flock on it for as long as it lives (the kernel drops the lock when the process dies, however
 * it dies). A directory is stale when its lock can be taken and its pid is gone; when the pid runs
 * (it was reused, or its owner is between mkdtemp and flock) it must also be unchanged for
 * STALE_GRACE_S seconds. Directories of other users, of this process, older names without a pid
 * and anything holding more than the spill file are never touched. Returns how many went.
 */
static unsigned remove_stale(const char *base)
{
	unsigned removed = 0;
	struct dirent *e;
	DIR *d;

	d = opendir(base);
	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL) {
		struct stat st;
		int pid, end = 0, fd;
		bool alive;

		if (sscanf(e->d_name, "odx-spill-%d-%*[A-Za-z0-9]%n", &pid, &end) != 1 || !end ||
		    e->d_name[end] || pid <= 0 || pid == (int)getpid())
			continue;
		fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) || st.st_uid != geteuid() || flock(fd, LOCK_EX | LOCK_NB)) {
			close(fd); /* someone else's, or alive: its owner holds the lock */
			continue;
		}
		alive = kill(pid, 0) == 0 || errno == EPERM;
		if (alive && time(NULL) - st.st_mtime < STALE_GRACE_S) {
			close(fd);
			continue;
		}
		/* Only the file this code creates; rmdir then fails on anything else. */
		unlinkat(fd, "spill", 0);
		if (unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR) == 0)
			removed++;
		close(fd);
	}
	closedir(d);
	return removed;
}

int odx__spill_open(const odx__spill_params *p, odx__spill **out, char *err, size_t errlen)
{
	const char *base;
	pthread_condattr_t ca;
	odx__spill *s;
	int fd, rc;

	set_error(err, errlen, "%s", "");
	if (!p || !out) {
		set_error(err, errlen, "odx__spill_open: invalid argument '%s'", p ? "out" : "p");
		return ODX_EINVAL;
	}
	if ((p->block_size && p->block_size % ALIGN) || p->direct < -1 || p->direct > 1 ||
	    p->engine < -1 || p->engine > 1 || p->queue_depth > 256 || p->close_timeout_ms < 0) {
		set_error(
			err, errlen,
			"spill: invalid parameters (block_size %zu must be 0 or a multiple of %u; "
			"direct %d and engine %d -1, 0 or 1; queue_depth %u at most 256)",
			p->block_size, ALIGN, p->direct, p->engine, p->queue_depth);
		return ODX_EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		set_error(err, errlen, "spill: out of memory");
		return ODX_ENOMEM;
	}
	s->fd = s->dirfd = -1;
	s->block = p->block_size ? p->block_size : DEFAULT_BLOCK;
	s->capacity = s->stats.capacity = p->capacity;
	s->close_timeout_ms = p->close_timeout_ms ? p->close_timeout_ms : 10000;
	s->unused_head = UINT32_MAX;
	s->punch = s->falloc = true;
	rc = parse_faults(p->fault, s->faults, &s->nfaults, err, errlen);
	if (rc)
		goto out_free;

	base = p->path && *p->path ? p->path : getenv("TMPDIR");
	if (!base || !*base)
		base = "/var/tmp";
	s->stats.stale_removed = remove_stale(base);
	if ((size_t)snprintf(s->dir, sizeof(s->dir), "%s/odx-spill-%ld-XXXXXX", base,
			     (long)getpid()) >= sizeof(s->dir)) {
		set_error(err, errlen, "spill directory under '%s': path too long", base);
		rc = ODX_EINVAL;
		goto out_free;
	}
	if (!mkdtemp(s->dir)) {
		set_error(err, errlen, "spill: cannot create a private directory under '%s': %s",
			  base, strerror(errno));
		rc = odx_code(errno);
		goto out_free;
	}
	/* The lock says "alive" to remove_stale in other processes, until this one dies. */
	s->dirfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0 || flock(s->dirfd, LOCK_EX | LOCK_NB)) {
		set_error(err, errlen, "spill directory %s: cannot lock: %s", s->dir,
			  strerror(errno));
		rc = odx_code(errno);
		goto out_rmdir;
	}
	/* mkdtemp asks for 0700 but the umask may take bits away: set it exactly. */
	if (chmod(s->dir, 0700)) {
		set_error(err, errlen, "spill directory %s: chmod 0700: %s", s->dir,
			  strerror(errno));
		rc = odx_code(errno);
		goto out_rmdir;
	}
	snprintf(s->file, sizeof(s->file), "%s/spill", s->dir);
	fd = open(s->file, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || fchmod(fd, 0600)) {
		set_error(err, errlen, "spill file %s: cannot create: %s", s->file,
			  strerror(errno));
		rc = odx_code(errno);
		if (fd >= 0)
			close(fd);
		goto out_rmdir;
	}
	s->fd = fd;

	if (p->direct) {
		int dfd = probe_direct(s);

		if (dfd >= 0) {
			close(s->fd);
			s->fd = dfd;
			s->direct = true;
		} else if (p->direct == 1) {
			set_error(
				err, errlen,
				"spill: O_DIRECT was required (tier.disk.direct) but the filesystem "
				"of %s refuses it: %s (tmpfs before Linux 6.6 and some network "
				"filesystems do; set it to auto or off)",
				base, strerror(-dfd));
			rc = ODX_EUNAVAIL;
			goto out_unlink;
		}
	}

	s->depth = p->queue_depth ? p->queue_depth : 16;
	if (p->engine) {
		rc = fault_hits(s, F_URING_INIT, 1) ? -EPERM : odx__spill_uring_setup(s);
		if (!rc) {
			s->uring = true;
		} else if (p->engine == 1) {
			set_error(
				err, errlen,
				rc == -ENOSYS
					? "spill: io_uring was required but ODX was built without "
					  "liburing"
					: "spill: io_uring was required but io_uring_queue_init failed: "
					  "%s",
				strerror(-rc));
			rc = ODX_EUNAVAIL;
			goto out_unlink;
		}
	}
	if (!s->uring)
		s->depth = 1;
	s->chunk = s->uring ? URING_CHUNK : SYNC_CHUNK;
	s->chunks = calloc(s->depth, sizeof(*s->chunks));
	if (!s->chunks) {
		set_error(err, errlen, "spill: out of memory");
		rc = ODX_ENOMEM;
		goto out_ring;
	}
	for (unsigned i = 0; i < s->depth; i++) {
		s->chunks[i].next_free = s->free_chunks;
		s->free_chunks = &s->chunks[i];
	}
	s->stats.direct = s->direct;
	s->stats.uring = s->uring;
	snprintf(s->stats.dir, sizeof(s->stats.dir), "%s", s->dir);

	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->wake, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->exited, &ca);
	pthread_condattr_destroy(&ca);
	rc = pthread_create(&s->thread, NULL, odx__spill_io_thread, s);
	if (rc) {
		set_error(err, errlen, "spill: cannot start the I/O thread: %s", strerror(rc));
		rc = ODX_ENOMEM;
		pthread_cond_destroy(&s->exited);
		pthread_cond_destroy(&s->wake);
		pthread_mutex_destroy(&s->lock);
		goto out_chunks;
	}
	*out = s;
	return 0;

out_chunks:
	free(s->chunks);
out_ring:
	odx__spill_uring_teardown(s);
out_unlink:
	close(s->fd);
	unlink(s->file);
out_rmdir:
	rmdir(s->dir);
	if (s->dirfd >= 0)
		close(s->dirfd);
out_free:
	free(s);
	return rc;
}

void odx__spill_close(odx__spill *s)
{
	struct timespec deadline;
	bool done;

	if (!s)
		return;
	if (pthread_equal(pthread_self(), s->thread)) {
		fprintf(stderr,
			"odx: spill %s: odx__spill_close called from a done callback; "
			"ignored (it would wait for itself)\n",
			s->dir);
		return;
	}
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += s->close_timeout_ms / 1000;
	deadline.tv_nsec += (long)(s->close_timeout_ms % 1000) * 1000000;
	if (deadline.tv_nsec >= 1000000000) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&s->lock);
	s->closing = true;
	pthread_cond_signal(&s->wake);
	while (!s->thread_done)
		if (pthread_cond_timedwait(&s->exited, &s->lock, &deadline) == ETIMEDOUT)
			break;
	done = s->thread_done;
	if (!done) {
		/* A hung device: remove the names now, let the thread free the rest. */
		s->orphaned = true;
		pthread_detach(s->thread);
	}
	pthread_mutex_unlock(&s->lock);
	if (unlink(s->file))
		fprintf(stderr, "odx: spill file %s: cannot remove: %s\n", s->file,
			strerror(errno));
	if (rmdir(s->dir))
		fprintf(stderr, "odx: spill directory %s: cannot remove: %s\n", s->dir,
			strerror(errno));
	close(s->dirfd); /* the lock goes with it, after the names */
	if (!done) {
		fprintf(stderr,
			"odx: spill %s: I/O still in flight after %d ms at close; the I/O thread "
			"will free the spill space when it returns\n",
			s->dir, s->close_timeout_ms);
		return;
	}
	pthread_join(s->thread, NULL);
	odx__spill_uring_teardown(s);
	close(s->fd);
	destroy(s);
}

/* ---- requests ------------------------------------------------------------------------------ */

static void enqueue(odx__spill *s, struct req *r)
{
	r->next = NULL;
	if (s->queue_tail)
		s->queue_tail->next = r;
	else
		s->queue_head = r;
	s->queue_tail = r;
	pthread_cond_signal(&s->wake);
}

int odx__spill_write(odx__spill *s, const void *src, size_t len, uint64_t *slot,
		     odx__spill_done_fn done, void *arg)
{
	uint64_t off = 0, alloc, limit;
	size_t nblocks;
	uint32_t index;
	struct req *r;
	uint32_t *crc = NULL;
	int rc;

	last_error[0] = '\0';
	if (!s || (!src && len) || !slot || !done)
		return fail_sync(ODX_EINVAL, "odx__spill_write: invalid argument '%s'",
				 !s	 ? "s"
				 : !slot ? "slot"
				 : !done ? "done"
					 : "src");
	nblocks = (len + s->block - 1) / s->block;
	r = calloc(1, sizeof(*r));
	if (nblocks)
		crc = malloc(nblocks * sizeof(*crc));
	if (!r || (nblocks && !crc)) {
		free(r);
		free(crc);
		return fail_sync(ODX_ENOMEM, "spill %s: no memory for a %zu-byte write request",
				 s->dir, len);
	}
	pthread_mutex_lock(&s->lock);
	if (s->closing) {
		rc = fail_sync(ODX_ECLOSED, "spill %s: closing", s->dir);
		goto out_unlock;
	}
	if (len > s->capacity - s->used) {
		rc = fail_sync(ODX_ENOSPC,
			       "spill %s: %zu bytes do not fit: %" PRIu64
			       " of the capacity of %" PRIu64 " bytes are in use, %" PRIu64 " free",
			       s->dir, len, s->used, s->capacity, s->capacity - s->used);
		goto out_unlock;
	}
	alloc = round_up(len, ALIGN);
	if (len)
		extent_alloc(s, alloc, &off);
	/* Past the file-size limit the write would fail (EFBIG) or, on a thread that does not
	 * block SIGXFSZ, kill the process: refuse it now, as a full disk tier. The limit is read
	 * each time because the application may change it. */
	limit = odx__fsize_limit();
	if (len && off + alloc > limit) {
		extent_free(s, off, alloc);
		s->stats.fsize_limit = limit;
		s->stats.fsize_refusals++;
		rc = fail_sync(ODX_ENOSPC,
			       "spill %s: %zu bytes at offset %" PRIu64
			       " would take the spill file past this process's file-size limit "
			       "(RLIMIT_FSIZE, ulimit -f) of %" PRIu64 " bytes",
			       s->dir, len, off, limit);
		goto out_unlock;
	}
	rc = slot_new(s, &index);
	if (rc) {
		if (len)
			extent_free(s, off, alloc);
		fail_sync(rc, "spill %s: no memory for a slot", s->dir);
		goto out_unlock;
	}
	s->used += len;
	s->slots[index].len = len;
	s->slots[index].alloc = alloc;
	s->slots[index].off = off;
	s->slots[index].crc = crc;
	s->slots[index].state = SLOT_WRITING;
	s->slots[index].busy = 1;
	s->slots[index].free_pending = false;
	s->nwrites_submitted++;
	*r = (struct req){
		.kind = REQ_WRITE,
		.index = index,
		.handle = slot_handle(s, index),
		.user = (uint8_t *)src,
		.len = len,
		.off = s->slots[index].off,
		.alloc = s->slots[index].alloc,
		.crc = crc,
		.done = done,
		.arg = arg,
		.fault_errno = fault_hits(s, F_WRITE_EIO, s->nwrites_submitted)	     ? EIO
			       : fault_hits(s, F_WRITE_ENOSPC, s->nwrites_submitted) ? ENOSPC
										     : 0,
		.fault_corrupt = fault_hits(s, F_CORRUPT, s->nwrites_submitted),
	};
	*slot = r->handle;
	enqueue(s, r);
	pthread_mutex_unlock(&s->lock);
	return 0;

out_unlock:
	pthread_mutex_unlock(&s->lock);
	free(r);
	free(crc);
	return rc;
}

int odx__spill_read(odx__spill *s, uint64_t slot, void *dst, size_t len, odx__spill_done_fn done,
		    void *arg)
{
	struct slot *sl;
	uint32_t index;
	struct req *r;
	int rc;

	last_error[0] = '\0';
	if (!s || (!dst && len) || !done)
		return fail_sync(ODX_EINVAL, "odx__spill_read: invalid argument '%s'",
				 !s	 ? "s"
				 : !done ? "done"
					 : "dst");
	r = calloc(1, sizeof(*r));
	if (!r)
		return fail_sync(ODX_ENOMEM, "spill %s: no memory for a read request", s->dir);
	pthread_mutex_lock(&s->lock);
	if (s->closing) {
		rc = fail_sync(ODX_ECLOSED, "spill %s: closing", s->dir);
		goto out_unlock;
	}
	sl = slot_lookup(s, slot, &index);
	if (!sl) {
		rc = fail_sync(ODX_ENOENT,
			       "spill %s: no slot %#" PRIx64 " (never written or freed)", s->dir,
			       slot);
		goto out_unlock;
	}
	if (sl->state == SLOT_WRITING) {
		rc = fail_sync(ODX_EBUSY, "spill %s: slot %#" PRIx64 " is still being written",
			       s->dir, slot);
		goto out_unlock;
	}
	if (len != sl->len) {
		rc = fail_sync(ODX_EINVAL,
			       "spill %s: slot %#" PRIx64
			       " holds %zu bytes, a read of %zu was asked",
			       s->dir, slot, sl->len, len);
		goto out_unlock;
	}
	sl->busy++;
	s->nreads_submitted++;
	*r = (struct req){
		.kind = REQ_READ,
		.index = index,
		.handle = slot,
		.user = dst,
		.len = len,
		.off = sl->off,
		.alloc = sl->alloc,
		.crc = sl->crc,
		.done = done,
		.arg = arg,
		.fault_errno = fault_hits(s, F_READ_EIO, s->nreads_submitted) ? EIO : 0,
	};
	enqueue(s, r);
	pthread_mutex_unlock(&s->lock);
	return 0;

out_unlock:
	pthread_mutex_unlock(&s->lock);
	free(r);
	return rc;
}

void odx__spill_free(odx__spill *s, uint64_t slot)
{
	struct slot *sl;
	uint32_t index;

	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	sl = slot_lookup(s, slot, &index);
	if (sl) {
		if (sl->busy) {
			/* The handle dies now; the I/O thread releases after the last request. */
			sl->free_pending = true;
			sl->gen++;
		} else {
			odx__spill_slot_release(s, index);
		}
	}
	pthread_mutex_unlock(&s->lock);
}

void odx__spill_get_stats(odx__spill *s, odx__spill_stats *st)
{
	pthread_mutex_lock(&s->lock);
	*st = s->stats;
	st->used = s->used;
	pthread_mutex_unlock(&s->lock);
}

const char *odx__spill_file_path(const odx__spill *s)
{
	return s->file;
}

/* Flips one byte on disk through an aligned page, as O_DIRECT needs. */
void odx__spill_flip_byte(odx__spill *s, uint64_t pos, char *err, size_t errlen, int *code)
{
	uint64_t page = pos / ALIGN * ALIGN;
	uint8_t *buf;
	ssize_t n;

	if (posix_memalign((void **)&buf, ALIGN, ALIGN)) {
		*code = ODX_ENOMEM;
		set_error(err, errlen, "spill file %s: no memory to corrupt a byte", s->file);
		return;
	}
	n = pread(s->fd, buf, ALIGN, (off_t)page);
	if (n <= (ssize_t)(pos - page)) {
		*code = ODX_EIO;
		set_error(err, errlen, "spill file %s: read at offset %" PRIu64 " failed: %s",
			  s->file, page, n < 0 ? strerror(errno) : "end of file");
		goto out_free_buf;
	}
	buf[pos - page] ^= 0xff;
	if (pwrite(s->fd, buf, (size_t)n, (off_t)page) != n) {
		*code = ODX_EIO;
		set_error(err, errlen, "spill file %s: write at offset %" PRIu64 " failed: %s",
			  s->file, page, strerror(errno));
	}
out_free_buf:
	free(buf);
}

#ifdef ODX_SPILL_TEST_HOOKS
int odx__spill_corrupt_for_test(odx__spill *s, uint64_t slot, size_t offset)
{
	struct slot *sl;
	uint32_t index;
	uint64_t pos;
	int code = 0;

	last_error[0] = '\0';
	pthread_mutex_lock(&s->lock);
	sl = slot_lookup(s, slot, &index);
	if (!sl || sl->state != SLOT_STORED) {
		pthread_mutex_unlock(&s->lock);
		return fail_sync(ODX_ENOENT, "spill %s: no stored slot %#" PRIx64, s->dir, slot);
	}
	if (offset >= sl->len) {
		size_t len = sl->len;

		pthread_mutex_unlock(&s->lock);
		return fail_sync(ODX_ERANGE,
				 "spill %s: offset %zu is past slot %#" PRIx64 " (%zu bytes)",
				 s->dir, offset, slot, len);
	}
	pos = sl->off + offset;
	pthread_mutex_unlock(&s->lock);
	odx__spill_flip_byte(s, pos, last_error, sizeof(last_error), &code);
	return code;
}
#endif
