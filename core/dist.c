/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dist.c - distributed execution: a replicated sequential task flow over the fabric
 * (docs/distributed.md).
 *
 * Every rank runs the same program and submits the same tasks, buffers, reads and writes in the
 * same order, so every rank can track, for every buffer, which ranks hold its latest version
 * (valid_kind, valid_one, valid_set) without a single message. For each kernel task every rank
 * computes the same answer to "which rank runs it" (the Lua policy's place_rank when it has one,
 * else the owner of the first buffer it writes), and the same list of transfers its inputs need:
 * for each buffer the task uses that its rank lacks, one transfer from a rank that has it. The
 * sender submits a SEND task (it reads the buffer: ordered after its last writer) and the receiver
 * a RECV task (it writes the buffer: ordered after the local readers of the old bytes); the
 * receive is posted straight into the host copy when its turn comes, and the send may run
 * earlier: the fabric matches them by (rank, key), and the key (buffer id, transfer count) is the
 * same on both sides because both counted the same transfers. A rank that neither runs a task nor
 * sends or receives for it only records the writer of the buffers it writes (O(1)).
 *
 * Only fabric/ includes libfabric; this file sees the transport through fabric/fabric.h.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "fabric.h"
#include "policy.h"

/* The environment wire-up's bound (fabric/fab_wireup.c); nothing here has a smaller one. */
#define MAX_RANKS 65536

/* ODX_STATS per peer rank, under ctx->peers_lock (one short critical section per transfer's
 * start and end: nothing next to a transfer's cost). */
struct odx__peer_stats {
	uint64_t sent, sent_bytes, recvd, recvd_bytes, failed;
	uint64_t busy_ns;   /* time with at least one transfer with this peer in flight */
	uint64_t summed_ns; /* the transfers' times added up (> busy_ns when they overlap) */
	uint64_t since;     /* when inflight last went from 0 to 1 */
	int inflight;
};

/* Who holds a buffer's latest version. Every rank: a new buffer reads as zeros everywhere, a
 * registered one is each rank's own memory, a host write reached all. One rank: the last writer
 * (recorded in O(1) by every rank for every task). A set: the writer and the ranks it was copied
 * to since, ctx->size bits. */
enum {
	VALID_ALL,
	VALID_ONE,
	VALID_SET
};

static size_t set_words(const odx_context *ctx)
{
	return ((size_t)ctx->size + 63) / 64;
}

static bool has(const odx_buffer *b, int r)
{
	switch (b->valid_kind) {
	case VALID_ALL:
		return true;
	case VALID_ONE:
		return b->valid_one == r;
	default:
		return (b->valid_set[r / 64] >> (r % 64)) & 1;
	}
}

static void holds_only(odx_buffer *b, int r)
{
	b->valid_kind = VALID_ONE;
	b->valid_one = r;
}

/* Rank r holds it too (after a transfer to it). */
static int holds_also(odx_context *ctx, odx_buffer *b, int r)
{
	if (has(b, r))
		return 0;
	if (b->valid_kind == VALID_ONE) {
		if (!b->valid_set) {
			b->valid_set = calloc(set_words(ctx), sizeof(uint64_t));
			if (!b->valid_set)
				return odx__fail(ctx, ODX_ENOMEM, "out of memory for a rank set");
		} else {
			memset(b->valid_set, 0, set_words(ctx) * sizeof(uint64_t));
		}
		b->valid_set[b->valid_one / 64] |= 1ull << (b->valid_one % 64);
		b->valid_kind = VALID_SET;
	}
	b->valid_set[r / 64] |= 1ull << (r % 64);
	return 0;
}

static void on_peer(void *user, int rank, const char *why)
{
	odx_context *ctx = user;

	/* The transfers with that rank fail with ODX_EPEER on their own (the fabric fails them);
	 * this is the one line that says what happened. */
	odx__log(ctx, ODX_LOG_ERROR, "rank %d failed: %s", rank, why ? why : "");
	if (!odx__log_enabled(ctx, ODX_LOG_ERROR))
		fprintf(stderr, "odx rank %d: rank %d failed: %s\n", ctx->rank, rank, why ? why : "");
}

static void on_msg(void *user, int src, uint32_t type, const void *payload, size_t len)
{
	odx_context *ctx = user;

	/* The task flow needs no control messages: everything is known in advance. */
	odx__log(ctx, ODX_LOG_WARN, "unexpected control message of type %u (%zu bytes) from rank %d",
		 type, len, src);
	(void)payload;
}

/* The transport's parameters from the fabric.* keys. */
static void fab_params(const odx_context *ctx, odx_fab_params *p)
{
	memset(p, 0, sizeof(*p));
	p->provider = odx__config_str(ctx->config, "fabric.provider");
	p->iface = odx__config_str(ctx->config, "fabric.iface");
	if (!p->iface[0])
		p->iface = NULL;
	p->peer_timeout_ms = (int)odx__config_int(ctx->config, "fabric.peer_timeout_ms");
	p->fault = odx__config_str(ctx->config, "fabric.fault");
	if (!p->fault[0])
		p->fault = NULL;
	p->max_retries = (int)odx__config_int(ctx->config, "fabric.retries");
	p->shm_lanes = (int)odx__config_int(ctx->config, "fabric.shm_lanes");
}

/* ---- ranks sharing a host ------------------------------------------------------------------ */

/* A nonnegative decimal number from the environment, or -1. */
static long env_num(const char *name)
{
	const char *v = getenv(name);
	char *end = NULL;
	long x;

	if (!v || !*v)
		return -1;
	x = strtol(v, &end, 10);
	return *end || x < 0 ? -1 : x;
}

/* Slurm's tasks on node `node` from SLURM_STEP_TASKS_PER_NODE ("2(x3),1": 2 on each of the first
 * three nodes, then 1), or -1. */
