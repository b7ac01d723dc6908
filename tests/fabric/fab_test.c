/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_test.c - one rank of the multi-process fabric tests, started by scripts/odx-run (or mpirun).
 *
 *   fab_test matrix   transfer matrix: sizes around the providers' eager limits and the chunk
 *                     size, unaligned, 64 MiB, many in flight, receives posted before and after
 *                     sends; data checked
 *   fab_test garbage  the matrix while a raw TCP client and a malformed-message sender hit rank 0,
 *                     after forged data messages aimed at a posted receive
 *   fab_test mismatch sender and receiver disagree on lengths (2 ranks): the receive fails with
 *                     ODX_EINVAL, the send completes or fails, nothing hangs, the next transfer works
 *   fab_test kill     the last rank dies mid-job; the others must see ODX_EPEER naming it
	} else if (!strcmp(mode, "sized_one")) {
		run_sized_one(f);
	} else if (!strcmp(mode, "kill") || !strcmp(mode, "kill_early")) {
		bool early = !strcmp(mode, "kill_early");
 *   fab_test ue       small transfers only (what the ue profile supports)
 *   fab_test huge     one FAB_TEST_BIG-byte transfer (above 4 GiB by hand; not in the suite)
 *
 * Environment: FAB_TEST_PROVIDER, FAB_TEST_FAULT, FAB_TEST_BIG (largest size, default 64 MiB),
 * FAB_TEST_TIMEOUT_MS (peer timeout), FAB_TEST_SLOW (factor for every deadline, default 1),
 * FAB_TEST_LANES (shm copy lanes, or one count per rank separated by commas; 0: the default),
 * FAB_TEST_EXPECT_LANES (1: copy lanes carried at least an eighth of the bytes received, 0: none),
 * ODX_FABRIC_IFACE (pin), FAB_TEST_NOSHM_RANK (in auto mode,
 * that rank opens no shm endpoint), FAB_TEST_WAIT=cond (wait on a condition variable rather than
 * in odx_fab_wait), FAB_TEST_WAIT=assist (matrix: drive as an idle runtime worker does, with
 * odx_fab_assist_*, the progress thread parked). Every wait has a deadline; a failure
 * prints why and exits 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fab_garbage.h"
#include "fabric.h"
#include "odx/odx.h"

/* FAB_TEST_SLOW (meson.build: 3 under ASan, 5 under TSan) stretches every deadline below: they
 * only guard against hangs, and a sanitized rank on a loaded machine runs that much slower. */
static int slow = 1;
#define DEADLINE_S (90 * slow)
#define BARRIER_MS (30000 * slow)

struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int pending, failed, epeer;
	char first_error[400];
};

static struct waiter W = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, ""};
static int my_rank;
static odx_fab *the_fab;
static int msgs_seen; /* atomic: the handler runs on whichever thread drives progress */

#define DIE(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, "FAIL rank %d: ", my_rank);                                        \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
		exit(1);                                                                           \
	} while (0)

struct xfer {
	int peer;
	uint64_t key;
	size_t len, offset;
	unsigned char *mem;
	bool is_send;
	bool sized;        /* odx_fab_send_sized / odx_fab_recv_upto (len: the receive's capacity) */
	size_t got;        /* a sized receive: the length it reports */
	int status, calls; /* written by on_done */
	char msg[300];
};

/* FAB_TEST_WAIT=assist: the main thread drives progress as an idle runtime worker does
 * (odx_fab_assist_*), the progress thread parked; every callback must then run on it. */
static bool assist_mode; /* atomic: callbacks read it on whichever thread drives */
static pthread_t main_thread;
static int off_thread; /* atomic: callbacks that ran on another thread in assist mode */

static void count_thread(void)
{
	if (__atomic_load_n(&assist_mode, __ATOMIC_SEQ_CST) &&
	    !pthread_equal(pthread_self(), main_thread))
		__atomic_add_fetch(&off_thread, 1, __ATOMIC_SEQ_CST);
}

static void on_done(void *arg, int status, const char *msg)
{
	struct xfer *x = arg;
	count_thread();
	pthread_mutex_lock(&W.lock);
	W.pending--;
	x->status = status;
	x->calls++;
	snprintf(x->msg, sizeof(x->msg), "%s", msg ? msg : "");
	if (status) {
		W.failed++;
		if (status == ODX_EPEER)
			W.epeer++;
		if (!W.first_error[0])
			snprintf(W.first_error, sizeof(W.first_error), "%s: %s",
				 odx_err_name(status), msg ? msg : "(no message)");
	}
	pthread_cond_broadcast(&W.cond);
	pthread_mutex_unlock(&W.lock);
}

static void on_msg(void *user, int src, uint32_t type, const void *payload, size_t len)
{
	count_thread();
	/* type 7: a counted ping with its own length as payload */
	if (type == 7 && len == sizeof(uint32_t)) {
		uint32_t v;
		memcpy(&v, payload, sizeof(v));
		if ((int)v == src)
			__atomic_add_fetch(&msgs_seen, 1, __ATOMIC_SEQ_CST);
	}
	(void)user;
}

static int peers_failed; /* atomic: on_peer runs on whichever thread drives progress */

static void on_peer(void *user, int rank, const char *why)
{
	fprintf(stderr, "rank %d: peer %d failed: %s\n", my_rank, rank, why);
	__atomic_add_fetch(&peers_failed, 1, __ATOMIC_SEQ_CST);
	(void)user;
}

static bool none_pending(void *arg)
{
	pthread_mutex_lock(&W.lock);
	bool done = W.pending <= 0;
	pthread_mutex_unlock(&W.lock);
	(void)arg;
	return done;
}

/* Waits for every pending transfer; returns 0, or 1 on the deadline. By default the caller drives
 * progress in odx_fab_wait (the callbacks run on this thread); FAB_TEST_WAIT=cond blocks on a
 * condition variable instead, and the progress thread runs them and hands each over. */
static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* usleep, or in assist mode that long driving progress (nothing else does). */
static void pause_us(long us)
{
	if (!assist_mode) {
		usleep((useconds_t)us);
		return;
	}
	for (double end = now_s() + us / 1e6; now_s() < end;)
		odx_fab_assist_poll(the_fab);
}

