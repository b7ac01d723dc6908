/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy_internal.h - what the files of core/policy/ share: the host's state (struct
 * odx__policy), a sandboxed Lua state (pol_state), an escape point, the arguments of one
 * operation on a state, and the functions each file offers the others (prefix pol_). Only the
 * files of core/policy/ and the policy test harness include it; the rest of core goes through
 * policy.h.
 *
 *   glue.c     the host inside a context: pending tasks, placement batches, the seams, the
 *              tick thread (the only file that knows tasks and devices);
 *   host.c     opening, loading, reloading and closing a policy; one call of each hook, with
 *              its failure handling; completions into the models;
 *   bound.c    the per-call budget: the watchdog thread, its soft hook, the hard bound (escape
 *              signal and siglongjmp); pol_run_op and pol_state_close, the entries into a state;
 *   ops.c      what runs inside a state: loading the file, filling each hook's tables, checking
 *              its answers;
 *   sandbox.c  what a state can reach: the capped allocator, the odx.* library, the trimmed
 *              standard library;
 *   model.c    performance models and link bandwidths (no Lua).
 * Calls go down this list, except pol_say and pol_publish_hooks (host.c), which every file may
 * call, and the unsafe regions below, which the allocator and odx.log open.
 *
 * Locks: h->lock (one thread in the Lua state, taken by the glue) comes before ev_lock and
 * wd_lock; those and tick_lock are leaves, never held together. The pending list has no lock.
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

#define POL_LOAD_BUDGET_FACTOR 100   /* loading, init and selftest get this many call budgets */
#define POL_LINK_BANDWIDTH 10e9      /* bytes/s assumed for every link until links are measured */
#define POL_MAX_SITES 64
#define POL_EVENTS_MAX 1024
#define POL_BATCH_MAX 256
#define POL_RC_ABANDONED 100         /* pol_run_op: the call was abandoned, its state freed */

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
extern const char *const pol_hook_names[HOOK_COUNT];

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
extern const char *const pol_op_names[OP_COUNT];

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
#define POL_SHADOW_STR 64 /* kernel names and tags kept for comparison (longer ones: rewritten) */
/* The place inputs filled only once a policy has read them: T_KERNEL .. T_FREE_AT. */
#define LAZY_FIRST T_KERNEL
#define LAZY_LAST T_FREE_AT
#define LAZY_BIT(t) (1u << ((t) - LAZY_FIRST))

struct pol_op_args;

/*
 * What the Lua copy of each place input holds, so that a batch rewrites only the entries that
 * changed: shadows of rows [0, valid[t]) are exact copies (policies must not write into their
 * inputs). Per-device arrays have one row.
 */
typedef struct pol_shadow {
	int valid[T_COUNT];
	char (*kernel)[POL_SHADOW_STR], (*tag)[POL_SHADOW_STR]; /* copies: the originals may be freed */
	int *priority, *queue;
	uint64_t *bytes, *resident;
	bool *feasible;
	double *estimate, *transfer, *free_at;
	double *row;            /* one task's values for all devices, before comparing */
} pol_shadow;

/* Header of every block the state's allocator hands to Lua: the blocks form a list that an
 * abandoned state is freed by, without walking Lua's own (possibly inconsistent) structures. */
typedef struct pol_blk {
	struct pol_blk *prev, *next;
} __attribute__((aligned(16))) pol_blk;

/*
 * An escape point: where the watchdog's signal returns to when a call is past its hard deadline.
 * Lives on the caller's stack for the duration of one Lua entry. `unsafe` counts nested regions
 * (the allocator, odx.log, anything taking a lock or calling malloc) where a jump would leave
 * libc or a host lock inconsistent: the handler only sets `pending` there and the region's exit
 * jumps instead.
 */
typedef struct pol_escape {
	sigjmp_buf jb;
	struct odx__policy *h;
	uint64_t seq;                   /* the call it guards (h->seq while it runs) */
	volatile sig_atomic_t unsafe, pending;
} pol_escape;