static long slurm_tasks_on(const char *list, long node)
{
	while (list && *list) {
		char *end = NULL;
		long n = strtol(list, &end, 10), reps = 1;

		if (end == list || n < 0)
			return -1;
		if (strncmp(end, "(x", 2) == 0) {
			reps = strtol(end + 2, &end, 10);
			if (*end++ != ')' || reps < 1)
				return -1;
		}
		if (node < reps)
			return n;
		node -= reps;
		list = *end == ',' ? end + 1 : NULL;
	}
	return -1;
}

/* This process's rank among those its launcher started on this host, and how many: odx-run's,
 * Open MPI's, PMIx's or Slurm's word for it; false when none says (one rank per host). */
static bool local_ranks(int *lrank, int *lsize, const char **who)
{
	static const char *const vars[][3] = {
		{"ODX_LOCAL_RANK", "ODX_LOCAL_SIZE", "odx-run"},
		{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "Open MPI"},
		{"PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE", "PMIx"},
	};
	long r, n;
	size_t i;

	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		r = env_num(vars[i][0]);
		n = env_num(vars[i][1]);
		if (r >= 0 && n > r && n <= MAX_RANKS) {
			*lrank = (int)r;
			*lsize = (int)n;
			*who = vars[i][2];
			return true;
		}
	}
	r = env_num("SLURM_LOCALID");
	n = slurm_tasks_on(getenv("SLURM_STEP_TASKS_PER_NODE"), env_num("SLURM_NODEID"));
	if (n < 0)
		n = env_num("SLURM_NTASKS_PER_NODE");
	if (r >= 0 && n > r && n <= MAX_RANKS) {
		*lrank = (int)r;
		*lsize = (int)n;
		*who = "Slurm";
		return true;
	}
	if (odx_fab_local_ranks(lrank, lsize) == 0 && *lrank >= 0 && *lsize > *lrank) {
		*who = "PMIx";
		return true;
	}
	return false;
}

void odx__dist_share_host(odx_context *ctx)
{
	static _Atomic bool told; /* the fallback is said once per process, not per context */
	const char *who = "";
	char pus[128] = "";
	int lrank, lsize, rc;

	ctx->local_size = 1;
	if (!local_ranks(&lrank, &lsize, &who) || lsize <= 1)
		return;
	ctx->local_size = lsize;
	/* odx-run never binds: a narrow mask there is the whole job's (taskset odx-run ...). */
	rc = odx__topo_share(ctx->topo, lrank, lsize, strcmp(who, "odx-run") == 0);
	odx__topo_cpuset_str(ctx->topo, pus, sizeof(pus));
	if (rc == 0) {
		odx__log(ctx, ODX_LOG_INFO, "local rank %d of %d on this host (%s): PUs %s", lrank,
			 lsize, who, pus);
	} else if (rc == ODX__TOPO_LAUNCHER_BOUND) {
		odx__log(ctx, ODX_LOG_INFO,
			 "local rank %d of %d on this host (%s): keeping the launcher's binding, "
			 "PUs %s", lrank, lsize, who, pus);
	} else if (rc == ODX__TOPO_TOO_FEW_PUS) {
		/* Binding two ranks' threads to one core would serialise them for good; unbound,
		 * the kernel's scheduler shares the cores among them. Each rank counts one PU as
		 * its own when host devices size their threads (host.threads = 0): 4 ranks on 2
		 * cores run 4 compute threads, not 8 that take turns. */
		ctx->bind = false;
		ctx->share_pus = 1;
		if (!atomic_exchange(&told, true))
			odx__log(ctx, ODX_LOG_WARN,
				 "%d ranks on this host (%s) but %u PUs (%s): ranks share the "
				 "PUs, threads are not bound (host.bind ignored), host devices "
				 "size their threads for one PU a rank",
				 lsize, who, odx__topo_pus(ctx->topo), pus);
	}
}

/*
 * fabric.progress. A polling progress thread is the fastest where it has a core of its own; where
 * it shares its rank's cores with the workers (ranks co-located on a host, a core per worker) it
 * takes turns with them on the cores, and every cross-rank edge waits for a scheduler decision.
 * Then the workers drive the fabric while they wait for work (the completions that make their
 * next tasks ready run on them: no wake-up) and the progress thread parks meanwhile.
 */
static void assist_choose(odx_context *ctx)
{
	const char *mode = odx__config_str(ctx->config, "fabric.progress");
	unsigned pus = odx__topo_pus(ctx->topo);
	bool on;

	if (strcmp(mode, "auto") == 0)
		/* a core per worker in its slice, or more ranks than PUs (slices not made) */
		on = ctx->local_size > 1 && ctx->idle_spin_ns > 0 &&
		     ((unsigned)ctx->ndevices >= pus || (unsigned)ctx->local_size > pus);
	else
		on = strcmp(mode, "workers") == 0;
	ctx->assist_spin_ns = 1000u * (uint64_t)odx__config_int(ctx->config, "fabric.assist_spin_us");
	atomic_store(&ctx->fab_assist, on);
	odx_fab_set_assist(ctx->fab, on);
	odx__log(ctx, ODX_LOG_INFO,
		 "fabric progress (fabric.progress = %s): %s (%d ranks on this host, %u PUs, %d "
		 "devices)",
		 mode, on ? "idle workers drive it, the progress thread parks meanwhile" :
			    "the progress thread polls",
		 ctx->local_size, pus, ctx->ndevices);
}

/* Enters the section the close waits out (odx__dist_close); false when the mode is off. */
static bool assist_enter(odx_context *ctx)
{
	if (!atomic_load(&ctx->fab_assist))
		return false;
	atomic_fetch_add(&ctx->fab_assisting, 1);
	if (atomic_load(&ctx->fab_assist))
		return true;
	atomic_fetch_sub(&ctx->fab_assisting, 1);
	return false;
}

