/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_internal.h - what the files of core/policy/ share: the host's state (struct
 * odx__policy), a sandboxed Lua state (pstate), an escape point, the arguments of one operation
 * on a state, and the functions each file offers the others. Only the files of core/policy/ and the
 * policy test harness include it; the rest of core goes through policy.h.
 *
 * The files, bottom up (each calls only those before it, except that every file logs with say):
 *   model.c    performance models (kernel x device x size class) and link bandwidths;
 *   sandbox.c  the capped allocator, the odx.* library and the trimmed standard library;
 *   bound.c    the per-call budget: the watchdog thread, its soft hook and its hard bound (the
 *              escape signal), and run_op, the one way into a state;
 *   ops.c      marshalling: the tables each hook reads, the answers it writes, validated;
 *   host.c     opening, loading, reloading and closing; the calls of each hook;
 *   glue.c     tasks and contexts: the pending list, placement batches, the tick thread.
 * Lock order: the glue's h->lock (the Lua state) > ev_lock, pend_lock, wd_lock, tick_lock,
 * which are never held together.
 */
#ifndef ODX_CORE_POLICY_INTERNAL_H
#define ODX_CORE_POLICY_INTERNAL_H

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>

#include <lua.h>

#include "core.h"
#include "policy.h"

#define LOAD_BUDGET_FACTOR 100   /* loading, init and selftest get this many call budgets */
#define LINK_BANDWIDTH 10e9      /* bytes/s assumed for every link until links are measured */
#define MAX_SITES 64
#define EVENTS_MAX 1024
#define BATCH_MAX 256
#define RC_ABANDONED 100         /* run_op: the call was abandoned, its state freed */

enum hook {
	HOOK_PLACE,
	HOOK_INIT,
	HOOK_ON_COMPLETE,
	HOOK_SELFTEST,
	HOOK_PLACE_RANK, /* from the fabric: odx__policy_place_rank */
	HOOK_PREFETCH,   /* from the tier manager: odx__policy_prefetch */
	HOOK_EVICT,      /* from the tier manager: odx__policy_evict */
	HOOK_ON_TICK,    /* from the glue's tick thread */
	HOOK_COUNT,
};
extern const char *const hook_names[HOOK_COUNT];

/* Every entry into a state; named in the messages of an abandoned call and in the dump. */
enum op {
	OP_SETUP, /* load: the file's top level and the hook table */
	OP_INIT,
	OP_SELFTEST,
	OP_PLACE,
	OP_COMPLETE,
	OP_EVICT,
	OP_PREFETCH,
	OP_PLACE_RANK,
	OP_TICK,
	OP_CLOSE, /* lua_close at close or reload */
	OP_COUNT,
};
extern const char *const op_names[OP_COUNT];

/* Tables reused between calls, kept in the registry. */
enum table {
	T_BATCH,
	T_KERNEL,
	T_PRIORITY,
	T_BYTES,
	T_TAG,
	T_FEASIBLE, /* rows: per task, one entry per device */
	T_ESTIMATE,
	T_TRANSFER,
	T_RESIDENT,
	T_QUEUE,
	T_FREE_AT,
	T_OUT,
	T_OUT_DEVICE,
	T_EVENTS,
	T_EV_KERNEL,
	T_EV_DEVICE,
	T_EV_BYTES,
	T_EV_US,
	T_CAND, /* evict(need, candidates, out) */
	T_CAND_BUFFER,
	T_CAND_BYTES,
	T_CAND_AGE,
	T_CAND_PRIORITY,
	T_CAND_DIRTY,
	T_EVICT_OUT,
	T_EVICT_ORDER,
	T_WIN, /* prefetch(window, out) */
	T_WIN_TASK,
	T_WIN_DEVICE,
	T_WIN_PRIORITY,
	T_WIN_NBUFS,
	T_WIN_MISSING,
	T_WIN_TRANSFER,
	T_WIN_BUFFER, /* rows: per task, one entry per buffer */
	T_WIN_BUF_MISSING,
	T_WIN_FREE_AT,
	T_WIN_TASK_US,
	T_PREFETCH_OUT,
	T_PREFETCH_ORDER,
	T_RB, /* place_rank(batch, out) */
	T_RB_TASK,
	T_RB_KERNEL,
	T_RB_PRIORITY,
	T_RB_BYTES,
	T_RB_TAG,
	T_RB_NBUFS,
	T_RB_OWNER, /* rows: per task, one entry per buffer */
	T_RB_BUF_BYTES,
	T_RANK_OUT,
	T_RANK_OUT_RANK,
	T_TICK, /* on_tick(state) */
	T_TICK_QUEUE,
	T_TICK_FREE_AT,
	T_TICK_TASK_US,
	T_TICK_DONE,
	T_COUNT,
};
#define SHADOW_STR 64 /* kernel names and tags kept for comparison (longer ones: rewritten) */
/* The place inputs filled only once a policy has read them: T_KERNEL .. T_FREE_AT. */
#define LAZY_FIRST T_KERNEL
#define LAZY_LAST T_FREE_AT
#define LAZY_BIT(t) (1u << ((t) - LAZY_FIRST))