/* Assist mode: the main thread takes the driver's place, then waits (counting, not timing)
 * until the progress thread parked after that: from then on it parks again each time it wakes,
 * as long as a driver is in (fab_progress.c, park), so it runs no round and no callback. */
static void assist_start(odx_fab *f)
{
	odx_fab_stats st;
	odx_fab_set_assist(f, true);
	if (!odx_fab_get_assist(f))
		DIE("odx_fab_set_assist did not turn assisted progress on");
	odx_fab_get_stats(f, &st);
	uint64_t parks0 = st.parks;
	odx_fab_assist_begin(f);
	for (double end = now_s() + DEADLINE_S; st.parks <= parks0; odx_fab_get_stats(f, &st)) {
		if (now_s() > end)
			DIE("the progress thread never parked while this thread drove");
		odx_fab_assist_poll(f);
	}
	__atomic_store_n(&assist_mode, true, __ATOMIC_SEQ_CST);
}

static int wait_all(int seconds)
{
	const char *how = getenv("FAB_TEST_WAIT");
	if (assist_mode) {
		for (double end = now_s() + seconds; !none_pending(NULL);) {
			if (now_s() > end)
				return 1;
			odx_fab_assist_poll(the_fab);
		}
		return 0;
	}
	if (!how || strcmp(how, "cond")) {
		int ret = odx_fab_wait(the_fab, none_pending, NULL, seconds * 1000);
		if (ret && ret != ODX_ETIMEDOUT)
			DIE("odx_fab_wait: %s", odx_err_name(ret));
		return ret != 0;
	}
	struct timespec dl;
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += seconds;
	pthread_mutex_lock(&W.lock);
	int ret = 0;
	while (W.pending > 0) {
		if (pthread_cond_timedwait(&W.cond, &W.lock, &dl) == ETIMEDOUT) {
			ret = 1;
			break;
		}
	}
	pthread_mutex_unlock(&W.lock);
	return ret;
}

static unsigned char pattern(int src, int dst, uint64_t key, size_t i)
{
	return (unsigned char)(i * 131u + key * 7u + (unsigned)src * 13u + (unsigned)dst * 29u +
			       (i >> 12));
}

static struct xfer *xfers;
static size_t nxfers, cap;

static void add_xfer(int peer, uint64_t key, size_t len, size_t offset, bool is_send)
{
	if (nxfers == cap) {
		cap = cap ? cap * 2 : 256;
		xfers = realloc(xfers, cap * sizeof(*xfers));
	}
	struct xfer *x = &xfers[nxfers++];
	*x = (struct xfer){0};
	x->peer = peer;
	x->key = key;
	x->len = len;
	x->offset = offset;
	x->is_send = is_send;
	x->mem = malloc(len + offset + 1);
	if (!x->mem)
		DIE("out of memory for %zu bytes", len);
	if (is_send) {
		for (size_t i = 0; i < len; i++)
			x->mem[offset + i] = pattern(my_rank, peer, key, i);
	} else {
		memset(x->mem, 0xa5, len + offset + 1);
	}
}

/* The transfers this rank takes part in: the same plan is built on every rank. */
static void build_plan(int size, size_t big, bool small_only)
{
	/* around 4 KiB (shm's inject limit), 8 KiB, 16 KiB (rxm's eager limit), 64 KiB and the
	 * chunk size (FAB_TEST_BIG crosses 16 MiB chunks) */
	static const size_t sizes[] = {0,     1,     7,	    64,	   4095,	 4096,	     8000,
				       8095,  8096,  8097,  8191,  8192,	 8193,	     16384,
				       16385, 65535, 65536, 65537, 1048576 + 13, 4194304 - 3};
	uint64_t key = 1;
	for (int s = 0; s < size; s++) {
		for (int d = 0; d < size; d++) {
			if (s == d)
				continue;
			for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++, key++) {
				if (small_only && sizes[i] > 65536)
					continue;
				if (s == my_rank)
					add_xfer(d, key, sizes[i], i % 4, true);
				if (d == my_rank)
					add_xfer(s, key, sizes[i], (i + 1) % 4, false);
			}
			/* many in flight: 200 small transfers of varying size */
			for (int k = 0; k < 200; k++, key++) {
				size_t len = (size_t)(k * 97) % 20000;
				if (s == my_rank)
					add_xfer(d, key, len, k % 8, true);
				if (d == my_rank)
					add_xfer(s, key, len, (k + 3) % 8, false);
			}
			key += 1000;
		}
		/* one big transfer per rank, to the next rank, across chunk boundaries */
		if (!small_only && big) {
			int d = (s + 1) % size;
			if (s == my_rank)
				add_xfer(d, key, big, 1, true);
			if (d == my_rank)
				add_xfer(s, key, big, 3, false);
			key++;
		}
		/* a transfer to oneself */
		if (s == my_rank) {
			add_xfer(s, key, 5000, 0, true);
			add_xfer(s, key, 5000, 2, false);
		}
		key++;
	}
}

static void post(odx_fab *f, struct xfer *x)
{
	pthread_mutex_lock(&W.lock);
	W.pending++;
	pthread_mutex_unlock(&W.lock);
	int ret;
	if (x->sized)
		ret = x->is_send ? odx_fab_send_sized(f, x->peer, x->key, x->mem + x->offset,
						     x->len, on_done, x)
				 : odx_fab_recv_upto(f, x->peer, x->key, x->mem + x->offset, x->len,
						    &x->got, on_done, x);
	else
		ret = x->is_send
			      ? odx_fab_send(f, x->peer, x->key, x->mem + x->offset, x->len, on_done,
					     x)
			      : odx_fab_recv(f, x->peer, x->key, x->mem + x->offset, x->len,
					     on_done, x);
	if (ret)
		DIE("%s of key %llu: %s", x->is_send ? "send" : "recv", (unsigned long long)x->key,
		    odx_err_name(ret));
}

/* kill_early's send to the victim: its callback comes after run_kill_early returned */
static struct xfer dead;