bool odx__dist_assist_begin(odx_context *ctx)
{
	if (!assist_enter(ctx))
		return false;
	odx_fab_assist_begin(ctx->fab);
	return true;
}

void odx__dist_assist_poll(odx_context *ctx)
{
	odx_fab_assist_poll(ctx->fab);
}

void odx__dist_assist_end(odx_context *ctx, bool more_work)
{
	odx_fab_assist_end(ctx->fab, more_work);
	atomic_fetch_sub(&ctx->fab_assisting, 1);
}

void odx__dist_assist_sleep(odx_context *ctx, bool waiting)
{
	if (!assist_enter(ctx))
		return;
	odx_fab_assist_sleep(ctx->fab, waiting);
	atomic_fetch_sub(&ctx->fab_assisting, 1);
}

/* After posting transfers nobody waits for: a worker in assisted mode starts them with a round
 * of its own (the progress thread stays parked), any other thread wakes the progress thread. */
static void dist_kick(odx_context *ctx)
{
	if (atomic_load(&ctx->fab_assist) && odx__worker_self)
		odx_fab_assist_kick(ctx->fab);
	else
		odx_fab_kick(ctx->fab);
}

/* The device whose `xfers_out` counts t while the fabric has it, or NULL. */
static odx__device *xfer_device(const odx__task *t)
{
	odx_context *ctx = t->ctx;

	return t->device >= 0 && t->device < ctx->ndevices ? &ctx->devices[t->device] : NULL;
}

int odx__dist_open(odx_context *ctx, char *err, size_t errlen)
{
	const char *size_env = getenv("ODX_SIZE"), *pmix = getenv("PMIX_RANK");
	odx_fab_params p;
	char why[512] = "";
	int rc;

	ctx->rank = 0;
	ctx->size = 1;
	/* Not launched as several ranks: nothing to join. */
	if ((!size_env || !size_env[0] || strcmp(size_env, "1") == 0) && !pmix)
		return 0;
	fab_params(ctx, &p);
	rc = odx_fab_open(&p, &ctx->fab, why, sizeof(why));
	if (rc) {
		snprintf(err, errlen, "cannot join the job's fabric (fabric.provider = %s): %s",
			 p.provider, why[0] ? why : odx_strerror(rc));
		ctx->fab = NULL;
		return rc;
	}
	ctx->rank = odx_fab_rank(ctx->fab);
	ctx->size = odx_fab_size(ctx->fab);
	if (ctx->size > MAX_RANKS) {
		snprintf(err, errlen, "%d ranks: this version runs at most %d ranks", ctx->size,
			 MAX_RANKS);
		odx_fab_close(ctx->fab);
		ctx->fab = NULL;
		return ODX_ENOSYS;
	}
	if (ctx->size <= 1) {
		odx_fab_close(ctx->fab);
		ctx->fab = NULL;
		return 0;
	}
	if (ctx->stats) {
		ctx->peers = calloc((size_t)ctx->size, sizeof(*ctx->peers));
		if (!ctx->peers) {
			snprintf(err, errlen, "out of memory for the statistics of %d ranks",
				 ctx->size);
			odx_fab_close(ctx->fab);
			ctx->fab = NULL;
			return ODX_ENOMEM;
		}
		pthread_mutex_init(&ctx->peers_lock, NULL);
	}
	odx_fab_set_handlers(ctx->fab, on_msg, on_peer, ctx);
	assist_choose(ctx);
	odx__log(ctx, ODX_LOG_INFO, "rank %d of %d, fabric provider %s", ctx->rank, ctx->size,
		 odx_fab_provider(ctx->fab));
	return 0;
}

void odx__dist_close(odx_context *ctx)
{
	int rc;

	if (!ctx->fab)
		return;
	/* A clean end: nobody leaves while another rank may still send to it. */
	rc = odx_fab_barrier(ctx->fab, 0);
	if (rc)
		odx__log(ctx, ODX_LOG_WARN, "closing rank %d: the final barrier failed: %s", ctx->rank,
			 odx_strerror(rc));
	/* Workers still spinning stop driving it before it goes (they poll no more from here). */
	atomic_store(&ctx->fab_assist, false);
	while (atomic_load(&ctx->fab_assisting) > 0)
		sched_yield();
	odx_fab_close(ctx->fab);
	ctx->fab = NULL;
	if (ctx->peers) {
		pthread_mutex_destroy(&ctx->peers_lock);
		free(ctx->peers);
		ctx->peers = NULL;
	}
}

/* ---- the replicated bookkeeping --------------------------------------------------------- */

/* The next transfer key of b, the same on every rank: the transport's keys are 55 bits, 31 for
 * the buffer, 24 for the count (transfers of one buffer 16M apart are never in flight
 * together); buffer field 0 is the collectives'. */
static uint64_t xfer_key(odx_buffer *b)
{
	return (((b->id - 1) % 0x7fffffffull + 1) << 24) | (b->xfer_seq++ & 0xffffff);
}

/* Submits this rank's side of one transfer of b from rank `src` to rank `dst`, for a task tagged
 * `why` (NULL: for a host read or write). */