typedef struct pol_state {
	lua_State *L;
	odx__policy *h;
	pol_blk blocks;               /* sentinel of the allocator's block list */
	pol_escape *esc;              /* the running call's escape point, NULL between calls */
	size_t used, limit;
	int ref_msgh;
	int ref_hook[HOOK_COUNT]; /* LUA_NOREF where absent */
	int ref_table[T_COUNT];
	int place_line;           /* where `place` is defined, for answer errors */
	char chunk[256];          /* file name as Lua reports it */
	unsigned lazy_used;       /* LAZY_BIT of the inputs the policy has read */
	struct pol_op_args *place_args; /* the running place call, for the lazy inputs */
	pol_shadow sh;
} pol_state;

typedef struct pol_model {
	char *kernel;             /* NULL: free slot */
	uint32_t hash;
	int device, bucket;
	uint64_t n, rejected;
	double mean, m2;          /* microseconds */
} pol_model;

typedef struct pol_event {
	const char *kernel;
	int device;
	uint64_t bytes, ns;
} pol_event;

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

	pol_state *cur;              /* NULL: none loaded (failed first load) */
	bool disabled;
	_Atomic unsigned hooks;   /* 1 << hook for each hook of cur, 0 while disabled: the seams
				   * skip the lock for a hook the policy lacks */
	/* Something reads run times (the models): a hook that is shown them (on_complete,
	 * prefetch, evict, on_tick), batch.estimate or batch.free_at read once, odx.estimate
	 * called, or policy.model_dir set. Sticky: set once, never cleared. Until then the
	 * workers read no clock per task and record nothing (odx__policy_wants_times). */
	_Atomic bool want_times;
	int consecutive;
	_Atomic uint64_t failures;
	uint64_t sites[POL_MAX_SITES];
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
	pol_model *models;
	size_t mcap, mcount;
	double *dev_mean;
	uint64_t *dev_n;

	/* completions, pushed by workers */
	pthread_mutex_t ev_lock;
	pol_event ev[POL_EVENTS_MAX], ev_copy[POL_EVENTS_MAX];
	_Atomic int nev;          /* written under ev_lock; peeked without it */
	uint64_t ev_dropped;

	/* context glue */
	odx_context *ctx;
	pthread_mutex_t lock;     /* the Lua state: one thread at a time */
	/* Ready tasks waiting for placement: pushed onto a lock-free stack (one compare-and-swap,
	 * linked through policy_next); the drainer, holding `lock`, moves it into its own FIFO
	 * (pend_head, pend_tail: under `lock`) in push order and takes batches from there. */
	_Alignas(64) _Atomic(odx__task *) pend_stack;
	odx__task *pend_head, *pend_tail;
	_Atomic int npending;     /* pushed and not yet taken; may be briefly -1 (push, below) */
	_Atomic bool placing;     /* the lock holder drains the pending list (see push) */
	uint64_t place_calls, placed; /* place calls and the tasks in them, for the close log */
	odx__task *batch[POL_BATCH_MAX];
	odx__policy_task tasks[POL_BATCH_MAX];
	bool *feasible;
	uint64_t *resident, *missing;
	double *transfer;
	int *queue, out[POL_BATCH_MAX];
	bool *valid;              /* per memory node, scratch of describe_task */

	/* on_tick: a thread of the glue, every policy.tick_ms */
	pthread_t tick;
	bool tick_started, tick_stop;
	uint64_t tick_ns;
	pthread_mutex_t tick_lock;
	pthread_cond_t tick_cond;
	uint64_t *done;
};

typedef struct pol_op_args {
	enum op op;
	pol_state *s;
	/* place */
	const odx__policy_task *tasks;
	int n;
	const int *queue;
	int *out;
	int decided, invalid;
	char bad[ODX__MSG_MAX]; /* the first invalid answer */
	/* complete */
	const pol_event *events;
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
} pol_op_args;

/* ---- model.c ---- */

/* Hashes of kernel names (FNV-1a) and size classes (bit length of the bytes), the model keys. */
uint32_t pol_str_hash(const char *s);
int pol_size_bucket(uint64_t bytes);
/* The model of (kernel, device, size class), made when `create`; NULL if absent or no memory. */
pol_model *pol_model_find(odx__policy *h, const char *k, uint32_t hash, int d, int b,
			  bool create);