static bool xfers_done(void *arg)
{
	struct xfer *x = arg;
	pthread_mutex_lock(&W.lock);
	bool done = x[0].calls && x[1].calls;
	pthread_mutex_unlock(&W.lock);
	return done;
}

/*
 * kill_early: the victim died before any message to it, so the provider pushes back every send
 * to it until the peer timeout (shm waits for the peer to answer its name, rxm for a
 * connection). With such a send pending, the survivors exchange a transfer in a ring: it must
 * complete while the victim is not failed yet, i.e. without waiting for the peer timeout. When
 * a pushed-back send held every later operation back, the exchange (and the heartbeats between
 * the survivors) waited behind it until the victim was failed, and under load the survivors
 * failed each other instead.
 */
static void run_kill_early(odx_fab *f, int size, int victim)
{
	static unsigned char to_victim[4096], out[65536], in[65536];
	int n = size - 1, next = (my_rank + 1) % n, prev = (my_rank + n - 1) % n;

	/* the victim raised SIGKILL right after its open; the first heartbeat to it is a quarter
	 * of the peer timeout away (FAB_TEST_TIMEOUT_MS 5000) */
	usleep(200000);
	static struct xfer ring[2];
	dead = (struct xfer){.peer = victim, .key = 98, .len = sizeof(to_victim),
			     .mem = to_victim, .is_send = true};
	post(f, &dead);
	memset(out, my_rank + 1, sizeof(out));
	ring[0] = (struct xfer){.peer = next, .key = 97, .len = sizeof(out), .mem = out,
				.is_send = true};
	ring[1] = (struct xfer){.peer = prev, .key = 97, .len = sizeof(in), .mem = in};
	post(f, &ring[0]);
	post(f, &ring[1]);
	int ret = odx_fab_wait(f, xfers_done, ring, DEADLINE_S * 1000);
	if (ret)
		DIE("the survivors' exchange: odx_fab_wait: %s", odx_err_name(ret));
	if (__atomic_load_n(&peers_failed, __ATOMIC_SEQ_CST))
		DIE("the survivors' exchange ended only after a peer failed (%s / %s): it waited "
		    "behind the send to the dead rank %d",
		    ring[0].msg, ring[1].msg, victim);
	if (ring[0].status || ring[1].status)
		DIE("the survivors' exchange failed: %s / %s", ring[0].msg, ring[1].msg);
	for (size_t i = 0; i < sizeof(in); i++)
		if (in[i] != (unsigned char)(prev + 1))
			DIE("the survivors' exchange: byte %zu is %u, not %d", i, in[i], prev + 1);
	printf("rank %d: exchanged with ranks %d and %d while the send to rank %d was pending\n",
	       my_rank, next, prev, victim);
}

static void run_matrix(odx_fab *f, size_t big, bool small_only)
{
	int size = odx_fab_size(f);
	const char *how = getenv("FAB_TEST_WAIT");
	if (how && !strcmp(how, "assist"))
		assist_start(f);
	build_plan(size, big, small_only);
	/* odd keys: receive first; even keys: send first (the recv comes after the data) */
	for (size_t i = 0; i < nxfers; i++)
		if (!xfers[i].is_send && (xfers[i].key & 1))
			post(f, &xfers[i]);
	for (size_t i = 0; i < nxfers; i++)
		if (xfers[i].is_send)
			post(f, &xfers[i]);
	for (int d = 0; d < size; d++) {
		for (int k = 0; k < 50 && d != my_rank; k++) {
			uint32_t v = (uint32_t)my_rank;
			int ret;
			while ((ret = odx_fab_send_msg(f, d, 7, &v, sizeof(v))) == ODX_EAGAIN)
				pause_us(100);
			if (ret)
				DIE("send_msg to %d: %s", d, odx_err_name(ret));
		}
	}
	pause_us(1000);
	for (size_t i = 0; i < nxfers; i++)
		if (!xfers[i].is_send && !(xfers[i].key & 1))
			post(f, &xfers[i]);
	if (assist_mode)
		odx_fab_assist_kick(f); /* a worker's start of what it posted: a round of its own */
	if (wait_all(DEADLINE_S))
		DIE("%d transfers still pending after %d s", W.pending, DEADLINE_S);
	if (W.failed)
		DIE("%d transfers failed, first: %s", W.failed, W.first_error);
	for (size_t i = 0; i < nxfers; i++) {
		struct xfer *x = &xfers[i];
		if (x->is_send)
			continue;
		for (size_t b = 0; b < x->len; b++)
			if (x->mem[x->offset + b] != pattern(x->peer, my_rank, x->key, b))
				DIE("key %llu from rank %d (%zu bytes): byte %zu is %#x, expected %#x",
				    (unsigned long long)x->key, x->peer, x->len, b,
				    x->mem[x->offset + b], pattern(x->peer, my_rank, x->key, b));
		/* nothing written around the destination */
		for (size_t b = 0; b < x->offset; b++)
			if (x->mem[b] != 0xa5)
				DIE("key %llu: byte before the destination overwritten",
				    (unsigned long long)x->key);
		if (x->mem[x->offset + x->len] != 0xa5)
			DIE("key %llu: byte after the destination overwritten",
			    (unsigned long long)x->key);
	}
	/* control messages are counted by the handler; wait for them with a deadline */
	for (int t = 0; t < DEADLINE_S * 100 &&
			__atomic_load_n(&msgs_seen, __ATOMIC_SEQ_CST) < 50 * (size - 1);
	     t++)
		pause_us(10000);
	int seen = __atomic_load_n(&msgs_seen, __ATOMIC_SEQ_CST);
	if (seen != 50 * (size - 1))
		DIE("received %d control messages, expected %d", seen, 50 * (size - 1));
	if (assist_mode) {
		odx_fab_stats st;
		odx_fab_get_stats(f, &st);
		int off = __atomic_load_n(&off_thread, __ATOMIC_SEQ_CST);
		/* with the take-over on, only when the progress thread never took over */
		if (off && (!getenv("FAB_TEST_ASSIST_ANY_THREAD") || !st.assist_takeovers))
			DIE("%d callbacks ran off the assisting thread while the progress thread "
			    "was parked", off);
		if (!st.assist_rounds || !st.assist_work)
			DIE("assisted rounds: %llu, %llu that did something: expected both > 0",
			    (unsigned long long)st.assist_rounds,
			    (unsigned long long)st.assist_work);
		printf("rank %d: %d callbacks off the assisting thread: %llu rounds (%llu did "
		       "something), progress thread parked %llu times, took over %llu times\n",
		       my_rank, off, (unsigned long long)st.assist_rounds,
		       (unsigned long long)st.assist_work, (unsigned long long)st.parks,
		       (unsigned long long)st.assist_takeovers);
		/* a worker going to sleep: the progress thread takes over for the last barrier */
		__atomic_store_n(&assist_mode, false, __ATOMIC_SEQ_CST);
		odx_fab_assist_end(f, false);
	}
}