static int transfer(odx_context *ctx, odx_buffer *b, int src, int dst, int priority,
		    const char *why)
{
	/* the transport's keys are 55 bits: 31 for the buffer, 24 for the count (transfers of one
	 * buffer 16M apart are never in flight together); buffer field 0 is the collectives' */
	uint64_t key = (((b->id - 1) % 0x7fffffffull + 1) << 24) | (b->xfer_seq & 0xffffff);
	/* A buffer with parts moves part by part, one key each (its layout is a fact of program
	 * order: the same part count on both sides). */
	int nparts = b->layout ? b->layout->nparts : 0;
	odx__task *t;
	int rc;

	b->xfer_seq += nparts > 0 ? (uint32_t)nparts : 1;
	rc = holds_also(ctx, b, dst);
	if (rc)
		return rc;
	if (ctx->rank != src && ctx->rank != dst)
		return 0;
	t = odx__task_new(ctx);
	if (!t)
		return odx__fail(ctx, ODX_ENOMEM, "out of memory for a transfer task");
	t->kind = ctx->rank == src ? ODX__TASK_SEND : ODX__TASK_RECV;
	t->nargs = 1;
	/* A send reads the buffer; a receive replaces it (after the local readers of the old
	 * bytes, before the local users of the new ones). */
	t->args[0] = ODX_BUF(b, t->kind == ODX__TASK_SEND ? ODX_R : ODX_W);
	t->peer = ctx->rank == src ? dst : src;
	t->xfer_key = key;
	t->xfer_nparts = nparts;
	/* Its consumer's priority, known alike on both sides: a user's priorities above 0 no
	 * longer leave the transfers their tasks wait for behind every other kernel. */
	atomic_store_explicit(&t->priority, priority, memory_order_relaxed);
	/* "<direction> rank P, <buffer N or 'label'> <for what>": the trace names the span by the
	 * part after the comma (trace_xfer). */
	char who[ODX_LABEL_MAX + 24];
	odx__buffer_name(b, who, sizeof(who));
	if (why && why[0])
		snprintf(t->tag, sizeof(t->tag), "%s rank %d, %s for '%s'",
			 t->kind == ODX__TASK_SEND ? "send to" : "receive from", t->peer, who, why);
	else
		snprintf(t->tag, sizeof(t->tag), "%s rank %d, %s%s",
			 t->kind == ODX__TASK_SEND ? "send to" : "receive from", t->peer, who,
			 why ? "" : " for a host read or write");
	rc = odx__task_submit(ctx, t, ODX__ADMIT_FORCE);
	return rc;
}

/*
 * A later consumer on rank r, more urgent than the transfer that brought b there: that transfer
 * (this rank's side of it, if it has one and it has not run) takes the consumer's priority. On r
 * it is b's last writer, a RECV; on the sender, a SEND to r among b's readers. Both ranks see the
 * same consumer, so both raise their side.
 */
static void raise_transfer(odx_context *ctx, odx_buffer *b, int r, int priority)
{
	odx__task *t = NULL;
	int i;

	pthread_mutex_lock(&ctx->submit_lock); /* guards last_writer and readers (task.c) */
	if (ctx->rank == r) {
		if (b->last_writer && b->last_writer->kind == ODX__TASK_RECV)
			t = b->last_writer;
	} else {
		for (i = b->nreaders - 1; i >= 0 && !t; i--)
			if (b->readers[i]->kind == ODX__TASK_SEND && b->readers[i]->peer == r)
				t = b->readers[i];
	}
	if (t && (atomic_load(&t->done) || t->priority >= priority))
		t = NULL;
	if (t)
		atomic_fetch_add(&t->refs, 1);
	pthread_mutex_unlock(&ctx->submit_lock);
	if (t) {
		odx__sched_raise(ctx, t, priority);
		odx__task_put(t);
	}
}

/* The rank with the latest version to copy from: the lowest one holding it. */
static int source_rank(const odx_context *ctx, const odx_buffer *b)
{
	size_t w;

	if (b->valid_kind == VALID_ALL)
		return 0;
	if (b->valid_kind == VALID_ONE)
		return b->valid_one;
	for (w = 0; w < set_words(ctx); w++)
		if (b->valid_set[w])
			return (int)(w * 64) + __builtin_ctzll(b->valid_set[w]);
	return 0; /* not reached: a set holds its writer */
}

int odx__dist_source(odx_buffer *b)
{
	return b->ctx->fab ? source_rank(b->ctx, b) : b->ctx->rank;
}

/* Every rank computes the same placement from the same facts. */
static int place(odx_context *ctx, const odx_arg *args, int nargs, const odx_kernel *k,
		 const odx_task_opts *opts)
{
	int i, first = -1;

	if (ctx->policy) {
		odx__rank_task rt;
		int owners[64], out = -1;
		uint64_t bytes[64], total = 0;
		int nb = 0;

		for (i = 0; i < nargs && nb < 64; i++)
			if (args[i].kind == ODX_ARG_BUFFER) {
				owners[nb] = args[i].v.buffer->home_rank;
				bytes[nb] = args[i].v.buffer->size;
				total += bytes[nb++];
			}
		rt = (odx__rank_task){.task_id = 0,
				      .kernel = k->name,
				      .priority = opts ? opts->priority : 0,
				      .bytes = total,
				      .tag = opts && opts->tag ? opts->tag : "",
				      .nbufs = nb,
				      .owner_rank = owners,
				      .buf_bytes = bytes};
		if (odx__policy_place_rank(ctx, &rt, 1, ctx->size, &out) > 0 && out >= 0 &&
		    out < ctx->size)
			return out;
	}
	/* Owner computes: the owner of the first buffer written, else of the first buffer. */
	for (i = 0; i < nargs; i++) {
		if (args[i].kind != ODX_ARG_BUFFER)
			continue;
		if ((args[i].access ? args[i].access : k->params[i].access) & ODX_W)
			return args[i].v.buffer->home_rank;
		if (first < 0)
			first = args[i].v.buffer->home_rank;
	}
	return first < 0 ? 0 : first;
}