struct op_args;

/*
 * What the Lua copy of each place input holds, so that a batch rewrites only the entries that
 * changed: shadows of rows [0, valid[t]) are exact copies (policies must not write into their
 * inputs). Per-device arrays have one row.
 */
typedef struct shadow {
	int valid[T_COUNT];
	char (*kernel)[SHADOW_STR], (*tag)[SHADOW_STR]; /* copies: the originals may be freed */
	int *priority, *queue;
	uint64_t *bytes, *resident;
	bool *feasible;
	double *estimate, *transfer, *free_at;
	double *row;            /* one task's values for all devices, before comparing */
} shadow;

/* Header of every block the state's allocator hands to Lua: the blocks form a list that an
 * abandoned state is freed by, without walking Lua's own (possibly inconsistent) structures. */
typedef struct blk {
	struct blk *prev, *next;
} __attribute__((aligned(16))) blk;

/*
 * An escape point: where the watchdog's signal returns to when a call is past its hard deadline.
 * Lives on the caller's stack for the duration of one Lua entry. `unsafe` counts nested regions
 * (the allocator, odx.log, anything taking a lock or calling malloc) where a jump would leave
 * libc or a host lock inconsistent: the handler only sets `pending` there and the region's exit
 * jumps instead.
 */
typedef struct escape {
	sigjmp_buf jb;
	struct odx__policy *h;
	uint64_t seq;                   /* the call it guards (h->seq while it runs) */
	volatile sig_atomic_t unsafe, pending;
} escape;

typedef struct pstate {
	lua_State *L;
	odx__policy *h;
	blk blocks;               /* sentinel of the allocator's block list */
	escape *esc;              /* the running call's escape point, NULL between calls */
	size_t used, limit;
	int ref_msgh;
	int ref_hook[HOOK_COUNT]; /* LUA_NOREF where absent */
	int ref_table[T_COUNT];
	int place_line;           /* where `place` is defined, for answer errors */
	char chunk[256];          /* file name as Lua reports it */
	unsigned lazy_used;       /* LAZY_BIT of the inputs the policy has read */
	struct op_args *place_args; /* the running place call, for the lazy inputs */
	shadow sh;
} pstate;

typedef struct model_entry {
	char *kernel;             /* NULL: free slot */
	uint32_t hash;
	int device, bucket;
	uint64_t n, rejected;
	double mean, m2;          /* microseconds */
} model_entry;

typedef struct event {
	const char *kernel;
	int device;
	uint64_t bytes, ns;
} event;

struct odx__policy {
	char *spec, *path, *display;
	const unsigned char *text; /* embedded source, or NULL for a file */
	size_t text_len;
	struct timespec mtime;
	uint64_t next_check;
	int nd;
	odx__policy_device *devs;
	uint64_t limit, budget_ns;
	char *model_dir;
	void (*log)(void *user, odx_log_level level, bool error, const char *msg);
	void *log_user;

	pstate *cur;              /* NULL: none loaded (failed first load) */
	bool disabled;
	_Atomic unsigned hooks;   /* 1 << hook for each hook of cur, 0 while disabled: the seams
				   * skip the lock for a hook the policy lacks */
	int consecutive;
	_Atomic uint64_t failures;
	uint64_t sites[MAX_SITES];
	int nsites;
	uint64_t rng, rank_rng;
	uint64_t *rng_now;        /* rng, or rank_rng while place_rank runs */

	/* memory nodes and measured link bandwidths, [src * nnodes + dst], bytes/s */
	int nnodes;
	int *device_node;
	_Atomic double *bw;
	int *qnow;                /* queue lengths last seen (place, or the glue before a hook) */
	unsigned char *seen;      /* answer validation scratch, grown to the longest list */
	int seen_cap;
	uint64_t t_open;