/* Raw TCP client: connects to a rank's provider address and sends junk at it. */
static void *garbage_client(void *arg)
{
	const char *addr = arg; /* "fi_sockaddr_in://127.0.0.1:PORT" */
	const char *p = strstr(addr, "://");
	if (!p)
		return NULL;
	p += 3;
	char host[64];
	const char *colon = strrchr(p, ':');
	if (!colon || (size_t)(colon - p) >= sizeof(host))
		return NULL;
	memcpy(host, p, (size_t)(colon - p));
	host[colon - p] = '\0';
	struct sockaddr_in sin = {.sin_family = AF_INET,
				  .sin_port = htons((uint16_t)atoi(colon + 1))};
	if (inet_pton(AF_INET, host, &sin.sin_addr) != 1)
		return NULL;
	unsigned seed = 12345;
	for (int round = 0; round < 20; round++) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0)
			continue;
		if (connect(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0) {
			unsigned char buf[4096];
			size_t n = (size_t)(rand_r(&seed) % sizeof(buf)) + 1;
			for (size_t i = 0; i < n; i++)
				buf[i] = (unsigned char)rand_r(&seed);
			if (round % 4 == 1)
				memset(buf, 0xff, n); /* huge length fields everywhere */
			if (round % 4 == 2)
				n = 3; /* truncated */
			ssize_t k = send(fd, buf, n, MSG_NOSIGNAL);
			(void)k;
			usleep(2000);
		}
		close(fd);
	}
	fprintf(stderr, "rank %d: raw TCP garbage sent to %s\n", my_rank, addr);
	return NULL;
}

static void wait_stats_bad(odx_fab *f, uint64_t at_least)
{
	odx_fab_stats st;
	for (int t = 0; t < DEADLINE_S * 100; t++) {
		odx_fab_get_stats(f, &st);
		if (st.bad_msgs >= at_least)
			return;
		usleep(10000);
	}
	DIE("only %llu bad messages counted, expected %llu", (unsigned long long)st.bad_msgs,
	    (unsigned long long)at_least);
}

/* Forged data messages (random bytes, lengths below, equal to and above the receive's, no
 * valid check) hit a receive rank 0 posted for rank 1: each is dropped and counted, the receive
 * posted again, and the real data, sent only after rank 0 counted them, lands intact. */
static void forged_data(odx_fab *f)
{
	enum {
		N = 4,
		LEN = 3000
	};
	const uint64_t key = 1ull << 40;
	static struct xfer x;
	if (my_rank > 1)
		return;
	x = (struct xfer){.peer = 1 - my_rank, .key = key, .len = LEN, .offset = 1};
	x.is_send = my_rank == 1;
	x.mem = malloc(LEN + 2);
	if (!x.mem)
		DIE("out of memory");
	memset(x.mem, 0xa5, LEN + 2);
	for (size_t i = 0; x.is_send && i < LEN; i++)
		x.mem[1 + i] = pattern(1, 0, key, i);
	odx_fab_stats st;
	odx_fab_get_stats(f, &st);
	if (my_rank == 0)
		post(f, &x);
	if (odx_fab_barrier(f, BARRIER_MS))
		DIE("barrier before the forged data");
	for (int k = 0; my_rank == 1 && k < N; k++)
		if (fab_garbage_send(f, 0, FAB_GARBAGE_DATA, key))
			DIE("send_garbage data");
	if (my_rank == 0)
		wait_stats_bad(f, st.bad_msgs + N);
	if (odx_fab_barrier(f, BARRIER_MS))
		DIE("barrier after the forged data");
	if (my_rank == 1)
		post(f, &x);
	if (wait_all(DEADLINE_S) || x.calls != 1 || x.status)
		DIE("transfer after forged data: %d calls, %s %s", x.calls, odx_err_name(x.status),
		    x.msg);
	for (size_t i = 0; my_rank == 0 && i < LEN; i++)
		if (x.mem[1 + i] != pattern(1, 0, key, i))
			DIE("byte %zu after forged data is %#x", i, x.mem[1 + i]);
	if (my_rank == 0 && (x.mem[0] != 0xa5 || x.mem[LEN + 1] != 0xa5))
		DIE("forged data wrote around the destination");
	free(x.mem);
	if (my_rank == 0)
		printf("forged data: %d messages dropped, the real data landed\n", N);
}

/* Rank 0 sends, rank 1 receives with another length: sizes inside one chunk, more and fewer
 * chunks than the receive (FAB_TEST chunk 1 MiB), more than a send's window, and empty on
 * either side. Half the receives
 * are posted before the sends, half after. */
/* Sized transfers: the receiver gives only a capacity and learns the length (odx_fab_send_sized,
 * odx_fab_recv_upto), with receives posted before the sends (round 0) and after their data and
 * length arrived (round 1), across chunk boundaries, zero bytes, exactly the capacity, a transfer
 * to oneself; a sender longer than the capacity fails both sides; bytes past the length are
 * untouched. Ranks 0 and 1. */