int odx__dist_kernel(odx_context *ctx, const odx_arg *args, int nargs, const odx_kernel *k,
		     const odx_task_opts *opts)
{
	int r, i, j, rc, prio = opts ? opts->priority : 0;

	if (!ctx->fab)
		return ctx->rank;
	r = place(ctx, args, nargs, k, opts);
	for (i = 0; i < nargs; i++) {
		odx_buffer *b = args[i].v.buffer;

		if (args[i].kind != ODX_ARG_BUFFER)
			continue;
		for (j = 0; j < i; j++)
			if (args[j].kind == ODX_ARG_BUFFER && args[j].v.buffer == b)
				break;
		/* Written bytes may be only some of the buffer: the rank needs the latest
		 * version of every buffer it touches, written or read. */
		if (j < i)
			continue;
		if (has(b, r)) {
			/* Only a copied version came by a transfer, and only its ends have a side. */
			if (b->valid_kind == VALID_SET && (r == ctx->rank || has(b, ctx->rank)))
				raise_transfer(ctx, b, r, prio);
			continue;
		}
		rc = transfer(ctx, b, source_rank(ctx, b), r, prio,
			      opts && opts->tag ? opts->tag : "");
		if (rc)
			return rc;
	}
	return r;
}

void odx__dist_written(odx_context *ctx, const odx_arg *args, int nargs, int rank)
{
	int i;

	if (!ctx->fab)
		return;
	for (i = 0; i < nargs; i++)
		if (args[i].kind == ODX_ARG_BUFFER && (args[i].access & ODX_W))
			holds_only(args[i].v.buffer, rank);
}

int odx__dist_read(odx_buffer *b)
{
	odx_context *ctx = b->ctx;
	int r, rc;

	if (!ctx->fab)
		return 0;
	for (r = 0; r < ctx->size; r++) {
		if (has(b, r))
			continue;
		/* The caller waits for these: before any kernel. */
		rc = transfer(ctx, b, source_rank(ctx, b), r, INT_MAX, NULL);
		if (rc)
			return rc;
	}
	return 0;
}

void odx__dist_write(odx_buffer *b, bool full)
{
	odx_context *ctx = b->ctx;

	if (!ctx->fab)
		return;
	if (!full)
		odx__dist_read(b); /* the bytes it leaves alone must be the latest everywhere */
	b->valid_kind = VALID_ALL;
}

int odx__dist_shuffle(odx_context *ctx, odx_buffer *const *src, odx_buffer *const *dst,
		      int priority, const char *tag, uint64_t keys[2])
{
	int s, rc;

	keys[0] = keys[1] = 0;
	if (!ctx->fab)
		return 0;
	/* Rank s sends from its own copy of src[s]: the latest version goes there first, as for
	 * a task of rank s that reads it. */
	for (s = 0; s < ctx->size; s++) {
		if (has(src[s], s))
			continue;
		rc = transfer(ctx, src[s], source_rank(ctx, src[s]), s, priority, tag);
		if (rc)
			return rc;
	}
	/* Two keys of dst[0]'s sequence, the sizes' and the parts': each pair of ranks uses them
	 * once per direction, and no other transfer of dst[0] draws them. */
	keys[0] = xfer_key(dst[0]);
	keys[1] = xfer_key(dst[0]);
	return 0;
}

void odx__dist_shuffled(odx_context *ctx, odx_buffer *const *dst, odx_buffer *const *counts)
{
	int d;

	if (!ctx->fab)
		return;
	for (d = 0; d < ctx->size; d++) {
		holds_only(dst[d], d);
		if (counts)
			holds_only(counts[d], d);
	}
}

/* ---- running the transfers ------------------------------------------------------------- */

void odx__dist_peer_begin(odx_context *ctx, int peer, uint64_t t0)
{
	struct odx__peer_stats *p;

	if (!ctx->peers)
		return;
	p = &ctx->peers[peer];
	pthread_mutex_lock(&ctx->peers_lock);
	if (p->inflight++ == 0)
		p->since = t0;
	pthread_mutex_unlock(&ctx->peers_lock);
}

/* It ended at `now` (status 0: its bytes moved; counted: it was begun). */
void odx__dist_peer_end(odx_context *ctx, int peer, bool send, int status, size_t bytes,
			uint64_t t0, uint64_t now)
{
	struct odx__peer_stats *p;

	if (!ctx->peers)
		return;
	p = &ctx->peers[peer];
	pthread_mutex_lock(&ctx->peers_lock);
	if (--p->inflight == 0 && now > p->since)
		p->busy_ns += now - p->since;
	if (now > t0)
		p->summed_ns += now - t0;
	if (status)
		p->failed++;
	else if (send)
		p->sent++, p->sent_bytes += bytes;
	else
		p->recvd++, p->recvd_bytes += bytes;
	pthread_mutex_unlock(&ctx->peers_lock);
}

/* A transfer was handed to the fabric at t->t_start. */
static void peer_begin(odx__task *t)
{
	odx__dist_peer_begin(t->ctx, t->peer, t->t_start);
}

static void peer_end(odx__task *t, int status, uint64_t now)
{
	odx__dist_peer_end(t->ctx, t->peer, t->kind == ODX__TASK_SEND, status,
			   t->xfer_bytes /* the valid bytes that moved */, t->t_start, now);
}

/* The span of a transfer on its peer's lane: "buffer N for '<tag>', SIZE" ("'label' for ...") and
 * how it ended. */
static void trace_xfer(odx__task *t, int status, uint64_t t0, uint64_t t1)
{
	odx_context *ctx = t->ctx;
	const char *what = strstr(t->tag, ", ");
	double size = (double)t->xfer_bytes;
	const char *unit = "B", *end = "";
	char name[112];

	if (!ctx->tracing)
		return;
	if (size >= 1 << 20)
		size /= 1 << 20, unit = "MiB";
	else if (size >= 1 << 10)
		size /= 1 << 10, unit = "KiB";
	if (status == ODX_ECANCELED)
		end = " (aborted)";
	else if (status)
		end = " (failed)";
	snprintf(name, sizeof(name), "%s, %.*f %s%s", what ? what + 2 : t->tag, *unit == 'B' ? 0 : 1,
		 size, unit, end);
	odx__trace_span_sized(odx__trace_peer_lane(ctx, t->peer, t->kind == ODX__TASK_SEND), name,
			      t->kind == ODX__TASK_SEND ? "send" : "receive", t0, t1, t->id,
			      t->xfer_bytes, t->args[0].v.buffer->id);
}