	/* watchdog: arms a count hook on the running state only when a call overruns */
	pthread_t wd;
	bool wd_started, wd_stop;
	pthread_mutex_t wd_lock;  /* also held while a state is closed */
	pthread_cond_t wd_cond;
	_Atomic uint64_t seq;     /* odd while a call runs */
	_Atomic uint64_t armed_seq;
	_Atomic uint64_t call_start, call_budget;
	_Atomic(lua_State *) call_L;
	_Atomic int call_tid;     /* kernel thread id of the caller: the watchdog reads its CPU time */
	_Atomic bool wd_idle;
	_Atomic int call_op;      /* enum op of the running call (the context watchdog's dump) */
	_Atomic uint64_t call_ceiling; /* ns after call_start when the call is abandoned */
	_Atomic uint64_t kill_seq;     /* the call the watchdog has signalled */
	_Atomic bool gave_up;     /* a call was abandoned; cleared when a new version loads */
	uint64_t load_timeout_ns; /* policy.load_timeout_ms: ceiling of load and close */

	/* models */
	model_entry *models;
	size_t mcap, mcount;
	double *dev_mean;
	uint64_t *dev_n;

	/* completions, pushed by workers */
	pthread_mutex_t ev_lock;
	event ev[EVENTS_MAX], ev_copy[EVENTS_MAX];
	_Atomic int nev;          /* written under ev_lock; peeked without it */
	uint64_t ev_dropped;

	/* context glue */
	odx_context *ctx;
	pthread_mutex_t lock;     /* the Lua state: one thread at a time */
	pthread_mutex_t pend_lock;
	odx__task *pend_head, *pend_tail;
	_Atomic int npending;
	_Atomic bool placing;     /* the lock holder drains the pending list (see push) */
	uint64_t place_calls, placed; /* place calls and the tasks in them, for the close log */
	odx__task *batch[BATCH_MAX];
	odx__policy_task tasks[BATCH_MAX];
	bool *feasible;
	uint64_t *resident, *missing;
	double *transfer;
	int *queue, out[BATCH_MAX];
	bool *valid;              /* per memory node, scratch of describe_task */

	/* on_tick: a thread of the glue, every policy.tick_ms */
	pthread_t tick;
	bool tick_started, tick_stop;
	uint64_t tick_ns;
	pthread_mutex_t tick_lock;
	pthread_cond_t tick_cond;
	uint64_t *done;
};

typedef struct op_args {
	enum op op;
	pstate *s;
	/* place */
	const odx__policy_task *tasks;
	int n;
	const int *queue;
	int *out;
	int decided, invalid;
	char bad[ODX__MSG_MAX]; /* the first invalid answer */
	/* complete */
	const event *events;
	int nevents;
	/* evict */
	int memnode;
	uint64_t need;
	const odx__evict_cand *cands;
	/* prefetch */
	const odx__prefetch_task *window;
	/* place_rank */
	const odx__rank_task *ranks;
	int nranks;
	/* tick */
	const uint64_t *done;
	/* evict, prefetch: the answer; place_rank: per entry */
	int *order;
	int norder;
} op_args;

/* ---- model.c ---- */

uint32_t str_hash(const char *s);
int size_bucket(uint64_t bytes);
model_entry *model_find(odx__policy *h, const char *k, uint32_t hash, int d, int b,
			bool create);
void model_add(odx__policy *h, const char *kernel, int d, uint64_t bytes, double us);
void models_load(odx__policy *h);
void models_save(odx__policy *h);
double best_in(odx__policy *h, int dst);

/* ---- sandbox.c ---- */

void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
int traceback(lua_State *L);
void sandbox(lua_State *L, bool with_odx);

/* ---- bound.c ---- */

extern _Thread_local escape *volatile esc_now __attribute__((visibility("hidden")));
extern pthread_once_t esc_once;
__attribute__((noreturn)) void escape_jump(escape *e);
void escape_install(void);
void *watchdog(void *arg);
void state_free(odx__policy *h, pstate *s);
int run_op(pstate *s, op_args *a, uint64_t budget, char *err, size_t errlen);
void state_close(odx__policy *h, pstate *s);

/* Unsafe regions: code on a policy call's thread that takes a lock or calls malloc/free/stdio.
 * Cost outside a call: a load and a branch. */
static inline void unsafe_enter(escape *e)
{
	if (e)
		e->unsafe++;
	atomic_signal_fence(memory_order_seq_cst);
}

static inline void unsafe_leave(escape *e)
{
	atomic_signal_fence(memory_order_seq_cst);
	if (e && --e->unsafe == 0 && e->pending)
		escape_jump(e);
}

/* ---- ops.c ---- */

int protected_op(lua_State *L);
void shadow_free(shadow *sh);
bool shadow_alloc(shadow *sh, int nd);

/* ---- host.c ---- */

void say(odx__policy *h, odx_log_level level, bool error, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
void publish_hooks(odx__policy *h);
void process_events(odx__policy *h);

#endif /* ODX_CORE_POLICY_INTERNAL_H */