static void run_sized(odx_fab *f)
{
	static const size_t pairs[][2] = {/* send length, receive capacity */
					  {0, 100},
					  {1, 1},
					  {100, 200},
					  {4095, 65536},
					  {20000, 20000},
					  {(1 << 20) + 13, 4 << 20},
					  {(17 << 20) + 3, (20 << 20)},
					  /* longer than the capacity: both fail */
					  {200, 100},
					  {(3 << 20) + 1, 3 << 20}};
	enum {
		NP = sizeof(pairs) / sizeof(pairs[0]),
		NOK = NP - 2
	};
	static struct xfer xs[2 * NP + 2];
	if (my_rank > 1)
		return;
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < NP; i++) {
			struct xfer *x = &xs[round * NP + i];
			*x = (struct xfer){.peer = 1 - my_rank,
					   .key = 700 + (uint64_t)(round * NP + i),
					   .is_send = my_rank == 0,
					   .sized = true,
					   .offset = (size_t)i % 4};
			x->len = pairs[i][my_rank == 0 ? 0 : 1];
			x->mem = malloc(x->len + x->offset + 1);
			for (size_t k = 0; k < x->len + x->offset + 1; k++)
				x->mem[k] = x->is_send && k >= x->offset && k < x->offset + x->len
						    ? pattern(0, 1, x->key, k - x->offset)
						    : 0xa5;
		}
		if (my_rank == 1 && round == 0)
			for (int i = 0; i < NP; i++)
				post(f, &xs[i]);
		int bret = odx_fab_barrier(f, BARRIER_MS);
		if (bret)
			DIE("sized barrier of round %d: %s", round, odx_err_name(bret));
		for (int i = 0; my_rank == 0 && i < NP; i++)
			post(f, &xs[round * NP + i]);
		if (my_rank == 1 && round == 1) {
			usleep(20000); /* the lengths (and small data) are there first */
			for (int i = 0; i < NP; i++)
				post(f, &xs[NP + i]);
		}
		if (wait_all(DEADLINE_S))
			DIE("%d sized transfers still pending after %d s", W.pending, DEADLINE_S);
	}
	/* to oneself */
	xs[2 * NP] = (struct xfer){.peer = my_rank, .key = 799, .len = 3000, .is_send = true,
				   .sized = true};
	xs[2 * NP + 1] = (struct xfer){.peer = my_rank, .key = 799, .len = 8000, .sized = true};
	for (int k = 0; k < 2; k++) {
		struct xfer *x = &xs[2 * NP + k];
		x->mem = malloc(x->len + 1);
		for (size_t i = 0; i < x->len + 1; i++)
			x->mem[i] = x->is_send ? pattern(0, 1, x->key, i) : 0xa5;
	}
	post(f, &xs[2 * NP + 1]);
	post(f, &xs[2 * NP]);
	if (wait_all(DEADLINE_S))
		DIE("sized self transfer still pending after %d s", DEADLINE_S);
	for (int i = 0; i < 2 * NP + 2; i++) {
		struct xfer *x = &xs[i];
		bool over = i < 2 * NP && i % NP >= NOK;
		size_t want = i >= 2 * NP ? 3000 : pairs[i % NP][0];
		if (x->calls != 1)
			DIE("sized key %llu: done called %d times", (unsigned long long)x->key,
			    x->calls);
		if (over) {
			if (x->status != ODX_EINVAL && !(x->is_send && x->status == 0))
				DIE("sized key %llu (%zu bytes into %zu) ended with %s: %s",
				    (unsigned long long)x->key, pairs[i % NP][0], pairs[i % NP][1],
				    odx_err_name(x->status), x->msg);
			char a[64], b[64];
			snprintf(a, sizeof(a), "sends %zu bytes", pairs[i % NP][0]);
			snprintf(b, sizeof(b), " %zu bytes", pairs[i % NP][1]);
			if (!x->is_send &&
			    (x->status != ODX_EINVAL || x->got != 0 || !strstr(x->msg, a) ||
			     !strstr(strstr(x->msg, a) + strlen(a), b)))
				DIE("over-long sized receive of key %llu: %s, length %zu, \"%s\"",
				    (unsigned long long)x->key, odx_err_name(x->status), x->got,
				    x->msg);
		} else if (x->status) {
			DIE("sized key %llu failed: %s: %s", (unsigned long long)x->key,
			    odx_err_name(x->status), x->msg);
		} else if (!x->is_send) {
			if (x->got != want)
				DIE("sized receive of key %llu got %zu bytes, the sender sent %zu",
				    (unsigned long long)x->key, x->got, want);
			/* the sender's bytes at the offset, the guard bytes around them intact */
			for (size_t k = 0; k < x->offset + x->len + 1; k++) {
				bool in = k >= x->offset && k < x->offset + want;
				unsigned char expect = in ? pattern(0, 1, x->key, k - x->offset)
							  : (unsigned char)0xa5;
				if (x->mem[k] != expect)
					DIE("sized receive of key %llu: byte %zu is %#x, not %#x",
					    (unsigned long long)x->key, k, x->mem[k], expect);
			}
		}
		free(x->mem);
	}
	printf("rank %d: %d sized transfers, %d refused as too long\n", my_rank, 2 * NOK + 1,
	       2 * (NP - NOK));
}

/* Sized transfers of one chunk are one message (odx_fab_sized_one_max bytes at most): no length
 * announcement travels ahead of them. Receives posted before the sends (round 0) and after them
 * (round 1: the sends go out before the barrier that lets the receiver post, so the small ones
 * have likely landed unexpected by then; either order must work): zero bytes, one, a page,
 * exactly the limit into exactly its capacity, one byte past the limit (announced: its receive,
 * posted for one message, is cancelled and its chunks posted), and longer than the capacity
 * (both fail, the receive's message naming both lengths, nothing written past the capacity).
 * The sender counts the control messages it sent meanwhile: fewer than half the one-message
 * sends (an announcement each would be one per send; heartbeats and credits are the rest).
 * Ranks 0 and 1. */