/* A part whose home copy is strided inside its parent (a 2D tile): it travels packed. */
static bool part_strided(const odx_buffer *b)
{
	return b->part_of && b->part_shape.count > 1 && b->part_shape.pitch != b->part_shape.width;
}

/* Between a part's packed bytes and its runs in the parent's host copy at `home`. */
static void part_pack(const odx_buffer *b, void *packed, const char *home)
{
	for (size_t i = 0; i < b->part_shape.count; i++)
		memcpy((char *)packed + i * b->part_shape.width, home + i * b->part_shape.pitch,
		       b->part_shape.width);
}

static void part_unpack(const odx_buffer *b, char *home, const void *packed)
{
	for (size_t i = 0; i < b->part_shape.count; i++)
		memcpy(home + i * b->part_shape.pitch,
		       (const char *)packed + i * b->part_shape.width, b->part_shape.width);
}

static void *home_bytes(odx_buffer *b)
{
	odx__replica *r0 = &b->replicas[odx__home(b)]; /* staged there (odx__task_memnode) */

	return (char *)(uintptr_t)r0->mem + r0->off;
}

static void xfer_done(void *arg, int status, const char *msg)
{
	odx__task *t = arg;
	odx_context *ctx = t->ctx;
	char why[ODX__MSG_MAX];
	uint64_t id = t->args[0].v.buffer->id;
	odx__device *dev = xfer_device(t);

	/* before the task finishes (and `load` drops): a polling worker reads xfers_out first */
	if (dev)
		atomic_fetch_sub(&dev->xfers_out, 1);

	/* What came: its lengths are the new version's, set before it is published
	 * (odx__unstage, from odx__task_finish). */
	if (status == 0 && t->kind == ODX__TASK_RECV && !t->args[0].v.buffer->part_of) {
		odx_buffer *b = t->args[0].v.buffer;

		pthread_mutex_lock(&b->lock);
		if (t->xfer_nparts) {
			t->xfer_bytes = 0;
			for (int i = 0; i < t->xfer_nparts; i++) {
				b->layout->len[i] = t->xfer_lens[i];
				t->xfer_bytes += t->xfer_lens[i];
			}
		} else {
			b->length = t->xfer_len;
			t->xfer_bytes = t->xfer_len;
		}
		pthread_mutex_unlock(&b->lock);
	}

	/* A strided part: what came lands in its runs before the task completes. */
	if (t->xfer_stage) {
		if (status == 0 && t->kind == ODX__TASK_RECV)
			part_unpack(t->args[0].v.buffer, home_bytes(t->args[0].v.buffer),
				    t->xfer_stage);
		free(t->xfer_stage);
		t->xfer_stage = NULL;
	}

	/* Before the task finishes: a waiter woken by it may close the context. */
	if (t->t_start) {
		uint64_t now = odx__now_ns();

		peer_end(t, status, now);
		trace_xfer(t, status, t->t_start, now);
	}
	if (status == 0) {
		size_t n = t->xfer_bytes;

		atomic_fetch_add(t->kind == ODX__TASK_SEND ? &ctx->sent_bytes : &ctx->recv_bytes, n);
		atomic_fetch_add(&ctx->xfers, 1);
		odx__task_finish(t, 0, NULL);
		return;
	}
	if (status == ODX_ECANCELED && t->kind == ODX__TASK_RECV && msg && msg[0]) {
		/* The sender's data failed (odx__dist_send_failed): msg is the first failure. It
		 * becomes this receive's origin, so its local readers are canceled naming it. */
		t->origin = strdup(msg);
		snprintf(why, sizeof(why),
			 "receiving from rank %d of buffer %llu canceled: rank %d has no data to "
			 "send, an earlier failure: %s",
			 t->peer, (unsigned long long)id, t->peer, msg);
		odx__task_finish(t, status, why);
		return;
	}
	snprintf(why, sizeof(why), "%s rank %d of buffer %llu failed: %s%s%s",
		 t->kind == ODX__TASK_SEND ? "sending to" : "receiving from", t->peer,
		 (unsigned long long)t->args[0].v.buffer->id, odx_err_name(status), msg ? ": " : "",
		 msg ? msg : "");
	odx__task_finish(t, status, why);
}

/* One part's transfer of a buffer with parts ended: the task's ends with the last one, with the
 * first failure. */
static void part_xfer_done(void *arg, int status, const char *msg)
{
	odx__task *t = arg;
	int zero = 0;

	if (status && atomic_compare_exchange_strong(&t->xfer_status, &zero, status))
		t->xfer_msg = msg ? strdup(msg) : NULL;
	if (atomic_fetch_sub(&t->xfer_left, 1) != 1)
		return;
	status = atomic_load(&t->xfer_status);
	xfer_done(t, status, status ? t->xfer_msg : NULL);
}

/* A buffer with parts: each part's valid prefix under its own key, sized (the receiver learns
 * each length from its announcement: odx_fab_send_sized / odx_fab_recv_upto). An empty part
 * costs its announcement only. 0, or the refusal of the first part (the ones posted before it
 * still complete, and end the task with it). */