/* One completion, in microseconds, into its model and its device's mean task time. */
void pol_model_add(odx__policy *h, const char *kernel, int d, uint64_t bytes, double us);
/* policy.model_dir/odx-models.txt: read at open (same device in the same slot only), written
 * at close. */
void pol_models_load(odx__policy *h);
void pol_models_save(odx__policy *h);
/* Fastest measured link into memory node `dst` (bytes/s), POL_LINK_BANDWIDTH until measured. */
double pol_best_in(odx__policy *h, int dst);

/* ---- sandbox.c ---- */

/* lua_Alloc of every policy state (ud: its pol_state): capped, every block on the state's list. */
void *pol_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
/* Message handler of every protected call: the error with a traceback. */
int pol_traceback(lua_State *L);
/* Opens the allowed libraries and removes or wraps what a policy must not reach; the odx table
 * too when `with_odx` (a policy's state, not the harness's). */
void pol_sandbox(lua_State *L, bool with_odx);

/* ---- bound.c ---- */

/* The escape point of the Lua entry this thread is in; NULL outside one. */
extern _Thread_local pol_escape *volatile pol_esc_now __attribute__((visibility("hidden")));
/* Leaves the running call for its escape point (the signal handler, or an unsafe region's end). */
__attribute__((noreturn)) void pol_escape_jump(pol_escape *e);
/* Starts the host's watchdog thread (and installs the escape signal's handler, once per
 * process); 0 or ODX_ENOMEM. Stop joins it: only after the last entry into a state. */
int pol_watchdog_start(odx__policy *h);
void pol_watchdog_stop(odx__policy *h);
/* Frees a state without touching Lua (after an escape, or what lua_close left). */
void pol_state_free(odx__policy *h, pol_state *s);
/* Runs one operation on s under `budget` behind an escape point: the Lua status with the
 * message in err, or POL_RC_ABANDONED when the hard bound freed s (never use it again). */
int pol_run_op(pol_state *s, pol_op_args *a, uint64_t budget, char *err, size_t errlen);
/* lua_close under the load ceiling, then frees s; s may be NULL. */
void pol_state_close(odx__policy *h, pol_state *s);

/* Unsafe regions: code on a policy call's thread that takes a lock or calls malloc/free/stdio,
 * where a jump would leave libc or a lock inconsistent; the signal then only marks the escape
 * pending and the region's end jumps. Cost outside a call: a load and a branch. */
static inline void pol_unsafe_enter(pol_escape *e)
{
	if (e)
		e->unsafe++;
	atomic_signal_fence(memory_order_seq_cst);
}

static inline void pol_unsafe_leave(pol_escape *e)
{
	atomic_signal_fence(memory_order_seq_cst);
	if (e && --e->unsafe == 0 && e->pending)
		pol_escape_jump(e);
}

/* ---- ops.c ---- */

/* The lua_CFunction pol_run_op calls protected; its one argument is the pol_op_args. */
int pol_protected_op(lua_State *L);
/* The shadow of the place inputs for POL_BATCH_MAX tasks on nd devices; false when out of
 * memory (free what was made with pol_shadow_free). */
bool pol_shadow_alloc(pol_shadow *sh, int nd);
void pol_shadow_free(pol_shadow *sh);

/* ---- host.c ---- */

/* A message to the host's log (params.log); `error` marks a failure (the glue records it as the
 * context's last error). */
void pol_say(odx__policy *h, odx_log_level level, bool error, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* Publishes which hooks the running state has, for the seams' lock-free check (h->hooks). */
void pol_publish_hooks(odx__policy *h);
/* A policy read the models (or will be shown run times): workers time tasks from now on. */
void pol_want_times(odx__policy *h);
/* Moves the completions recorded by workers into the models, then on_complete. Under the
 * state's lock (one caller at a time). */
void pol_process_events(odx__policy *h);

#endif /* ODX_CORE_POLICY_INTERNAL_H */