static void run_sized_one(odx_fab *f)
{
	if (my_rank > 1)
		return;
	int peer = 1 - my_rank;
	size_t lim = odx_fab_sized_one_max(f, peer);
	if (lim == 0 || lim == SIZE_MAX || lim > (64u << 20))
		DIE("odx_fab_sized_one_max(%d) is %zu", peer, lim);
	if (odx_fab_sized_one_max(f, my_rank) != SIZE_MAX || odx_fab_sized_one_max(f, 2 + peer))
		DIE("odx_fab_sized_one_max of oneself or of a rank outside the job");
	/* send length, receive capacity; small ones R times */
	enum {
		R = 8
	};
	const size_t small[][2] = {{0, 0},	 {0, 100},   {1, 1}, {64, 4096},
				   {4096, 4096}, {200, 100}, {1, 0}};
	/* capacities above the limit too: a receive of that size would be cut into smaller
	 * chunks (over copy lanes), yet the one message lands whole in its buffer */
	const size_t big[][2] = {{lim - 1, lim},	 {lim, lim},	     {lim, lim + 1},
				 {lim - 1, 2 * lim + 3}, {lim + 1, lim + 1}, {lim, lim - 1}};
	enum {
		NS = sizeof(small) / sizeof(small[0]),
		NB = sizeof(big) / sizeof(big[0]),
		N = R * NS + NB
	};
	static struct xfer xs[N];
	size_t sent[N], capy[N];
	int one_msg = 0;
	for (int round = 0; round < 2; round++) {
		one_msg = 0;
		for (int i = 0; i < N; i++) {
			const size_t *pr = i < R * NS ? small[i % NS] : big[i - R * NS];
			struct xfer *x = &xs[i];
			sent[i] = pr[0];
			capy[i] = pr[1];
			one_msg += pr[0] <= lim;
			*x = (struct xfer){.peer = peer,
					   .key = 900 + (uint64_t)(round * N + i),
					   .is_send = my_rank == 0,
					   .sized = true,
					   .offset = (size_t)i % 3};
			x->len = my_rank == 0 ? pr[0] : pr[1];
			x->mem = malloc(x->len + x->offset + 1);
			if (!x->mem)
				DIE("out of memory for %zu bytes", x->len);
			for (size_t k = 0; k < x->len + x->offset + 1; k++)
				x->mem[k] = x->is_send && k >= x->offset && k < x->offset + x->len
						    ? pattern(0, 1, x->key, k - x->offset)
						    : 0xa5;
		}
		if (my_rank == 1 && round == 0)
			for (int i = 0; i < N; i++)
				post(f, &xs[i]);
		odx_fab_stats st0, st1;
		odx_fab_get_stats(f, &st0);
		if (my_rank == 0 && round == 1)
			for (int i = 0; i < N; i++)
				post(f, &xs[i]);
		int bret = odx_fab_barrier(f, BARRIER_MS);
		if (bret)
			DIE("one-message barrier of round %d: %s", round, odx_err_name(bret));
		if (my_rank == 0 && round == 0) {
			odx_fab_get_stats(f, &st0);
			for (int i = 0; i < N; i++)
				post(f, &xs[i]);
		}
		if (my_rank == 1 && round == 1)
			for (int i = 0; i < N; i++)
				post(f, &xs[i]);
		if (wait_all(DEADLINE_S))
			DIE("%d one-message transfers still pending after %d s", W.pending,
			    DEADLINE_S);
		odx_fab_get_stats(f, &st1);
		/* round 1 counts the barrier's arrival message too */
		uint64_t ctrl = st1.msgs_sent - st0.msgs_sent;
		if (my_rank == 0 && ctrl >= (uint64_t)one_msg / 2)
			DIE("round %d: %llu control messages sent along with %d sized sends of at "
			    "most %zu bytes: they are not one message each",
			    round, (unsigned long long)ctrl, one_msg, lim);
		if (my_rank == 0)
			printf("round %d: %d one-message sized sends (at most %zu bytes) and %d "
			       "announced, %llu control messages sent meanwhile\n",
			       round, one_msg, lim, N - one_msg, (unsigned long long)ctrl);
		for (int i = 0; i < N; i++) {
			struct xfer *x = &xs[i];
			bool over = sent[i] > capy[i];
			if (x->calls != 1)
				DIE("one-message key %llu: done called %d times",
				    (unsigned long long)x->key, x->calls);
			if (over && x->is_send) {
				/* refused: fails, unless it completed before the refusal came */
				if (x->status && x->status != ODX_EINVAL)
					DIE("over-long send of key %llu ended with %s: %s",
					    (unsigned long long)x->key, odx_err_name(x->status),
					    x->msg);
			} else if (over) {
				char a[64], b[64];
				snprintf(a, sizeof(a), "sends %zu bytes", sent[i]);
				snprintf(b, sizeof(b), " %zu bytes", capy[i]);
				if (x->status != ODX_EINVAL || x->got != 0 || !strstr(x->msg, a) ||
				    !strstr(strstr(x->msg, a) + strlen(a), b))
					DIE("over-long receive of key %llu (%zu bytes into %zu): %s, "
					    "length %zu, \"%s\"",
					    (unsigned long long)x->key, sent[i], capy[i],
					    odx_err_name(x->status), x->got, x->msg);
				/* the sender's excess went nowhere near the buffer */
				if (x->mem[x->offset + capy[i]] != 0xa5)
					DIE("over-long receive of key %llu wrote past its capacity",
					    (unsigned long long)x->key);
			} else if (x->status) {
				DIE("one-message key %llu (%zu bytes into %zu) failed: %s: %s",
				    (unsigned long long)x->key, sent[i], capy[i],
				    odx_err_name(x->status), x->msg);
			} else if (!x->is_send) {
				if (x->got != sent[i])
					DIE("one-message receive of key %llu got %zu bytes, the sender "
					    "sent %zu",
					    (unsigned long long)x->key, x->got, sent[i]);
				for (size_t k = 0; k < x->offset + x->len + 1; k++) {
					bool in = k >= x->offset && k < x->offset + sent[i];
					unsigned char expect =
						in ? pattern(0, 1, x->key, k - x->offset)
						   : (unsigned char)0xa5;
					if (x->mem[k] != expect)
						DIE("one-message receive of key %llu: byte %zu is "
						    "%#x, not %#x",
						    (unsigned long long)x->key, k, x->mem[k],
						    expect);
				}
			}
			free(x->mem);
		}
	}
	printf("rank %d: sized sends of one message checked (limit %zu bytes)\n", my_rank, lim);
}