static int run_parts(odx__task *t, odx_buffer *b, char *host)
{
	odx_context *ctx = t->ctx;
	const odx__layout *lay = b->layout;
	int i, n = t->xfer_nparts, rc = 0;

	if (t->kind == ODX__TASK_RECV) {
		t->xfer_lens = calloc((size_t)n, sizeof(size_t));
		if (!t->xfer_lens)
			return ODX_ENOMEM;
	} else {
		pthread_mutex_lock(&b->lock);
		t->xfer_bytes = odx__buffer_length(b);
		pthread_mutex_unlock(&b->lock);
	}
	atomic_store(&t->xfer_left, n + 1); /* + 1 until every part is posted */
	atomic_store(&t->xfer_status, 0);
	if (t->kind == ODX__TASK_SEND)
		t->xfer_posted = true;
	for (i = 0; i < n; i++) {
		uint64_t key = (t->xfer_key & ~0xffffffull) | ((t->xfer_key + (uint64_t)i) & 0xffffff);

		if (t->kind == ODX__TASK_SEND)
			rc = odx_fab_send_sized(ctx->fab, t->peer, key, host + lay->off[i],
						lay->len[i], part_xfer_done, t);
		else
			rc = odx_fab_recv_upto(ctx->fab, t->peer, key, host + lay->off[i],
					       lay->cap[i], &t->xfer_lens[i], part_xfer_done, t);
		if (rc)
			break;
	}
	if (i == 0 && rc) {
		/* Nothing posted: the caller reports it; nothing calls back. */
		if (t->kind == ODX__TASK_SEND)
			t->xfer_posted = false;
		free(t->xfer_lens);
		t->xfer_lens = NULL;
		return rc;
	}
	if (rc) {
		/* Some parts are posted: they end the task, failed with this. */
		int zero = 0;
		char msg[128];

		snprintf(msg, sizeof(msg), "the fabric refused part %d of %d: %s", i, n,
			 odx_strerror(rc));
		if (atomic_compare_exchange_strong(&t->xfer_status, &zero, rc))
			t->xfer_msg = strdup(msg);
		atomic_fetch_sub(&t->xfer_left, n - i);
		/* The receiver waits for every part: the ones never sent are called off. */
		for (; t->kind == ODX__TASK_SEND && i < n; i++)
			odx_fab_send_abort(ctx->fab, t->peer,
					   (t->xfer_key & ~0xffffffull) |
						   ((t->xfer_key + (uint64_t)i) & 0xffffff),
					   ODX_ECANCELED, msg);
	}
	dist_kick(ctx);
	part_xfer_done(t, 0, NULL); /* this thread's share */
	return 0;
}

static int dist_post(odx__task *t, odx_buffer *b, void *host);

int odx__dist_run(odx__task *t)
{
	odx_context *ctx = t->ctx;
	odx_buffer *b = t->args[0].v.buffer;
	void *host = home_bytes(b);
	int rc;

	if (!ctx->fab)
		return ODX_ECLOSED;
	rc = dist_post(t, b, host);
	if (rc && xfer_device(t))
		atomic_fetch_sub(&xfer_device(t)->xfers_out, 1); /* done will not run */
	return rc;
}

/* odx__dist_run's posting; xfers_out counts t from here (done may run before this returns). */
static int dist_post(odx__task *t, odx_buffer *b, void *host)
{
	odx_context *ctx = t->ctx;
	int rc;

	if (xfer_device(t))
		atomic_fetch_add(&xfer_device(t)->xfers_out, 1);
	/* A tile's home copy is its runs inside the parent: the fabric moves it packed, through
	 * a staging copy (packed here for a send, unpacked by xfer_done for a receive). */
	t->xfer_stage = NULL;
	if (part_strided(b)) {
		t->xfer_stage = malloc(b->size);
		if (!t->xfer_stage)
			return odx__fail(ctx, ODX_ENOMEM, "out of memory staging %zu bytes of part "
					 "#%llu for rank %d", b->size, (unsigned long long)b->id,
					 t->peer);
		if (t->kind == ODX__TASK_SEND)
			part_pack(b, t->xfer_stage, host);
		host = t->xfer_stage;
	}
	/* Timed from here (the trace's span, the per-peer statistics); set before the fabric
	 * sees it: done may run on the progress thread before the call returns. */
	if (ctx->tracing || ctx->peers) {
		t->t_start = odx__now_ns();
		peer_begin(t);
	}
	if (t->xfer_nparts > 0) {
		rc = run_parts(t, b, host);
		if (rc == 0)
			return 0;
	} else if (b->part_of) {
		/* A part of a partition has no run-time length: all of it moves. */
		t->xfer_bytes = b->size;
		if (t->kind == ODX__TASK_SEND) {
			/* A send the fabric took fails by itself on both sides (a failed peer, a
			 * length mismatch); only one it never took needs an abort. */
			t->xfer_posted = true;
			rc = odx_fab_send(ctx->fab, t->peer, t->xfer_key, host, b->size, xfer_done,
					  t);
			if (rc)
				t->xfer_posted = false; /* done will not run */
		} else {
			rc = odx_fab_recv(ctx->fab, t->peer, t->xfer_key, host, b->size, xfer_done,
					  t);
		}
	} else if (t->kind == ODX__TASK_SEND) {
		/* Its valid bytes only, announced with their length (docs/sizes.md). */
		pthread_mutex_lock(&b->lock);
		t->xfer_bytes = b->length;
		pthread_mutex_unlock(&b->lock);
		t->xfer_posted = true;
		rc = odx_fab_send_sized(ctx->fab, t->peer, t->xfer_key, host, t->xfer_bytes,
					xfer_done, t);
		if (rc)
			t->xfer_posted = false;
	} else {
		rc = odx_fab_recv_upto(ctx->fab, t->peer, t->xfer_key, host, b->size, &t->xfer_len,
				       xfer_done, t);
	}
	if (!rc)
		dist_kick(ctx); /* nobody waits on the fabric for it: start it now */
	if (rc) {
		free(t->xfer_stage); /* done will not run */
		t->xfer_stage = NULL;
	}
	if (rc && t->t_start) {
		/* Refused: done will not run; the span says so, and a send's abort adds none. */
		uint64_t now = odx__now_ns();

		peer_end(t, rc, now);
		trace_xfer(t, rc, t->t_start, now);
	}
	return rc;
}