static void run_mismatch(odx_fab *f)
{
	static const size_t pairs[][2] = {
		{100, 200},
		{200, 100},
		{20000, 20001},
		{3 << 20, 1 << 20},
		{1 << 20, 3 << 20},
		{0, 5000},
		{5000, 0},
		{9000, 8999},
		{(3 << 20) + 1, (3 << 20) + 2},
		/* more chunks than a send keeps in flight: those not out when the refusal
		 * comes must still reach the receiver, which drains them all */
		{12 << 20, 1 << 20}};
	enum {
		NP = sizeof(pairs) / sizeof(pairs[0])
	};
	static struct xfer xs[2 * NP + 1];
	if (my_rank > 1)
		return;
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < NP; i++) {
			struct xfer *x = &xs[round * NP + i];
			*x = (struct xfer){.peer = 1 - my_rank,
					   .key = 500 + (uint64_t)(round * NP + i),
					   .is_send = my_rank == 0};
			x->len = pairs[i][my_rank];
			x->mem = calloc(1, x->len + 1);
		}
		if (my_rank == 1 && round == 0)
			for (int i = 0; i < NP; i++)
				post(f, &xs[i]);
		int bret = odx_fab_barrier(f, BARRIER_MS);
		if (bret)
			DIE("mismatch barrier of round %d: %s", round, odx_err_name(bret));
		for (int i = 0; my_rank == 0 && i < NP; i++)
			post(f, &xs[round * NP + i]);
		if (my_rank == 1 && round == 1) {
			usleep(20000); /* the data is there first */
			for (int i = 0; i < NP; i++)
				post(f, &xs[NP + i]);
		}
		if (wait_all(DEADLINE_S))
			DIE("%d mismatched transfers still pending after %d s", W.pending,
			    DEADLINE_S);
	}
	for (int i = 0; i < 2 * NP; i++) {
		struct xfer *x = &xs[i];
		if (x->calls != 1)
			DIE("key %llu: done called %d times", (unsigned long long)x->key, x->calls);
		if (!x->is_send && (x->status != ODX_EINVAL || !strstr(x->msg, "expects")))
			DIE("mismatched receive of key %llu (%zu bytes) ended with %s: %s",
			    (unsigned long long)x->key, x->len, odx_err_name(x->status), x->msg);
		if (x->is_send && x->status != 0 && x->status != ODX_EINVAL)
			DIE("mismatched send of key %llu ended with %s: %s",
			    (unsigned long long)x->key, odx_err_name(x->status), x->msg);
		printf("rank %d key %llu %s %zu: %s %s\n", my_rank, (unsigned long long)x->key,
		       x->is_send ? "send" : "recv", x->len, odx_err_name(x->status), x->msg);
		free(x->mem);
	}
	/* the transport goes on: a matching transfer across chunks */
	struct xfer *x = &xs[2 * NP];
	*x = (struct xfer){.peer = 1 - my_rank, .key = 600, .len = (2 << 20) + 5, .offset = 0};
	x->is_send = my_rank == 0;
	x->mem = malloc(x->len + 1);
	for (size_t i = 0; i < x->len; i++)
		x->mem[i] = x->is_send ? pattern(0, 1, 600, i) : 0;
	post(f, x);
	if (wait_all(DEADLINE_S) || x->status)
		DIE("transfer after the mismatches: %s %s", odx_err_name(x->status), x->msg);
	for (size_t i = 0; !x->is_send && i < x->len; i++)
		if (x->mem[i] != pattern(0, 1, 600, i))
			DIE("byte %zu after the mismatches is wrong", i);
	free(x->mem);
}

static odx_fab *open_fab(void)
{
	/* mixed rails in auto mode: this rank opens no shm endpoint, so the others reach it over
	 * the network while they use shm among themselves */
	const char *noshm = getenv("FAB_TEST_NOSHM_RANK"), *me = getenv("ODX_RANK");
	if (noshm && me && !strcmp(noshm, me))
		setenv("ODX_FAB_SHM", "0", 1);
	odx_fab_params p = {0};
	p.provider = getenv("FAB_TEST_PROVIDER");
	p.fault = getenv("FAB_TEST_FAULT");
	/* "2", or one count per rank ("1,2,3": the ranks settle on the fewer of each pair's) */
	const char *lanes = getenv("FAB_TEST_LANES");
	for (int r = me ? atoi(me) : 0; lanes && r > 0 && strchr(lanes, ','); r--)
		lanes = strchr(lanes, ',') + 1;
	p.shm_lanes = lanes ? atoi(lanes) : 0;
	p.iface = getenv("ODX_FABRIC_IFACE");
	const char *t = getenv("FAB_TEST_TIMEOUT_MS");
	/* stretched like the deadlines under a sanitizer (the default when unset is 10 s): a rank
	 * that a loaded machine keeps off a core that long must not count as dead */
	p.peer_timeout_ms = (t ? atoi(t) : slow > 1 ? 10000 : 0) * slow;
	odx_fab *f = NULL;
	char err[1024];
	int ret = odx_fab_open(&p, &f, err, sizeof(err));
	if (ret)
		DIE("odx_fab_open: %s: %s", odx_err_name(ret), err);
	my_rank = odx_fab_rank(f);
	odx_fab_set_handlers(f, on_msg, on_peer, NULL);
	the_fab = f;
	return f;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "matrix";
	main_thread = pthread_self();
	const char *sl = getenv("FAB_TEST_SLOW");
	if (sl && atoi(sl) > 1)
		slow = atoi(sl);
	alarm((unsigned)(DEADLINE_S + 60 * slow)); /* the last resort against a hang */
	odx_fab *f = open_fab();
	int size = odx_fab_size(f);
	/* pinned to an address: every peer reached over the network is reached at that address
	 * (in auto mode, ranks on this host use shm) */
	const char *pin = getenv("ODX_FABRIC_IFACE");
	if (pin && strchr(pin, '.')) {
		char addr[256] = "";
		for (int r = 0; r < size; r++)
			if (r != my_rank && (odx_fab_peer_addr(f, r, addr, sizeof(addr)) ||
					     (!strstr(addr, "fi_shm") && !strstr(addr, pin))))
				DIE("rank %d's address %s is not on the pinned %s", r, addr, pin);
	}
	const char *b = getenv("FAB_TEST_BIG");
	size_t big = b ? strtoull(b, NULL, 0) : (64u << 20);
	if (my_rank == 0)
		printf("provider %s, %d ranks, mode %s\n", odx_fab_provider(f), size, mode);
	int ret = odx_fab_barrier(f, BARRIER_MS);
	if (ret)
		DIE("first barrier: %s", odx_err_name(ret));

	if (!strcmp(mode, "matrix") || !strcmp(mode, "ue")) {
		run_matrix(f, big, !strcmp(mode, "ue"));
	} else if (!strcmp(mode, "huge")) {
		/* one transfer above 4 GiB (FAB_TEST_BIG bytes), unaligned, rank 0 -> rank 1 */
		if (my_rank < 2) {
			add_xfer(1 - my_rank, 4242, big, my_rank ? 3 : 1, my_rank == 0);
			post(f, &xfers[0]);
			if (wait_all(DEADLINE_S))
				DIE("the %zu-byte transfer did not finish in %d s", big,
				    DEADLINE_S);
			if (W.failed)
				DIE("huge transfer failed: %s", W.first_error);
			for (size_t i = 0; my_rank == 1 && i < big; i++)
				if (xfers[0].mem[3 + i] != pattern(0, 1, 4242, i))
					DIE("byte %zu of the %zu-byte transfer is wrong", i, big);
			printf("rank %d: %zu bytes %s and checked\n", my_rank, big,
			       my_rank ? "received" : "sent");
		}
	} else if (!strcmp(mode, "garbage")) {
		pthread_t th = 0;
		static char addr[256];
		forged_data(f);
		if (my_rank == 1) {
			if (odx_fab_peer_addr(f, 0, addr, sizeof(addr)) == 0 &&
			    strstr(addr, "fi_sockaddr_in://"))
				pthread_create(&th, NULL, garbage_client, addr);
			/* malformed messages through the real endpoint: these reach our layer */
			for (int k = 0; k < 3 * FAB_GARBAGE_COUNT; k++) {
				if (k % FAB_GARBAGE_COUNT == FAB_GARBAGE_DATA)
					continue; /* forged_data aimed them at a posted receive */
				ret = fab_garbage_send(f, 0, (fab_garbage)(k % FAB_GARBAGE_COUNT),
						       (uint64_t)k);
				if (ret)
					DIE("send_garbage: %s", odx_err_name(ret));
			}
		}
		run_matrix(f, 8u << 20, false);
		if (th)
			pthread_join(th, NULL);
		ret = odx_fab_barrier(f, BARRIER_MS);
		if (ret)
			DIE("barrier after garbage: %s", odx_err_name(ret));
		odx_fab_stats st;
		odx_fab_get_stats(f, &st);
		printf("bad messages dropped: %llu\n", (unsigned long long)st.bad_msgs);
		if (my_rank == 0 && st.bad_msgs == 0)
			DIE("rank 0 counted no bad messages");
	} else if (!strcmp(mode, "mismatch")) {
		run_mismatch(f);
	} else if (!strcmp(mode, "sized")) {
		run_sized(f);
	} else if (!strcmp(mode, "sized_one")) {
		run_sized_one(f);
	} else if (!strcmp(mode, "kill") || !strcmp(mode, "kill_early")) {
		bool early = !strcmp(mode, "kill_early");
		int victim = size - 1;
		if (my_rank == victim) {
			if (!early)
				usleep(200000);
			raise(SIGKILL);
		}
		if (early)
			run_kill_early(f, size, victim);
		/* wait for data the victim will never send */
		static unsigned char buf[1 << 20];
		post(f, &(struct xfer){.peer = victim, .key = 99, .len = sizeof(buf), .mem = buf});
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (wait_all(DEADLINE_S))
			DIE("the receive from the killed rank %d never failed", victim);
		clock_gettime(CLOCK_MONOTONIC, &t1);
		double s =
			(double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
		char expect[32];
		snprintf(expect, sizeof(expect), "rank %d", victim);
		/* kill_early: the send to it fails too, unless the provider took it (shm on a rank
		 * that already knew the victim's segment: it completes into the dead one) */
		int want = early && dead.status ? 2 : 1;
		if (W.epeer != want || !strstr(W.first_error, expect))
			DIE("expected ODX_EPEER naming %s (%d times), got %d: %s", expect, want,
			    W.epeer, W.first_error);
		printf("rank %d: got %s after %.2f s\n", my_rank, W.first_error, s);
		odx_fab_close(f);
		/* the exit status a runtime would use: the peer error */
		return 3;
	} else {
		DIE("unknown mode %s", mode);
	}
	ret = odx_fab_barrier(f, 2 * BARRIER_MS);
	if (ret)
		DIE("last barrier: %s", odx_err_name(ret));
	odx_fab_stats st;
	odx_fab_get_stats(f, &st);
	printf("ok: %llu transfers, %llu msgs sent, %llu recv, %llu retries, %llu eagain, %llu bad, "
	       "%llu of %llu bytes received through copy lanes\n",
	       (unsigned long long)st.transfers, (unsigned long long)st.msgs_sent,
	       (unsigned long long)st.msgs_recv, (unsigned long long)st.retries,
	       (unsigned long long)st.eagain, (unsigned long long)st.bad_msgs,
	       (unsigned long long)st.lane_bytes, (unsigned long long)st.bytes_recv);
	/* the copy lanes carry their share, or nothing when turned off */
	const char *expect = getenv("FAB_TEST_EXPECT_LANES");
	if (expect && atoi(expect) && st.lane_bytes < st.bytes_recv / 8)
		DIE("only %llu of %llu bytes came through the copy lanes",
		    (unsigned long long)st.lane_bytes, (unsigned long long)st.bytes_recv);
	if (expect && !atoi(expect) && st.lane_bytes)
		DIE("copy lanes are off, yet %llu bytes came through them",
		    (unsigned long long)st.lane_bytes);
	odx_fab_close(f);
	for (size_t i = 0; i < nxfers; i++)
		free(xfers[i].mem);
	free(xfers);
	return 0;
}