void odx__dist_send_failed(odx__task *t, const char *origin)
{
	odx_context *ctx = t->ctx;
	int rc;

	if (!ctx->fab)
		return;
	/* Never run (its input failed): an instant on the lane, as its receiver's will end. */
	if (!t->t_start) {
		uint64_t now = odx__now_ns();

		trace_xfer(t, ODX_ECANCELED, now, now);
		if (ctx->peers) {
			pthread_mutex_lock(&ctx->peers_lock);
			ctx->peers[t->peer].failed++;
			pthread_mutex_unlock(&ctx->peers_lock);
		}
	}
	/* One control message under the transfer's key instead of the bytes; a successful send
	 * costs nothing more. The receive completes with ODX_ECANCELED and the origin. */
	rc = odx_fab_send_abort(ctx->fab, t->peer, t->xfer_key, ODX_ECANCELED, origin);
	/* A buffer with parts: every part's key is told. */
	for (int i = 1; rc == 0 && i < t->xfer_nparts; i++)
		rc = odx_fab_send_abort(ctx->fab, t->peer,
					(t->xfer_key & ~0xffffffull) |
						((t->xfer_key + (uint64_t)i) & 0xffffff),
					ODX_ECANCELED, origin);
	if (rc)
		odx__log(ctx, ODX_LOG_WARN,
			 "rank %d could not tell rank %d that buffer %llu will not come: %s "
			 "(its receive fails when that rank is found failed)",
			 ctx->rank, t->peer, (unsigned long long)t->args[0].v.buffer->id,
			 odx_strerror(rc));
}

void odx__dist_stats_print(odx_context *ctx, void (*emit)(odx_context *, const char *))
{
	char line[512];
	odx_fab_stats st;
	int r;

	if (!ctx->fab)
		return;
	odx_fab_get_stats(ctx->fab, &st);
	snprintf(line, sizeof(line),
		 "  rank %d of %d (%s): %llu transfers, %.1f MiB sent, %.1f MiB received; fabric: "
		 "%llu messages, %llu bad messages dropped, %llu retries, %llu throttled; progress "
		 "thread slept %llu times (%llu with data posted, %.3f s)",
		 ctx->rank, ctx->size, odx_fab_provider(ctx->fab),
		 (unsigned long long)atomic_load(&ctx->xfers),
		 (double)atomic_load(&ctx->sent_bytes) / (1 << 20),
		 (double)atomic_load(&ctx->recv_bytes) / (1 << 20),
		 (unsigned long long)(st.msgs_sent + st.msgs_recv), (unsigned long long)st.bad_msgs,
		 (unsigned long long)st.retries, (unsigned long long)st.throttled,
		 (unsigned long long)st.sleeps,
		 (unsigned long long)st.sleeps_posted, (double)st.sleep_ns / 1e9);
	emit(ctx, line);
	snprintf(line, sizeof(line),
		 "  rank %d progress: %s; %llu rounds run by workers (%llu did something), "
		 "progress thread parked %llu times, took over %llu times",
		 ctx->rank, atomic_load(&ctx->fab_assist) ? "workers drive it when idle" : "progress thread",
		 (unsigned long long)st.assist_rounds, (unsigned long long)st.assist_work,
		 (unsigned long long)st.parks, (unsigned long long)st.assist_takeovers);
	emit(ctx, line);
	if (!ctx->peers)
		return;
	/* One line per peer this rank exchanged with; each transfer is counted on both sides. */
	pthread_mutex_lock(&ctx->peers_lock);
	for (r = 0; r < ctx->size; r++) {
		const struct odx__peer_stats *p = &ctx->peers[r];

		if (!p->sent && !p->recvd && !p->failed)
			continue;
		snprintf(line, sizeof(line),
			 "  rank %d <-> rank %d: sent %llu transfers (%llu bytes), received %llu "
			 "(%llu bytes), %llu failed; in flight %.3f s (%.3f s summed over "
			 "transfers)",
			 ctx->rank, r, (unsigned long long)p->sent, (unsigned long long)p->sent_bytes,
			 (unsigned long long)p->recvd, (unsigned long long)p->recvd_bytes,
			 (unsigned long long)p->failed, (double)p->busy_ns / 1e9,
			 (double)p->summed_ns / 1e9);
		emit(ctx, line);
	}
	pthread_mutex_unlock(&ctx->peers_lock);
}

/* ---- public API ------------------------------------------------------------------------- */

ODX_API int odx_rank(odx_context *ctx)
{
	return ctx ? ctx->rank : ODX_EINVAL;
}

ODX_API int odx_size(odx_context *ctx)
{
	return ctx ? ctx->size : ODX_EINVAL;
}

ODX_API int odx_buffer_set_owner(odx_buffer *buf, int rank)
{
	int rc;

	if (odx__buffer_check(buf, "odx_buffer_set_owner"))
		return ODX_EINVAL;
	rc = odx__buffer_partitioned(buf, "odx_buffer_set_owner");
	if (rc)
		return rc;
	if (rank < 0 || rank >= buf->ctx->size)
		return odx__fail(buf->ctx, ODX_EINVAL,
				 "odx_buffer_set_owner: rank %d is outside the job's %d ranks", rank,
				 buf->ctx->size);
	buf->home_rank = rank;
	return 0;
}

ODX_API int odx_buffer_owner(const odx_buffer *buf)
{
	return odx__buffer_check(buf, "odx_buffer_owner") ? ODX_EINVAL : buf->home_rank;
}

ODX_API int odx_fabric_describe(odx_context *ctx, char *buf, size_t n)
{
	odx_fab_params p;
	size_t used;

	if (!ctx || !buf || n == 0)
		return ODX_EINVAL;
	fab_params(ctx, &p);
	if (ctx->fab)
		snprintf(buf, n, "rank %d of %d over %s\n", ctx->rank, ctx->size,
			 odx_fab_provider(ctx->fab));
	else
		snprintf(buf, n, "one rank (not launched by odx-run, mpirun or srun)\n");
	used = strlen(buf);
	return odx_fab_describe(&p, buf + used, n - used);
}
