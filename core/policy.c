/* SPDX-License-Identifier: Apache-2.0 */
/*
 * policy.c - the Lua policy host: sandboxed states, budgeted calls, performance models, reload,
 * the context glue that batches ready tasks into `place` calls, and the test harness.
 *
 * The only file that includes the Lua headers. Every Lua entry runs inside lua_pcall with a
 * C traceback handler, including the C code that fills the input tables (a memory error there
 * must not reach the panic handler). See policy.h for the layering and docs/policies.md for the
 * user's view.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "core.h"
#include "policy.h"

#define LOAD_BUDGET_FACTOR 100   /* loading, init and selftest get this many call budgets */
#define MAX_FAILURES 8           /* consecutive failed calls before the policy is disabled */
#define RELOAD_CHECK_NS 100000000ull
#define LINK_BANDWIDTH 10e9      /* bytes/s assumed for every link until links are measured */
#define MAX_SITES 64
#define EVENTS_MAX 1024
#define BATCH_MAX 256
#define DEFER_BATCH 32           /* pending tasks that make a placement batch in any case */
#define DEFER_MIN_LOAD 2         /* a device with fewer tasks than this wants new ones placed */
#define HOOK_COUNT_STEP 1000     /* instructions between budget hook calls once armed */
#define OUTLIER_MIN_SAMPLES 10
#define OUTLIER_SIGMAS 5.0
#define MODEL_FILE "odx-models.txt"
#define RANK_INSTR_PER_US 100    /* place_rank's instruction budget per us of policy.budget */
/* The hard bound (docs/policies.md, "What a policy cannot do"): a call still running after this
 * many budgets of its thread's CPU time, or past its wall-clock ceiling, is abandoned. */
#define HARD_CPU_BUDGETS 5
#define HARD_WALL_BUDGETS 100    /* a hook call's wall-clock ceiling, in budgets ... */
#define HARD_WALL_MIN_NS 2000000000ull /* ... but never under 2 s (a preempted call is not cut) */
#define DEFAULT_LOAD_TIMEOUT_NS 10000000000ull /* policy.load_timeout_ms when params say 0 */
#define MAX_SOURCE (1u << 20)    /* bytes of policy source; parse time is linear in it */
#define ESCAPE_SIGNAL (SIGRTMIN + 5) /* sent by the watchdog to a thread past its hard deadline */
#define RC_ABANDONED 100         /* run_op: the call was abandoned, its state freed */

/* The shipped policies, embedded by odx-embed (policies/meson.build). */
#define EMBEDDED(X) X(eager) X(round_robin) X(locality) X(heft) X(lru) X(lookahead)
#define DECLARE(n)                                                                                 \
	extern const unsigned char odx__policy_lua_##n[];                                          \
	extern const size_t odx__policy_lua_##n##_size;
EMBEDDED(DECLARE)
#undef DECLARE
static const struct {
	const char *name;
	const unsigned char *text;
	const size_t *size;
} embedded[] = {
#define ENTRY(n) {#n, odx__policy_lua_##n, &odx__policy_lua_##n##_size},
	EMBEDDED(ENTRY)
#undef ENTRY
};

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
static const char *const hook_names[HOOK_COUNT] = {
	"place", "init", "on_complete", "selftest", "place_rank", "prefetch", "evict", "on_tick",
};

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
static const char *const op_names[OP_COUNT] = {
	"load", "init", "selftest", "place", "on_complete", "evict", "prefetch", "place_rank",
	"on_tick", "close",
};

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

/* ---- messages ------------------------------------------------------------------------------- */

static void say(odx__policy *h, odx_log_level level, bool error, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void say(odx__policy *h, odx_log_level level, bool error, const char *fmt, ...)
{
	char msg[ODX__MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (h->log)
		h->log(h->log_user, level, error, msg);
}

/* Publishes which hooks the running state has (for the seams' lock-free check). */
static void publish_hooks(odx__policy *h)
{
	unsigned mask = 0;
	int i;

	for (i = 0; h->cur && !h->disabled && i < HOOK_COUNT; i++)
		if (h->cur->ref_hook[i] != LUA_NOREF)
			mask |= 1u << i;
	atomic_store(&h->hooks, mask);
}

static uint64_t site_hash(const char *s)
{
	uint64_t x = 1469598103934665603ull;

	for (; *s; s++)
		x = (x ^ (unsigned char)*s) * 1099511628211ull;
	return x;
}

/* A failed call: the built-in decides instead. Logged once per site; repeated failures disable
 * the policy until it is reloaded. */
static void fail(odx__policy *h, const char *site, const char *msg)
{
	uint64_t key = site_hash(site);
	bool seen = false;
	int i;

	atomic_fetch_add(&h->failures, 1);
	for (i = 0; i < h->nsites; i++)
		seen = seen || h->sites[i] == key;
	if (!seen && h->nsites < MAX_SITES)
		h->sites[h->nsites++] = key;
	say(h, seen ? ODX_LOG_DEBUG : ODX_LOG_ERROR, true,
	    "policy %s: %s (the built-in least_loaded decides instead)", h->display, msg);
	if (++h->consecutive >= MAX_FAILURES && !h->disabled) {
		h->disabled = true;
		publish_hooks(h);
		say(h, ODX_LOG_ERROR, true,
		    "policy %s: disabled after %d consecutive failures, last: %s; the built-in "
		    "least_loaded decides until the file is reloaded",
		    h->display, h->consecutive, msg);
	}
}

/* ---- performance models --------------------------------------------------------------------- */

static uint32_t str_hash(const char *s)
{
	uint32_t x = 2166136261u;

	for (; *s; s++)
		x = (x ^ (unsigned char)*s) * 16777619u;
	return x;
}

static int size_bucket(uint64_t bytes)
{
	return bytes ? 64 - __builtin_clzll(bytes) : 0;
}

static size_t model_slot(const odx__policy *h, const char *k, uint32_t hash, int d, int b)
{
	size_t i = (hash ^ (uint32_t)d * 0x9e3779b1u ^ (uint32_t)b * 0x85ebca6bu) & (h->mcap - 1);

	while (h->models[i].kernel &&
	       !(h->models[i].hash == hash && h->models[i].device == d &&
		 h->models[i].bucket == b && strcmp(h->models[i].kernel, k) == 0))
		i = (i + 1) & (h->mcap - 1);
	return i;
}

static model_entry *model_find(odx__policy *h, const char *k, uint32_t hash, int d, int b,
			       bool create)
{
	size_t i;

	if (!h->mcap)
		return NULL;
	i = model_slot(h, k, hash, d, b);
	if (h->models[i].kernel)
		return &h->models[i];
	if (!create)
		return NULL;
	if (2 * (h->mcount + 1) > h->mcap) {
		model_entry *old = h->models, *grown = calloc(2 * h->mcap, sizeof(*grown));
		size_t oldcap = h->mcap, j;

		if (!grown)
			return NULL;
		h->models = grown;
		h->mcap *= 2;
		for (j = 0; j < oldcap; j++)
			if (old[j].kernel)
				h->models[model_slot(h, old[j].kernel, old[j].hash, old[j].device,
						     old[j].bucket)] = old[j];
		free(old);
		i = model_slot(h, k, hash, d, b);
	}
	h->models[i] = (model_entry){.hash = hash, .device = d, .bucket = b};
	h->models[i].kernel = strdup(k);
	if (!h->models[i].kernel)
		return NULL;
	h->mcount++;
	return &h->models[i];
}

/* Welford's running mean and variance, ignoring samples far above the mean once it is known. */
static void welford(uint64_t *n, double *mean, double *m2, uint64_t *rejected, double x)
{
	double delta;

	if (*n >= OUTLIER_MIN_SAMPLES &&
	    x > *mean + OUTLIER_SIGMAS * sqrt(*m2 / (double)(*n - 1))) {
		if (rejected)
			(*rejected)++;
		return;
	}
	(*n)++;
	delta = x - *mean;
	*mean += delta / (double)*n;
	*m2 += delta * (x - *mean);
}

static void model_add(odx__policy *h, const char *kernel, int d, uint64_t bytes, double us)
{
	model_entry *e = model_find(h, kernel, str_hash(kernel), d, size_bucket(bytes), true);
	double m2 = 0;

	if (e)
		welford(&e->n, &e->mean, &e->m2, &e->rejected, us);
	if (d >= 0 && d < h->nd)
		welford(&h->dev_n[d], &h->dev_mean[d], &m2, NULL, us);
}

static void models_load(odx__policy *h)
{
	char path[4096], kernel[256], dev[160];
	int d, b;
	unsigned long long n;
	double mean, m2;
	FILE *f;

	if (!h->model_dir || !h->model_dir[0])
		return;
	snprintf(path, sizeof(path), "%s/%s", h->model_dir, MODEL_FILE);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fscanf(f, "%255[^\t\n]\t%d\t%159[^\t\n]\t%d\t%llu\t%lg\t%lg\n", kernel, &d, dev, &b,
		      &n, &mean, &m2) == 7) {
		model_entry *e;

		/* A model is only meaningful for the same device in the same slot. */
		if (d < 0 || d >= h->nd || strcmp(dev, h->devs[d].name) != 0)
			continue;
		e = model_find(h, kernel, str_hash(kernel), d, b, true);
		if (e && e->n == 0) {
			e->n = n;
			e->mean = mean;
			e->m2 = m2;
		}
	}
	fclose(f);
}

static void models_save(odx__policy *h)
{
	char path[4096], tmp[4200];
	FILE *f;
	size_t i;

	if (!h->model_dir || !h->model_dir[0] || h->mcount == 0)
		return;
	if (mkdir(h->model_dir, 0755) != 0 && errno != EEXIST) {
		say(h, ODX_LOG_WARN, false, "policy models: cannot create %s: %s", h->model_dir,
		    strerror(errno));
		return;
	}
	snprintf(path, sizeof(path), "%s/%s", h->model_dir, MODEL_FILE);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f) {
		say(h, ODX_LOG_WARN, false, "policy models: cannot write %s: %s", tmp,
		    strerror(errno));
		return;
	}
	for (i = 0; i < h->mcap; i++) {
		const model_entry *e = &h->models[i];

		if (!e->kernel || e->n == 0 || strpbrk(e->kernel, "\t\n") ||
		    strpbrk(h->devs[e->device].name, "\t\n"))
			continue;
		fprintf(f, "%s\t%d\t%s\t%d\t%llu\t%.17g\t%.17g\n", e->kernel, e->device,
			h->devs[e->device].name, e->bucket, (unsigned long long)e->n, e->mean,
			e->m2);
	}
	if (fclose(f) != 0 || rename(tmp, path) != 0)
		say(h, ODX_LOG_WARN, false, "policy models: cannot write %s: %s", path,
		    strerror(errno));
}

/* ---- the watchdog --------------------------------------------------------------------------- */

static void budget_hook(lua_State *L, lua_Debug *ar)
{
	odx__policy *h = *(odx__policy **)lua_getextraspace(L);
	lua_Debug where;

	(void)ar;
	/* Armed for a call that has ended meanwhile: disarm, say nothing. */
	if (atomic_load(&h->seq) != atomic_load(&h->armed_seq)) {
		lua_sethook(L, NULL, 0, 0);
		return;
	}
	/* From now on every instruction raises: a script that catches the error with pcall gets
	 * it again at its next instruction, level by level, until it leaves the policy. */
	lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
	if (lua_getstack(L, 0, &where) && lua_getinfo(L, "Sl", &where) && where.currentline > 0)
		luaL_error(L, "%s:%d: budget exceeded (policy.budget = %d us per call)",
			   where.short_src, where.currentline,
			   (int)(atomic_load(&h->call_budget) / 1000));
	luaL_error(L, "budget exceeded (policy.budget = %d us per call)",
		   (int)(atomic_load(&h->call_budget) / 1000));
}

/* The calling thread's kernel id, read once per thread (a system call). */
static int thread_tid(void)
{
	static _Thread_local int tid;

	if (!tid)
		tid = (int)syscall(SYS_gettid);
	return tid;
}

/* CPU time of thread `tid` in ns, or 0 if it cannot be read (the thread is gone). The clock id
 * is Linux's per-thread CPU clock (what pthread_getcpuclockid builds), from the id alone, so a
 * thread that exited meanwhile only makes the read fail. */
static uint64_t thread_cpu_ns(int tid)
{
	clockid_t id = (clockid_t)((~(unsigned)tid << 3) | 6u);
	struct timespec ts;

	if (clock_gettime(id, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- the hard bound: escape points and the watchdog's signal ---------------------------------- */

/* The escape point of the Lua entry this thread is in; NULL outside one. Touched by the thread
 * before any signal can target it, so the handler's TLS read allocates nothing. */
static _Thread_local escape *volatile esc_now;
static struct sigaction esc_chained; /* what held ESCAPE_SIGNAL before us: called for others */
static pthread_once_t esc_once = PTHREAD_ONCE_INIT;

static __attribute__((noreturn)) void escape_jump(escape *e)
{
	esc_now = NULL;
	siglongjmp(e->jb, 1);
}

/* Jumps out of the call when the watchdog gave up on it, unless this thread is in an unsafe
 * region (then that region's exit jumps). Anything else is not ours: chained. */
static void escape_handler(int sig, siginfo_t *si, void *uc)
{
	escape *e = esc_now;
	int saved = errno;

	if (e && atomic_load(&e->h->kill_seq) == e->seq) {
		if (!e->unsafe)
			escape_jump(e);
		e->pending = 1;
	} else if ((esc_chained.sa_flags & SA_SIGINFO) && esc_chained.sa_sigaction) {
		esc_chained.sa_sigaction(sig, si, uc);
	} else if (esc_chained.sa_handler != SIG_DFL && esc_chained.sa_handler != SIG_IGN) {
		esc_chained.sa_handler(sig);
	}
	errno = saved;
}

/* Process-wide, once. SA_NODEFER: the handler leaves by siglongjmp without restoring a mask
 * (sigsetjmp(jb, 0)), so the signal must not be blocked while it runs. */
static void escape_install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = escape_handler;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(ESCAPE_SIGNAL, &sa, &esc_chained);
}

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

static void *watchdog(void *arg)
{
	odx__policy *h = arg;
	uint64_t period = h->budget_ns / 2, last_seq = 0, quiet_since = odx__now_ns();
	uint64_t seen_seq = 0, seen_cpu = 0; /* the running call, and its CPU time when first seen */

	if (period < 100000)
		period = 100000;
	if (period > 10000000)
		period = 10000000;
	pthread_setname_np(pthread_self(), "odx-policy-wd");
	pthread_mutex_lock(&h->wd_lock);
	while (!h->wd_stop) {
		uint64_t s, now;
		struct timespec ts;

		if (atomic_load(&h->wd_idle)) {
			pthread_cond_wait(&h->wd_cond, &h->wd_lock);
			quiet_since = odx__now_ns();
			continue;
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += (long)period;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&h->wd_cond, &h->wd_lock, &ts);
		s = atomic_load(&h->seq);
		now = odx__now_ns();
		if (s & 1) {
			uint64_t start = atomic_load(&h->call_start);
			uint64_t budget = atomic_load(&h->call_budget);
			uint64_t ceiling = atomic_load(&h->call_ceiling);
			lua_State *L = atomic_load(&h->call_L);
			int tid = atomic_load(&h->call_tid);
			uint64_t cpu = thread_cpu_ns(tid);
			bool burnt;

			/* The budget is CPU time: a call whose thread was preempted (a loaded machine)
			 * is not cut. Over its wall-clock budget, a call must also have burnt half a
			 * budget of CPU since the watchdog first saw it (so a runaway loop is cut
			 * after one to one and a half budgets). */
			if (s != seen_seq) {
				seen_seq = s;
				seen_cpu = cpu;
			}
			burnt = cpu == 0 || seen_cpu == 0 || cpu - seen_cpu >= budget / 2;
			/* The state cannot be closed under us: closing takes wd_lock. No L: a close. */
			if (L && atomic_load(&h->seq) == s && now > start + budget && burnt &&
			    atomic_load(&h->armed_seq) != s) {
				atomic_store(&h->armed_seq, s);
				lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_COUNT_STEP);
			}
			/* The hard bound: HARD_CPU_BUDGETS of the thread's CPU, or the ceiling, and
			 * the call is abandoned wherever it is (a C function, a hook-less handler).
			 * Re-sent every period until the call ends: a signal that found the thread
			 * between the escape point and the call is ignored. */
			if (atomic_load(&h->seq) == s && tid &&
			    ((cpu && seen_cpu && cpu - seen_cpu >= HARD_CPU_BUDGETS * budget) ||
			     now - start >= ceiling)) {
				atomic_store(&h->kill_seq, s);
				syscall(SYS_tgkill, (int)getpid(), tid, ESCAPE_SIGNAL);
			}
			quiet_since = now;
		} else if (s != last_seq) {
			quiet_since = now;
		} else if (now - quiet_since > 100000000ull) {
			/* No call for 100 ms: sleep until one starts (callers check wd_idle after
			 * bumping seq, and we re-read seq after setting it). */
			atomic_store(&h->wd_idle, true);
			if (atomic_load(&h->seq) != s)
				atomic_store(&h->wd_idle, false);
		}
		last_seq = s;
	}
	pthread_mutex_unlock(&h->wd_lock);
	return NULL;
}

static void wake_watchdog(odx__policy *h)
{
	pthread_mutex_lock(&h->wd_lock);
	atomic_store(&h->wd_idle, false);
	pthread_cond_signal(&h->wd_cond);
	pthread_mutex_unlock(&h->wd_lock);
}

/* Registers a Lua entry with the watchdog (L NULL: a close, no soft hook) and publishes its
 * escape point; returns the call's sequence number. The normal path stores a few words and
 * bumps a counter. */
static uint64_t call_begin(odx__policy *h, escape *e, lua_State *L, enum op op, uint64_t budget,
			   uint64_t ceiling)
{
	static _Thread_local bool unblocked;
	uint64_t mine;

	/* A thread of the program may have blocked the signal (a sigwait design): once per thread,
	 * let it through, or the hard bound could not reach this thread. */
	if (!unblocked) {
		sigset_t set;

		sigemptyset(&set);
		sigaddset(&set, ESCAPE_SIGNAL);
		pthread_sigmask(SIG_UNBLOCK, &set, NULL);
		unblocked = true;
	}
	/* Relaxed: the seq bump below (a full barrier) publishes them to the watchdog. */
	atomic_store_explicit(&h->call_L, L, memory_order_relaxed);
	atomic_store_explicit(&h->call_tid, thread_tid(), memory_order_relaxed);
	atomic_store_explicit(&h->call_budget, budget, memory_order_relaxed);
	atomic_store_explicit(&h->call_ceiling, ceiling, memory_order_relaxed);
	atomic_store_explicit(&h->call_op, (int)op, memory_order_relaxed);
	atomic_store_explicit(&h->call_start, odx__now_ns(), memory_order_relaxed);
	/* The escape point is live before the watchdog can see the call (seq odd). */
	e->h = h;
	e->seq = atomic_load_explicit(&h->seq, memory_order_relaxed) + 1;
	e->unsafe = 0;
	e->pending = 0;
	esc_now = e;
	mine = atomic_fetch_add(&h->seq, 1) + 1;
	if (atomic_load(&h->wd_idle)) {
		unsafe_enter(e); /* wd_lock */
		wake_watchdog(h);
		unsafe_leave(e);
	}
	return mine;
}

static void call_end(odx__policy *h, lua_State *L, uint64_t mine)
{
	esc_now = NULL;
	atomic_signal_fence(memory_order_seq_cst);
	atomic_fetch_add(&h->seq, 1);
	if (L && atomic_load(&h->armed_seq) == mine)
		lua_sethook(L, NULL, 0, 0);
}

/* ---- the sandbox ---------------------------------------------------------------------------- */

static void blk_link(pstate *s, blk *b)
{
	b->prev = &s->blocks;
	b->next = s->blocks.next;
	s->blocks.next->prev = b;
	s->blocks.next = b;
}

static void blk_unlink(blk *b)
{
	b->prev->next = b->next;
	b->next->prev = b->prev;
}

/* Lua's allocator: capped at policy.memory_limit, every block on the state's list. The list
 * and malloc are inconsistent only inside the unsafe region, where no escape lands. */
static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	pstate *s = ud;
	escape *e = s->esc;
	blk *b = ptr ? (blk *)ptr - 1 : NULL, *nb;
	size_t old = ptr ? osize : 0;

	if (nsize > old && s->used + (nsize - old) > s->limit)
		return NULL;
	unsafe_enter(e);
	if (b)
		blk_unlink(b);
	if (nsize == 0) {
		free(b);
		s->used -= old;
		unsafe_leave(e);
		return NULL;
	}
	nb = realloc(b, sizeof(blk) + nsize);
	if (!nb) {
		if (b)
			blk_link(s, b);
		unsafe_leave(e);
		return nsize <= old ? ptr : NULL; /* Lua assumes shrinking never fails */
	}
	blk_link(s, nb);
	s->used = s->used - old + nsize;
	unsafe_leave(e);
	return nb + 1;
}

static int traceback(lua_State *L)
{
	const char *msg = lua_tostring(L, 1);

	if (!msg)
		msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
	luaL_traceback(L, L, msg, 1);
	return 1;
}

static odx__policy *host_of(lua_State *L)
{
	return *(odx__policy **)lua_getextraspace(L);
}

/* odx.log(...) and print(...): to the context's log, at info level. */
static int lua_odx_log(lua_State *L)
{
	odx__policy *h = host_of(L);
	luaL_Buffer b;
	int i, n = lua_gettop(L);

	luaL_buffinit(L, &b);
	for (i = 1; i <= n; i++) {
		if (i > 1)
			luaL_addchar(&b, '\t');
		luaL_tolstring(L, i, NULL);
		luaL_addvalue(&b);
	}
	luaL_pushresult(&b);
	/* The log takes the context's locks and stdio: no escape may land inside. */
	unsafe_enter(esc_now);
	if (h)
		say(h, ODX_LOG_INFO, false, "policy %s: %.*s", h->display, ODX__MSG_MAX,
		    lua_tostring(L, -1));
	else
		fprintf(stderr, "%.*s\n", ODX__MSG_MAX, lua_tostring(L, -1)); /* the harness's state */
	unsafe_leave(esc_now);
	return 0;
}

/* xorshift64*, seeded the same way on every run. */
static uint64_t next_random(uint64_t *x)
{
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return *x * 2685821657736338717ull;
}

/* A uniform draw in [0, range] (range + 1 values, the full 64 bits when range is UINT64_MAX):
 * rejection of the draws that would bias the remainder; fewer than 2 draws on average. */
static uint64_t random_below(uint64_t *x, uint64_t range)
{
	uint64_t r = next_random(x), n = range + 1, floor_ok;

	if (range == UINT64_MAX)
		return r;
	floor_ok = (0 - n) % n; /* 2^64 mod n: draws below it are rejected */
	while (r < floor_ok)
		r = next_random(x);
	return r % n;
}

/* odx.random(): [0, 1); odx.random(m): 1..m; odx.random(m, n): m..n; odx.random(0): an integer
 * with all bits random (as math.random). Any bounds with m <= n, the full integer range
 * included; computed in unsigned arithmetic, so nothing overflows. */
static int lua_odx_random(lua_State *L)
{
	static _Thread_local uint64_t harness_rng = 0x2545f4914f6cdd1dull;
	odx__policy *h = host_of(L);
	uint64_t *x = h ? h->rng_now : &harness_rng;
	lua_Integer lo = 1, hi;

	if (lua_gettop(L) == 0) {
		lua_pushnumber(L, (lua_Number)(next_random(x) >> 11) * (1.0 / 9007199254740992.0));
		return 1;
	}
	hi = luaL_checkinteger(L, 1);
	if (lua_gettop(L) >= 2) {
		lo = hi;
		hi = luaL_checkinteger(L, 2);
	} else if (hi == 0) {
		lua_pushinteger(L, (lua_Integer)next_random(x));
		return 1;
	}
	luaL_argcheck(L, lo <= hi, lua_gettop(L) >= 2 ? 2 : 1, "interval is empty");
	lua_pushinteger(L, (lua_Integer)((uint64_t)lo + random_below(x, (uint64_t)hi - (uint64_t)lo)));
	return 1;
}

/* odx.argmin(row [, n]): index and value of the smallest number in row[1..n]; nil if none. n is
 * clamped to the row's raw length: the loop never runs past the entries that exist. */
static int lua_odx_argmin(lua_State *L)
{
	lua_Integer n, i, best = 0, len;
	lua_Number bestv = 0;

	luaL_checktype(L, 1, LUA_TTABLE);
	len = (lua_Integer)lua_rawlen(L, 1);
	n = luaL_optinteger(L, 2, len);
	if (n > len)
		n = len;
	for (i = 1; i <= n; i++) {
		int isnum;
		lua_Number v;

		if (lua_rawgeti(L, 1, i) != LUA_TNUMBER) {
			lua_pop(L, 1);
			continue;
		}
		v = lua_tonumberx(L, -1, &isnum);
		lua_pop(L, 1);
		if (isnum && (best == 0 || v < bestv)) {
			best = i;
			bestv = v;
		}
	}
	if (best == 0)
		return 0;
	lua_pushinteger(L, best);
	lua_pushnumber(L, bestv);
	return 2;
}

/* odx.estimate(kernel, device, bytes): mean and standard deviation in us, and the sample count;
 * nil when the model has no sample. */
static int lua_odx_estimate(lua_State *L)
{
	odx__policy *h = host_of(L);
	const char *k = luaL_checkstring(L, 1);
	lua_Integer d = luaL_checkinteger(L, 2);
	lua_Integer bytes = luaL_optinteger(L, 3, 0);
	model_entry *e;

	if (d < 1 || d > h->nd || bytes < 0)
		return 0;
	e = model_find(h, k, str_hash(k), (int)d - 1, size_bucket((uint64_t)bytes), false);
	if (!e || e->n == 0)
		return 0;
	lua_pushnumber(L, e->mean);
	lua_pushnumber(L, e->n > 1 ? sqrt(e->m2 / (double)(e->n - 1)) : 0);
	lua_pushinteger(L, (lua_Integer)e->n);
	return 3;
}

/* Fastest measured link into node `dst` from another node (bytes/s). */
static double best_in(odx__policy *h, int dst)
{
	double best = 0;
	int s;

	for (s = 0; s < h->nnodes; s++)
		if (s != dst) {
			double v = atomic_load_explicit(&h->bw[s * h->nnodes + dst],
							memory_order_relaxed);

			best = v > best ? v : best;
		}
	return best > 0 ? best : LINK_BANDWIDTH;
}

/* odx.bandwidth(src, dst): measured bytes/s of the link between two memory nodes (1-based);
 * math.huge within a node, nil for a node that does not exist. */
static int lua_odx_bandwidth(lua_State *L)
{
	odx__policy *h = host_of(L);
	lua_Integer a = luaL_checkinteger(L, 1), b = luaL_checkinteger(L, 2);

	if (!h || a < 1 || b < 1 || a > h->nnodes || b > h->nnodes)
		return 0;
	if (a == b)
		lua_pushnumber(L, HUGE_VAL);
	else
		lua_pushnumber(L, atomic_load_explicit(&h->bw[(a - 1) * h->nnodes + (b - 1)],
						       memory_order_relaxed));
	return 1;
}

/* ---- closing the hook-less holes (docs/policies.md, "What a policy cannot do") -------------- */

/* setmetatable without finalizers: Lua runs __gc with hooks off (during any allocation and at
 * lua_close), where no budget applies. Lua marks an object for finalization only when its
 * metatable has __gc as setmetatable is called, so refusing it here is enough; adding __gc to
 * the metatable later has no effect. */
static int sandbox_setmetatable(lua_State *L)
{
	int t = lua_type(L, 2);

	luaL_checktype(L, 1, LUA_TTABLE);
	luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
	if (t == LUA_TTABLE) {
		lua_pushliteral(L, "__gc");
		if (lua_rawget(L, 2) != LUA_TNIL)
			return luaL_error(L, "setmetatable: a metatable with __gc is not allowed in a "
					  "policy (finalizers run outside the budget)");
		lua_pop(L, 1);
	}
	if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL)
		return luaL_error(L, "cannot change a protected metatable");
	lua_settop(L, 2);
	lua_setmetatable(L, 1);
	return 1;
}

/* xpcall(f, msgh, ...) that runs msgh after the stack has unwound, as an ordinary call: Lua
 * runs a message handler before unwinding and, for an error raised by the budget hook, with
 * hooks off. The handler sees the error object, not the failing frames (no `debug` anyway). */
static int sandbox_xpcall(lua_State *L)
{
	int n = lua_gettop(L), i;

	luaL_checktype(L, 2, LUA_TFUNCTION);
	lua_pushvalue(L, 1);
	for (i = 3; i <= n; i++)
		lua_pushvalue(L, i);
	if (lua_pcall(L, n - 2 < 0 ? 0 : n - 2, LUA_MULTRET, 0) == LUA_OK) {
		lua_pushboolean(L, 1);
		lua_insert(L, n + 1);
		return lua_gettop(L) - n;
	}
	/* The handler's own failure (the budget's sticky error included) is the result. */
	lua_pushvalue(L, 2);
	lua_insert(L, n + 1);
	lua_pcall(L, 1, 1, 0);
	lua_pushboolean(L, 0);
	lua_insert(L, -2);
	return 2;
}

/* string.rep(s, n [, sep]) with an empty result answered at once: Lua's loops n times in C
 * copying nothing, which no allocation cap bounds. A non-empty result is bounded by the cap. */
static int sandbox_rep(lua_State *L)
{
	size_t l, lsep = 0;
	lua_Integer n;

	luaL_checklstring(L, 1, &l);
	n = luaL_checkinteger(L, 2);
	luaL_optlstring(L, 3, "", &lsep);
	if (n <= 0 || (l == 0 && (lsep == 0 || n == 1))) {
		lua_pushliteral(L, "");
		return 1;
	}
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, 1);
	return 1;
}

/* The most elements a table library loop may move: more than the memory cap can hold means
 * a __len that lies or a range of holes, each element a C iteration no cap bounds. */
static lua_Integer max_range(lua_State *L)
{
	odx__policy *h = *(odx__policy **)lua_getextraspace(L);
	uint64_t lim = h ? h->limit / 8 : (1ull << 26);

	return (lua_Integer)(lim < 4096 ? 4096 : lim);
}

/* table.insert, table.remove: refused on a table whose length (with __len) exceeds max_range. */
static int sandbox_table_shift(lua_State *L)
{
	lua_Integer len;

	luaL_checktype(L, 1, LUA_TTABLE);
	len = luaL_len(L, 1);
	if (len > max_range(L))
		return luaL_error(L, "table length %I is more than a policy's memory can hold",
				  (LUAI_UACINT)len);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
	return lua_gettop(L);
}

/* table.move(a1, f, e, t [, a2]): refused for a range longer than max_range. */
static int sandbox_table_move(lua_State *L)
{
	lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);

	if (e >= f && (lua_Unsigned)e - (lua_Unsigned)f >= (lua_Unsigned)max_range(L))
		return luaL_error(L, "table.move: range of %I elements is more than a policy's "
				  "memory can hold", (LUAI_UACINT)((lua_Unsigned)e - (lua_Unsigned)f));
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
	return lua_gettop(L);
}

/* Replaces lib[name] by a closure of `f` over the original function. */
static void wrap_lib(lua_State *L, int lib, const char *name, lua_CFunction f)
{
	lua_getfield(L, lib, name);
	lua_pushcclosure(L, f, 1);
	lua_setfield(L, lib, name);
}

/* Opens the allowed libraries and removes what a policy must not reach. */
static void sandbox(lua_State *L, bool with_odx)
{
	static const luaL_Reg libs[] = {
		{LUA_GNAME, luaopen_base},     {LUA_TABLIBNAME, luaopen_table},
		{LUA_STRLIBNAME, luaopen_string}, {LUA_MATHLIBNAME, luaopen_math},
		{LUA_UTF8LIBNAME, luaopen_utf8},
	};
	static const char *const removed[] = {"dofile", "loadfile", "load", "collectgarbage",
					      "require", "warn"};
	size_t i;

	for (i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
		luaL_requiref(L, libs[i].name, libs[i].func, 1);
		lua_pop(L, 1);
	}
	lua_pushglobaltable(L);
	for (i = 0; i < sizeof(removed) / sizeof(removed[0]); i++) {
		lua_pushnil(L);
		lua_setfield(L, -2, removed[i]);
	}
	lua_pushcfunction(L, lua_odx_log);
	lua_setfield(L, -2, "print");
	lua_pushcfunction(L, sandbox_setmetatable);
	lua_setfield(L, -2, "setmetatable");
	lua_pushcfunction(L, sandbox_xpcall);
	lua_setfield(L, -2, "xpcall");
	/* The string table is also the strings' __index: s:rep() gets the wrapper too. */
	lua_getfield(L, -1, LUA_STRLIBNAME);
	lua_pushnil(L);
	lua_setfield(L, -2, "dump");
	wrap_lib(L, lua_gettop(L), "rep", sandbox_rep);
	lua_pop(L, 1);
	lua_getfield(L, -1, LUA_TABLIBNAME);
	wrap_lib(L, lua_gettop(L), "insert", sandbox_table_shift);
	wrap_lib(L, lua_gettop(L), "remove", sandbox_table_shift);
	wrap_lib(L, lua_gettop(L), "move", sandbox_table_move);
	lua_pop(L, 1);
	/* math.random is seeded from the clock: replace it with the deterministic one. */
	lua_getfield(L, -1, LUA_MATHLIBNAME);
	lua_pushcfunction(L, lua_odx_random);
	lua_setfield(L, -2, "random");
	lua_pushnil(L);
	lua_setfield(L, -2, "randomseed");
	lua_pop(L, 1);
	if (with_odx) {
		static const luaL_Reg odx_funcs[] = {
			{"log", lua_odx_log},
			{"random", lua_odx_random},
			{"argmin", lua_odx_argmin},
			{"estimate", lua_odx_estimate},
			{"bandwidth", lua_odx_bandwidth},
			{NULL, NULL},
		};

		luaL_newlib(L, odx_funcs);
		lua_setfield(L, -2, "odx");
	}
	lua_pop(L, 1);
	/* Lock the string metatable: getmetatable("") answers a string, not the table. */
	lua_pushliteral(L, "");
	lua_getmetatable(L, -1);
	lua_pushliteral(L, "locked");
	lua_setfield(L, -2, "__metatable");
	lua_pop(L, 2);
}

/* ---- protected operations on a state -------------------------------------------------------- */

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

/* t[k] = top, raw: the host's writes into tables a policy can reach never run a metamethod. */
static void raw_setfield(lua_State *L, int t, const char *k)
{
	t = lua_absindex(L, t);
	lua_pushstring(L, k);
	lua_insert(L, -2);
	lua_rawset(L, t);
}

static int newref_table(lua_State *L, int narr)
{
	lua_createtable(L, narr, 0);
	return luaL_ref(L, LUA_REGISTRYINDEX);
}

static const char *const lazy_names[LAZY_LAST - LAZY_FIRST + 1] = {
	"kernel", "priority", "bytes", "tag", "feasible", "estimate", "transfer", "resident_bytes",
	"queue", "free_at",
};

static void fill_lazy(lua_State *L, pstate *s, const struct op_args *a, int t);

/* __index of a place batch: the first read of an input fills it and keeps it in the batch. */
static int batch_index(lua_State *L)
{
	pstate *s = lua_touserdata(L, lua_upvalueindex(1));
	const char *k = lua_tostring(L, 2);
	int t;

	if (!k || lua_type(L, 2) != LUA_TSTRING || !s->place_args)
		return 0;
	for (t = LAZY_FIRST; t <= LAZY_LAST; t++)
		if (strcmp(k, lazy_names[t - LAZY_FIRST]) == 0)
			break;
	if (t > LAZY_LAST)
		return 0;
	s->lazy_used |= LAZY_BIT(t);
	fill_lazy(L, s, s->place_args, t);
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[t]);
	lua_pushvalue(L, 2);
	lua_pushvalue(L, -2);
	lua_rawset(L, 1);
	return 1;
}

static void setup_tables(lua_State *L, pstate *s)
{
	static const struct {
		int parent;
		const char *field;
	} fields[T_COUNT] = {
		[T_KERNEL] = {T_BATCH, "kernel"},     [T_PRIORITY] = {T_BATCH, "priority"},
		[T_BYTES] = {T_BATCH, "bytes"},       [T_TAG] = {T_BATCH, "tag"},
		[T_FEASIBLE] = {T_BATCH, "feasible"}, [T_ESTIMATE] = {T_BATCH, "estimate"},
		[T_TRANSFER] = {T_BATCH, "transfer"}, [T_RESIDENT] = {T_BATCH, "resident_bytes"},
		[T_QUEUE] = {T_BATCH, "queue"},       [T_FREE_AT] = {T_BATCH, "free_at"},
		[T_OUT_DEVICE] = {T_OUT, "device"},   [T_EV_KERNEL] = {T_EVENTS, "kernel"},
		[T_EV_DEVICE] = {T_EVENTS, "device"}, [T_EV_BYTES] = {T_EVENTS, "bytes"},
		[T_EV_US] = {T_EVENTS, "us"},
		[T_CAND_BUFFER] = {T_CAND, "buffer"}, [T_CAND_BYTES] = {T_CAND, "bytes"},
		[T_CAND_AGE] = {T_CAND, "age_us"},    [T_CAND_PRIORITY] = {T_CAND, "priority"},
		[T_CAND_DIRTY] = {T_CAND, "dirty"},   [T_EVICT_ORDER] = {T_EVICT_OUT, "order"},
		[T_WIN_TASK] = {T_WIN, "task"},       [T_WIN_DEVICE] = {T_WIN, "device"},
		[T_WIN_PRIORITY] = {T_WIN, "priority"}, [T_WIN_NBUFS] = {T_WIN, "nbufs"},
		[T_WIN_MISSING] = {T_WIN, "missing"}, [T_WIN_TRANSFER] = {T_WIN, "transfer"},
		[T_WIN_BUFFER] = {T_WIN, "buffer"},   [T_WIN_BUF_MISSING] = {T_WIN, "buffer_missing"},
		[T_WIN_FREE_AT] = {T_WIN, "free_at"}, [T_WIN_TASK_US] = {T_WIN, "task_us"},
		[T_PREFETCH_ORDER] = {T_PREFETCH_OUT, "order"},
		[T_RB_TASK] = {T_RB, "task"},         [T_RB_KERNEL] = {T_RB, "kernel"},
		[T_RB_PRIORITY] = {T_RB, "priority"}, [T_RB_BYTES] = {T_RB, "bytes"},
		[T_RB_TAG] = {T_RB, "tag"},           [T_RB_NBUFS] = {T_RB, "nbufs"},
		[T_RB_OWNER] = {T_RB, "owner"},       [T_RB_BUF_BYTES] = {T_RB, "buffer_bytes"},
		[T_RANK_OUT_RANK] = {T_RANK_OUT, "rank"},
		[T_TICK_QUEUE] = {T_TICK, "queue"},   [T_TICK_FREE_AT] = {T_TICK, "free_at"},
		[T_TICK_TASK_US] = {T_TICK, "task_us"}, [T_TICK_DONE] = {T_TICK, "done"},
	};
	int t;

	for (t = 0; t < T_COUNT; t++)
		s->ref_table[t] = newref_table(L, 0);
	for (t = 0; t < T_COUNT; t++) {
		if (!fields[t].field || (t >= LAZY_FIRST && t <= LAZY_LAST))
			continue;
		lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[fields[t].parent]);
		lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[t]);
		lua_setfield(L, -2, fields[t].field);
		lua_pop(L, 1);
	}
	for (t = 0; t < T_COUNT; t++) {
		if (t != T_BATCH && t != T_WIN && t != T_TICK)
			continue;
		lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[t]);
		lua_pushinteger(L, s->h->nd);
		lua_setfield(L, -2, "ndevices");
		lua_pop(L, 1);
	}
	/* The place inputs appear on first read (batch_index), then stay and are kept current. */
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[T_BATCH]);
	lua_createtable(L, 0, 2);
	lua_pushlightuserdata(L, s);
	lua_pushcclosure(L, batch_index, 1);
	lua_setfield(L, -2, "__index");
	lua_pushliteral(L, "locked");
	lua_setfield(L, -2, "__metatable");
	lua_setmetatable(L, -2);
	lua_pop(L, 1);
}

static void op_setup(lua_State *L, pstate *s)
{
	odx__policy *h = s->h;
	const char *text = (const char *)h->text;
	size_t len = h->text_len;
	char chunkname[300];
	lua_Debug ar;
	int i;

	sandbox(L, true);
	snprintf(chunkname, sizeof(chunkname), "@%s", h->path ? h->path : h->display);
	if (luaL_loadbufferx(L, text, len, chunkname, "t") != LUA_OK)
		lua_error(L);
	lua_call(L, 0, 1);
	if (!lua_istable(L, -1))
		luaL_error(L, "%s: the file must return a table of hooks (got %s)", chunkname + 1,
			   luaL_typename(L, -1));
	/* Raw reads: a returned table's __index must not run outside the load's budget. */
	lua_pushliteral(L, "api");
	lua_rawget(L, -2);
	if (!lua_isnil(L, -1) && !(lua_isinteger(L, -1) && lua_tointeger(L, -1) == 1))
		luaL_error(L, "%s: 'api' must be 1 (the hook API this ODX implements)",
			   chunkname + 1);
	lua_pop(L, 1);
	for (i = 0; i < HOOK_COUNT; i++) {
		lua_pushstring(L, hook_names[i]);
		if (lua_rawget(L, -2) == LUA_TNIL) {
			lua_pop(L, 1);
			continue;
		}
		if (!lua_isfunction(L, -1))
			luaL_error(L, "%s: hook '%s' must be a function, not a %s", chunkname + 1,
				   hook_names[i], luaL_typename(L, -1));
		if (i == HOOK_PLACE) {
			lua_pushvalue(L, -1);
			lua_getinfo(L, ">S", &ar);
			s->place_line = ar.linedefined;
			snprintf(s->chunk, sizeof(s->chunk), "%s", ar.short_src);
		}
		s->ref_hook[i] = luaL_ref(L, LUA_REGISTRYINDEX);
	}
	if (s->ref_hook[HOOK_PLACE] == LUA_NOREF)
		luaL_error(L, "%s: the policy defines no 'place' function (required)",
			   chunkname + 1);
	setup_tables(L, s);
}

static void op_init(lua_State *L, pstate *s)
{
	odx__policy *h = s->h;
	int d;

	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_INIT]);
	lua_createtable(L, 0, 3);
	lua_pushinteger(L, h->nd);
	lua_setfield(L, -2, "ndevices");
	lua_pushnumber(L, LINK_BANDWIDTH);
	lua_setfield(L, -2, "bandwidth");
	lua_pushinteger(L, h->nnodes);
	lua_setfield(L, -2, "nnodes");
	lua_createtable(L, h->nd, 0);
	for (d = 0; d < h->nd; d++) {
		lua_createtable(L, 0, 5);
		lua_pushinteger(L, h->device_node[d] + 1);
		lua_setfield(L, -2, "node");
		lua_pushinteger(L, d + 1);
		lua_setfield(L, -2, "index");
		lua_pushstring(L, h->devs[d].kind);
		lua_setfield(L, -2, "kind");
		lua_pushstring(L, h->devs[d].name);
		lua_setfield(L, -2, "name");
		lua_pushinteger(L, (lua_Integer)h->devs[d].memory);
		lua_setfield(L, -2, "memory");
		lua_rawseti(L, -2, d + 1);
	}
	lua_setfield(L, -2, "devices");
	lua_call(L, 1, 0);
}

static void op_selftest(lua_State *L, pstate *s)
{
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_SELFTEST]);
	lua_call(L, 0, 1);
	if (lua_isboolean(L, -1) && !lua_toboolean(L, -1))
		luaL_error(L, "%s: selftest returned false", s->chunk[0] ? s->chunk : "policy");
	lua_pop(L, 1);
}

/* Pushes the reused table `t`; returns its stack index. */
static int push_table(lua_State *L, const pstate *s, enum table t)
{
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[t]);
	return lua_gettop(L);
}

/* Pushes row i of the reused table at idx, made (again) when it is not a table: rows are made
 * once and reused, but a policy may have overwritten one. Returns its stack index. */
static int push_row(lua_State *L, int idx, int i, int narr)
{
	if (lua_rawgeti(L, idx, i) != LUA_TTABLE) {
		lua_pop(L, 1);
		lua_createtable(L, narr, 0);
		lua_pushvalue(L, -1);
		lua_rawseti(L, idx, i);
	}
	return lua_gettop(L);
}

static bool same_string(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

/* Rewrites the entries of place input `t` that differ from its shadow (see struct shadow). */
static void fill_lazy(lua_State *L, pstate *s, const op_args *a, int t)
{
	odx__policy *h = s->h;
	shadow *sh = &s->sh;
	int nd = h->nd, n = a->n, valid = sh->valid[t], i, d, tab;

	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[t]);
	tab = lua_gettop(L);
	if (t == T_QUEUE || t == T_FREE_AT) {
		for (d = 0; d < nd; d++) {
			double f = h->dev_n[d] ? a->queue[d] * h->dev_mean[d] : 0;

			if (t == T_QUEUE && (!valid || sh->queue[d] != a->queue[d])) {
				lua_pushinteger(L, a->queue[d]);
				lua_rawseti(L, tab, d + 1);
				sh->queue[d] = a->queue[d];
			} else if (t == T_FREE_AT && (!valid || sh->free_at[d] != f)) {
				lua_pushnumber(L, f);
				lua_rawseti(L, tab, d + 1);
				sh->free_at[d] = f;
			}
		}
		sh->valid[t] = 1;
		lua_settop(L, tab - 1);
		return;
	}
	for (i = 0; i < n; i++) {
		const odx__policy_task *pt = &a->tasks[i];
		bool fresh = i >= valid;
		int row = 0, b;
		uint32_t hash;

		switch (t) {
		case T_KERNEL:
		case T_TAG: {
			char *old = t == T_KERNEL ? sh->kernel[i] : sh->tag[i];
			const char *str = t == T_KERNEL ? pt->kernel : pt->tag ? pt->tag : "";
			size_t len = strlen(str);

			/* old[0] == 1: a string too long to keep, never equal */
			if (fresh || len >= SHADOW_STR || old[0] == 1 || strcmp(old, str) != 0) {
				lua_pushlstring(L, str, len);
				lua_rawseti(L, tab, i + 1);
				if (len < SHADOW_STR) {
					memcpy(old, str, len + 1);
				} else {
					old[0] = 1;
					old[1] = '\0';
				}
			}
			break;
		}
		case T_PRIORITY:
			if (fresh || sh->priority[i] != pt->priority) {
				lua_pushinteger(L, pt->priority);
				lua_rawseti(L, tab, i + 1);
				sh->priority[i] = pt->priority;
			}
			break;
		case T_BYTES:
			if (fresh || sh->bytes[i] != pt->bytes) {
				lua_pushinteger(L, (lua_Integer)pt->bytes);
				lua_rawseti(L, tab, i + 1);
				sh->bytes[i] = pt->bytes;
			}
			break;
		default: /* rows: fetched only when an entry changed */
			if (t == T_ESTIMATE || t == T_TRANSFER) {
				/* Tasks of one kernel and size class in a row share their estimates:
				 * sh->row still holds the previous task's. */
				b = size_bucket(pt->bytes);
				if (t == T_TRANSFER) {
					for (d = 0; d < nd; d++)
						sh->row[d] = pt->transfer_us
								     ? pt->transfer_us[d]
								     : (double)pt->missing[d] * 1e6 /
									       best_in(h, h->device_node[d]);
				} else if (i == 0 || !same_string(a->tasks[i - 1].kernel, pt->kernel) ||
					   size_bucket(a->tasks[i - 1].bytes) != b) {
					hash = str_hash(pt->kernel);
					for (d = 0; d < nd; d++) {
						model_entry *e = model_find(h, pt->kernel, hash, d, b,
									    false);

						sh->row[d] = e && e->n ? e->mean : -1;
					}
				}
			}
			for (d = 0; d < nd; d++) {
				size_t k = (size_t)i * (size_t)nd + (size_t)d;

				switch (t) {
				case T_FEASIBLE:
					if (!fresh && sh->feasible[k] == pt->feasible[d])
						continue;
					sh->feasible[k] = pt->feasible[d];
					if (!row)
						row = push_row(L, tab, i + 1, nd);
					lua_pushboolean(L, pt->feasible[d]);
					break;
				case T_RESIDENT:
					if (!fresh && sh->resident[k] == pt->resident[d])
						continue;
					sh->resident[k] = pt->resident[d];
					if (!row)
						row = push_row(L, tab, i + 1, nd);
					lua_pushinteger(L, (lua_Integer)pt->resident[d]);
					break;
				default: {
					double *old = t == T_ESTIMATE ? &sh->estimate[k]
								      : &sh->transfer[k];

					if (!fresh && *old == sh->row[d])
						continue;
					*old = sh->row[d];
					if (!row)
						row = push_row(L, tab, i + 1, nd);
					lua_pushnumber(L, sh->row[d]);
					break;
				}
				}
				lua_rawseti(L, row, d + 1);
			}
			if (row)
				lua_pop(L, 1);
			break;
		}
	}
	if (t <= T_TAG) {
		/* Entries left from a larger batch would confuse `#`: clear them. */
		for (i = n; i < valid; i++) {
			lua_pushnil(L);
			lua_rawseti(L, tab, i + 1);
		}
		sh->valid[t] = n;
	} else if (n > valid) {
		sh->valid[t] = n; /* rows past n keep their (exact) contents */
	}
	lua_settop(L, tab - 1);
}

/* Sets batch.n and refreshes the inputs this policy has read so far; the others wait for their
 * first read (batch_index). */
static void fill_batch(lua_State *L, pstate *s, op_args *a)
{
	odx__policy *h = s->h;
	int t, d, batch;

	for (d = 0; d < h->nd; d++)
		h->qnow[d] = a->queue[d];
	batch = push_table(L, s, T_BATCH);
	lua_pushinteger(L, a->n);
	raw_setfield(L, batch, "n");
	s->place_args = a;
	for (t = LAZY_FIRST; t <= LAZY_LAST; t++)
		if (s->lazy_used & LAZY_BIT(t))
			fill_lazy(L, s, a, t);
}

static void bad_answer(op_args *a, int i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void bad_answer(op_args *a, int i, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	a->out[i] = -1;
	if (a->invalid++)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	snprintf(a->bad, sizeof(a->bad), "%s:%d: place: out.device[%d] %s", a->s->chunk,
		 a->s->place_line, i + 1, why);
}

static void op_place(lua_State *L, pstate *s, op_args *a)
{
	int batch, out, outdev, i, limit = a->n, nd = s->h->nd;

	fill_batch(L, s, a);
	batch = lua_gettop(L);
	out = push_table(L, s, T_OUT);
	outdev = push_table(L, s, T_OUT_DEVICE);
	lua_pushvalue(L, outdev); /* in case the policy replaced it */
	raw_setfield(L, out, "device");
	for (i = 1; i <= a->n || i <= (int)lua_rawlen(L, outdev); i++) {
		lua_pushnil(L);
		lua_rawseti(L, outdev, i);
	}
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_PLACE]);
	lua_pushvalue(L, batch);
	lua_pushvalue(L, out);
	lua_call(L, 2, 1);
	s->place_args = NULL;
	/* place may return how many entries it decided; the rest go to the built-in quietly. */
	if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 0 && lua_tointeger(L, -1) < limit)
		limit = (int)lua_tointeger(L, -1);
	for (i = 0; i < a->n; i++) {
		lua_Integer v;
		int isint;

		a->out[i] = -1;
		if (i >= limit)
			continue;
		lua_rawgeti(L, outdev, i + 1);
		switch (lua_type(L, -1)) {
		case LUA_TNIL:
			bad_answer(a, i, "is missing (set it to a device, or 0 for the built-in)");
			break;
		case LUA_TNUMBER:
			v = lua_tointegerx(L, -1, &isint);
			if (!isint)
				bad_answer(a, i, "= %s is not an integer", lua_tostring(L, -1));
			else if (v == 0)
				break;
			else if (v < 1 || v > nd)
				bad_answer(a, i, "= %lld is not a device (1..%d, or 0)", (long long)v,
					   nd);
			else if (!a->tasks[i].feasible[v - 1])
				bad_answer(a, i, "= %lld: task %d ('%s') cannot run on that device",
					   (long long)v, i + 1, a->tasks[i].kernel);
			else {
				a->out[i] = (int)v - 1;
				a->decided++;
			}
			break;
		default:
			bad_answer(a, i, "is a %s, not a device number", luaL_typename(L, -1));
			break;
		}
		lua_pop(L, 1);
	}
}

static void op_complete(lua_State *L, pstate *s, op_args *a)
{
	int ev = push_table(L, s, T_EVENTS), k, dv, by, us, i;

	k = push_table(L, s, T_EV_KERNEL);
	dv = push_table(L, s, T_EV_DEVICE);
	by = push_table(L, s, T_EV_BYTES);
	us = push_table(L, s, T_EV_US);
	lua_pushinteger(L, a->nevents);
	raw_setfield(L, ev, "n");
	for (i = 0; i < a->nevents; i++) {
		lua_pushstring(L, a->events[i].kernel);
		lua_rawseti(L, k, i + 1);
		lua_pushinteger(L, a->events[i].device + 1);
		lua_rawseti(L, dv, i + 1);
		lua_pushinteger(L, (lua_Integer)a->events[i].bytes);
		lua_rawseti(L, by, i + 1);
		lua_pushnumber(L, (double)a->events[i].ns / 1000.0);
		lua_rawseti(L, us, i + 1);
	}
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_ON_COMPLETE]);
	lua_pushvalue(L, ev);
	lua_call(L, 1, 0);
}

/* Pushes the reused output table `out` with a cleared list `t` as out[field] (n entries at
 * least); returns the list's stack index. */
static int push_out_list(lua_State *L, const pstate *s, enum table out, enum table t,
			 const char *field, int n)
{
	int o = push_table(L, s, out), list = push_table(L, s, t), len, i;

	lua_pushvalue(L, list);
	raw_setfield(L, o, field);
	len = (int)lua_rawlen(L, list);
	for (i = 1; i <= n || i <= len; i++) {
		lua_pushnil(L);
		lua_rawseti(L, list, i);
	}
	return list;
}

static void set_count(lua_State *L, int t, const char *field, lua_Integer v)
{
	lua_pushinteger(L, v);
	raw_setfield(L, t, field);
}

/* Reads an order answer: the hook's return value (how many; stack top) and out.<field>[1..k],
 * each a list index 1..n used at most once, into a->order as 0-based indices. An invalid
 * answer rejects the whole order: a->invalid is set and a->bad says why. */
static void read_order(lua_State *L, op_args *a, int list, int n, const char *hook)
{
	odx__policy *h = a->s->h;
	int k = n, i;

	if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 0 && lua_tointeger(L, -1) <= n) {
		k = (int)lua_tointeger(L, -1);
	} else if (!lua_isnil(L, -1)) {
		snprintf(a->bad, sizeof(a->bad), "%s: %s returned %s (how many entries of out.order "
			 "it decided, 0..%d, or nothing)", a->s->chunk, hook, luaL_typename(L, -1), n);
		a->invalid = 1;
		return;
	}
	if (h->seen_cap < n) {
		unsigned char *grown;

		unsafe_enter(esc_now);
		grown = realloc(h->seen, (size_t)n);
		unsafe_leave(esc_now);

		if (!grown)
			luaL_error(L, "out of memory");
		h->seen = grown;
		h->seen_cap = n;
	}
	memset(h->seen, 0, (size_t)n);
	a->norder = 0;
	for (i = 0; i < k; i++) {
		int isint, t = lua_rawgeti(L, list, i + 1);
		lua_Integer v = lua_tointegerx(L, -1, &isint);

		lua_pop(L, 1);
		if (t == LUA_TNIL && lua_isnil(L, -1))
			break; /* no count returned: the list ends at its first hole */
		if (t != LUA_TNUMBER || !isint || v < 1 || v > n || h->seen[v - 1]) {
			snprintf(a->bad, sizeof(a->bad), "%s: %s: out.order[%d] %s", a->s->chunk, hook,
				 i + 1,
				 t != LUA_TNUMBER ? "is not an index" :
				 !isint || v < 1 || v > n ? "is out of range" : "repeats an index");
			a->invalid = 1;
			return;
		}
		h->seen[v - 1] = 1;
		a->order[a->norder++] = (int)v - 1;
	}
}

static void op_evict(lua_State *L, pstate *s, op_args *a)
{
	int c = push_table(L, s, T_CAND), bu = push_table(L, s, T_CAND_BUFFER);
	int by = push_table(L, s, T_CAND_BYTES), age = push_table(L, s, T_CAND_AGE);
	int pr = push_table(L, s, T_CAND_PRIORITY), dt = push_table(L, s, T_CAND_DIRTY);
	int out = push_table(L, s, T_EVICT_OUT), list, i;
	uint64_t now = odx__now_ns();

	set_count(L, c, "n", a->n);
	set_count(L, c, "node", a->memnode + 1);
	set_count(L, c, "need", (lua_Integer)a->need);
	for (i = 0; i < a->n; i++) {
		const odx__evict_cand *e = &a->cands[i];

		lua_pushinteger(L, (lua_Integer)e->buffer_id);
		lua_rawseti(L, bu, i + 1);
		lua_pushinteger(L, (lua_Integer)e->bytes);
		lua_rawseti(L, by, i + 1);
		lua_pushnumber(L, e->last_use_ns == 0 ? HUGE_VAL
				  : e->last_use_ns >= now ? 0 : (double)(now - e->last_use_ns) / 1e3);
		lua_rawseti(L, age, i + 1);
		lua_pushinteger(L, e->priority);
		lua_rawseti(L, pr, i + 1);
		lua_pushboolean(L, e->dirty);
		lua_rawseti(L, dt, i + 1);
	}
	list = push_out_list(L, s, T_EVICT_OUT, T_EVICT_ORDER, "order", a->n);
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_EVICT]);
	lua_pushinteger(L, (lua_Integer)a->need);
	lua_pushvalue(L, c);
	lua_pushvalue(L, out);
	lua_call(L, 3, 1);
	read_order(L, a, list, a->n, "evict");
}

static void op_prefetch(lua_State *L, pstate *s, op_args *a)
{
	odx__policy *h = s->h;
	int w = push_table(L, s, T_WIN), tk = push_table(L, s, T_WIN_TASK);
	int dv = push_table(L, s, T_WIN_DEVICE), pr = push_table(L, s, T_WIN_PRIORITY);
	int nb = push_table(L, s, T_WIN_NBUFS), ms = push_table(L, s, T_WIN_MISSING);
	int xf = push_table(L, s, T_WIN_TRANSFER), bu = push_table(L, s, T_WIN_BUFFER);
	int bm = push_table(L, s, T_WIN_BUF_MISSING), fa = push_table(L, s, T_WIN_FREE_AT);
	int tu = push_table(L, s, T_WIN_TASK_US), out = push_table(L, s, T_PREFETCH_OUT);
	int list, i, k, d;

	set_count(L, w, "n", a->n);
	for (d = 0; d < h->nd; d++) {
		lua_pushnumber(L, h->dev_n[d] ? h->qnow[d] * h->dev_mean[d] : 0);
		lua_rawseti(L, fa, d + 1);
		lua_pushnumber(L, h->dev_n[d] ? h->dev_mean[d] : -1);
		lua_rawseti(L, tu, d + 1);
	}
	for (i = 0; i < a->n; i++) {
		const odx__prefetch_task *t = &a->window[i];
		int rb = push_row(L, bu, i + 1, t->nbufs), rm = push_row(L, bm, i + 1, t->nbufs);
		uint64_t missing = 0;

		for (k = 0; k < t->nbufs; k++) {
			lua_pushinteger(L, (lua_Integer)t->buffer_ids[k]);
			lua_rawseti(L, rb, k + 1);
			lua_pushinteger(L, (lua_Integer)t->missing_bytes[k]);
			lua_rawseti(L, rm, k + 1);
			missing += t->missing_bytes[k];
		}
		lua_pop(L, 2);
		lua_pushinteger(L, (lua_Integer)t->task_id);
		lua_rawseti(L, tk, i + 1);
		lua_pushinteger(L, t->device + 1);
		lua_rawseti(L, dv, i + 1);
		lua_pushinteger(L, t->priority);
		lua_rawseti(L, pr, i + 1);
		lua_pushinteger(L, t->nbufs);
		lua_rawseti(L, nb, i + 1);
		lua_pushinteger(L, (lua_Integer)missing);
		lua_rawseti(L, ms, i + 1);
		lua_pushnumber(L, (double)missing * 1e6 / best_in(h, h->device_node[t->device]));
		lua_rawseti(L, xf, i + 1);
	}
	list = push_out_list(L, s, T_PREFETCH_OUT, T_PREFETCH_ORDER, "order", a->n);
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_PREFETCH]);
	lua_pushvalue(L, w);
	lua_pushvalue(L, out);
	lua_call(L, 2, 1);
	read_order(L, a, list, a->n, "prefetch");
}

/* Raised after place_rank's instruction budget: a count, unlike a clock, is the same on every
 * rank. Re-armed for every instruction so that pcall cannot swallow it. */
static void rank_budget_hook(lua_State *L, lua_Debug *ar)
{
	(void)ar;
	lua_sethook(L, rank_budget_hook, LUA_MASKCOUNT, 1);
	luaL_error(L, "place_rank: instruction budget exceeded (policy.budget x %d instructions)",
		   RANK_INSTR_PER_US);
}

static void op_place_rank(lua_State *L, pstate *s, op_args *a)
{
	int b = push_table(L, s, T_RB), tk = push_table(L, s, T_RB_TASK);
	int kn = push_table(L, s, T_RB_KERNEL), pr = push_table(L, s, T_RB_PRIORITY);
	int by = push_table(L, s, T_RB_BYTES), tg = push_table(L, s, T_RB_TAG);
	int nb = push_table(L, s, T_RB_NBUFS), ow = push_table(L, s, T_RB_OWNER);
	int bb = push_table(L, s, T_RB_BUF_BYTES), out = push_table(L, s, T_RANK_OUT);
	int list, i, k, limit = a->n;
	uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)a->n;
	int64_t instr = (int64_t)(s->h->budget_ns / 1000) * RANK_INSTR_PER_US;

	set_count(L, b, "n", a->n);
	set_count(L, b, "nranks", a->nranks);
	for (i = 0; i < a->n; i++) {
		const odx__rank_task *t = &a->ranks[i];
		int ro = push_row(L, ow, i + 1, t->nbufs), rb = push_row(L, bb, i + 1, t->nbufs);

		for (k = 0; k < t->nbufs; k++) {
			lua_pushinteger(L, t->owner_rank[k] + 1);
			lua_rawseti(L, ro, k + 1);
			lua_pushinteger(L, (lua_Integer)t->buf_bytes[k]);
			lua_rawseti(L, rb, k + 1);
		}
		lua_pop(L, 2);
		lua_pushinteger(L, (lua_Integer)t->task_id);
		lua_rawseti(L, tk, i + 1);
		lua_pushstring(L, t->kernel ? t->kernel : "");
		lua_rawseti(L, kn, i + 1);
		lua_pushinteger(L, t->priority);
		lua_rawseti(L, pr, i + 1);
		lua_pushinteger(L, (lua_Integer)t->bytes);
		lua_rawseti(L, by, i + 1);
		lua_pushstring(L, t->tag ? t->tag : "");
		lua_rawseti(L, tg, i + 1);
		lua_pushinteger(L, t->nbufs);
		lua_rawseti(L, nb, i + 1);
		seed = (seed ^ t->task_id) * 0x100000001b3ull;
	}
	list = push_out_list(L, s, T_RANK_OUT, T_RANK_OUT_RANK, "rank", a->n);
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_PLACE_RANK]);
	lua_pushvalue(L, b);
	lua_pushvalue(L, out);
	/* The same random numbers on every rank: seeded from the batch, not from history. */
	s->h->rank_rng = seed ? seed : 1;
	s->h->rng_now = &s->h->rank_rng;
	lua_sethook(L, rank_budget_hook, LUA_MASKCOUNT, instr > 1000 ? (int)instr : 1000);
	lua_call(L, 2, 1);
	lua_sethook(L, NULL, 0, 0);
	s->h->rng_now = &s->h->rng;
	if (lua_isinteger(L, -1) && lua_tointeger(L, -1) >= 0 && lua_tointeger(L, -1) < limit)
		limit = (int)lua_tointeger(L, -1);
	for (i = 0; i < a->n; i++) {
		lua_Integer v;
		int isint, t;

		a->order[i] = -1;
		if (i >= limit)
			continue;
		t = lua_rawgeti(L, list, i + 1);
		v = lua_tointegerx(L, -1, &isint);
		lua_pop(L, 1);
		if (t == LUA_TNUMBER && isint && v == 0)
			continue;
		if (t != LUA_TNUMBER || !isint || v < 1 || v > a->nranks) {
			if (!a->invalid++)
				snprintf(a->bad, sizeof(a->bad),
					 "%s: place_rank: out.rank[%d] is %s (a rank 1..%d, or 0 for "
					 "owner-computes)", s->chunk, i + 1,
					 t == LUA_TNIL ? "missing" : t != LUA_TNUMBER ? "not a number"
					 : "not a rank", a->nranks);
			continue;
		}
		a->order[i] = (int)v - 1;
		a->decided++;
	}
}

static void op_tick(lua_State *L, pstate *s, op_args *a)
{
	odx__policy *h = s->h;
	int t = push_table(L, s, T_TICK), q = push_table(L, s, T_TICK_QUEUE);
	int fa = push_table(L, s, T_TICK_FREE_AT), tu = push_table(L, s, T_TICK_TASK_US);
	int dn = push_table(L, s, T_TICK_DONE), d;

	lua_pushnumber(L, (double)(odx__now_ns() - h->t_open) / 1e3);
	raw_setfield(L, t, "now_us");
	for (d = 0; d < h->nd; d++) {
		lua_pushinteger(L, a->queue[d]);
		lua_rawseti(L, q, d + 1);
		lua_pushnumber(L, h->dev_n[d] ? a->queue[d] * h->dev_mean[d] : 0);
		lua_rawseti(L, fa, d + 1);
		lua_pushnumber(L, h->dev_n[d] ? h->dev_mean[d] : -1);
		lua_rawseti(L, tu, d + 1);
		lua_pushinteger(L, a->done ? (lua_Integer)a->done[d] : 0);
		lua_rawseti(L, dn, d + 1);
	}
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_ON_TICK]);
	lua_pushvalue(L, t);
	lua_call(L, 1, 0);
}

static int protected_op(lua_State *L)
{
	op_args *a = lua_touserdata(L, 1);

	lua_settop(L, 0);
	luaL_checkstack(L, 48, "policy host"); /* the fill functions push up to ~20 values */
	switch (a->op) {
	case OP_SETUP:
		op_setup(L, a->s);
		break;
	case OP_INIT:
		op_init(L, a->s);
		break;
	case OP_SELFTEST:
		op_selftest(L, a->s);
		break;
	case OP_PLACE:
		op_place(L, a->s, a);
		break;
	case OP_COMPLETE:
		op_complete(L, a->s, a);
		break;
	case OP_EVICT:
		op_evict(L, a->s, a);
		break;
	case OP_PREFETCH:
		op_prefetch(L, a->s, a);
		break;
	case OP_PLACE_RANK:
		op_place_rank(L, a->s, a);
		break;
	case OP_TICK:
		op_tick(L, a->s, a);
		break;
	case OP_CLOSE: /* not an operation run here */
	case OP_COUNT:
		break;
	}
	return 0;
}

static void shadow_free(shadow *sh)
{
	free(sh->kernel);
	free(sh->tag);
	free(sh->priority);
	free(sh->queue);
	free(sh->bytes);
	free(sh->resident);
	free(sh->feasible);
	free(sh->estimate);
	free(sh->transfer);
	free(sh->free_at);
	free(sh->row);
}

/* Frees a state without touching Lua: its blocks wholesale, then the host's side. Used after an
 * escape (the state may be mid-operation) and for what lua_close left (nothing, normally). */
static void state_free(odx__policy *h, pstate *s)
{
	blk *b, *next;

	/* The watchdog arms hooks on call_L under wd_lock: it must never see this state again. */
	pthread_mutex_lock(&h->wd_lock);
	if (atomic_load(&h->call_L) == s->L)
		atomic_store(&h->call_L, NULL);
	pthread_mutex_unlock(&h->wd_lock);
	for (b = s->blocks.next; b && b != &s->blocks; b = next) {
		next = b->next;
		free(b);
	}
	shadow_free(&s->sh);
	free(s);
}

/* The message of an abandoned call: policy (spec and file), hook, what happened. */
static void abandoned_msg(odx__policy *h, enum op op, uint64_t start, char *err, size_t errlen)
{
	/* A failed load says what happens next itself (the caller keeps the old version, or the
	 * built-in decides until the file is fixed). */
	bool loading = op == OP_SETUP || op == OP_INIT || op == OP_SELFTEST;

	snprintf(err, errlen,
		 "policy %s (file %s): abandoned '%s': still running %llu ms after it started, past "
		 "its hard deadline (%d times its CPU budget of %llu us, or a wall-clock ceiling of "
		 "%llu ms); its Lua state is dropped%s",
		 h->spec, h->display, op_names[op], (unsigned long long)((odx__now_ns() - start) / 1000000),
		 HARD_CPU_BUDGETS, (unsigned long long)(atomic_load(&h->call_budget) / 1000),
		 (unsigned long long)(atomic_load(&h->call_ceiling) / 1000000),
		 loading ? "" : " and the built-in least_loaded decides every call until the file "
				"changes");
}

/* After an escape from state s: it is freed (never touched again), the policy disabled. */
static void give_up(odx__policy *h, pstate *s)
{
	if (h->cur == s) { /* else a new version's load: the running one stays */
		h->cur = NULL;
		h->disabled = true;
		publish_hooks(h);
		atomic_store(&h->gave_up, true);
	}
	h->rng_now = &h->rng;
	state_free(h, s);
}

/* Wall-clock ceiling of a hook call: HARD_WALL_BUDGETS budgets, at least HARD_WALL_MIN_NS. */
static uint64_t hook_ceiling(uint64_t budget)
{
	return budget * HARD_WALL_BUDGETS > HARD_WALL_MIN_NS ? budget * HARD_WALL_BUDGETS
							      : HARD_WALL_MIN_NS;
}

/*
 * Runs one operation under the budget, behind an escape point; on failure writes the message
 * (file, line, traceback) into err and returns the Lua status. RC_ABANDONED: the call passed
 * its hard deadline and was left by siglongjmp; the state is freed (give_up) and must not be
 * used, err says which policy, file and hook.
 */
static int run_op(pstate *s, op_args *a, uint64_t budget, char *err, size_t errlen)
{
	odx__policy *h = s->h;
	lua_State *L = s->L;
	int base = lua_gettop(L), rc;
	bool load = a->op == OP_SETUP || a->op == OP_INIT || a->op == OP_SELFTEST;
	escape e;
	uint64_t mine;

	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_msgh);
	lua_pushcfunction(L, protected_op);
	lua_pushlightuserdata(L, a);
	/* Nothing below sigsetjmp changes a local that the escape path reads. */
	if (sigsetjmp(e.jb, 0)) {
		s->esc = NULL;
		atomic_fetch_add(&h->seq, 1); /* the watchdog lets go of the call */
		abandoned_msg(h, a->op, atomic_load(&h->call_start), err, errlen);
		give_up(h, s);
		return RC_ABANDONED;
	}
	mine = call_begin(h, &e, L, a->op, budget, load ? h->load_timeout_ns : hook_ceiling(budget));
	s->esc = &e;
	rc = lua_pcall(L, 1, 0, base + 1);
	s->esc = NULL;
	call_end(h, L, mine);
	s->place_args = NULL; /* the lazy inputs are readable only during place */
	if (rc != LUA_OK) {
		const char *msg = lua_tostring(L, -1);

		if (rc == LUA_ERRMEM)
			snprintf(err, errlen,
				 "%s:%d: not enough memory (policy.memory_limit = %llu bytes)",
				 s->chunk[0] ? s->chunk : s->h->display, s->place_line,
				 (unsigned long long)s->limit);
		else
			snprintf(err, errlen, "%s", msg ? msg : "error without a message");
	}
	lua_settop(L, base);
	return rc;
}

/* lua_close behind an escape point, under the load ceiling: with no finalizers it runs only C
 * code linear in the heap, but it is an entry into the state like any other. */
static void state_close(odx__policy *h, pstate *s)
{
	escape e;
	uint64_t mine;

	if (!s)
		return;
	if (s->L) {
		/* The watchdog may be arming a hook on this state: it does so under wd_lock. */
		pthread_mutex_lock(&h->wd_lock);
		if (atomic_load(&h->call_L) == s->L)
			atomic_store(&h->call_L, NULL);
		pthread_mutex_unlock(&h->wd_lock);
		if (sigsetjmp(e.jb, 0)) {
			char msg[ODX__MSG_MAX];

			s->esc = NULL;
			atomic_fetch_add(&h->seq, 1);
			abandoned_msg(h, OP_CLOSE, atomic_load(&h->call_start), msg, sizeof(msg));
			say(h, ODX_LOG_ERROR, true, "%s", msg);
			atomic_store(&h->gave_up, true);
			state_free(h, s);
			return;
		}
		mine = call_begin(h, &e, NULL, OP_CLOSE, h->budget_ns * LOAD_BUDGET_FACTOR,
				  h->load_timeout_ns);
		s->esc = &e;
		lua_close(s->L);
		s->esc = NULL;
		call_end(h, NULL, mine);
		s->L = NULL;
	}
	state_free(h, s);
}

static bool shadow_alloc(shadow *sh, int nd)
{
	size_t rows = BATCH_MAX, cells = rows * (size_t)(nd > 0 ? nd : 1);

	sh->kernel = calloc(rows, sizeof(*sh->kernel));
	sh->tag = calloc(rows, sizeof(*sh->tag));
	sh->priority = calloc(rows, sizeof(*sh->priority));
	sh->bytes = calloc(rows, sizeof(*sh->bytes));
	sh->queue = calloc(cells, sizeof(*sh->queue));
	sh->free_at = calloc(cells, sizeof(*sh->free_at));
	sh->resident = calloc(cells, sizeof(*sh->resident));
	sh->feasible = calloc(cells, sizeof(*sh->feasible));
	sh->estimate = calloc(cells, sizeof(*sh->estimate));
	sh->transfer = calloc(cells, sizeof(*sh->transfer));
	sh->row = calloc((size_t)(nd > 0 ? nd : 1), sizeof(*sh->row));
	return sh->row && sh->kernel && sh->tag && sh->priority && sh->bytes && sh->queue && sh->free_at &&
	       sh->resident && sh->feasible && sh->estimate && sh->transfer;
}

/* A new state with the policy loaded, initialised and self-tested; NULL with err on failure. */
static pstate *state_open(odx__policy *h, char *err, size_t errlen)
{
	uint64_t load_budget = h->budget_ns * LOAD_BUDGET_FACTOR;
	op_args a = {0};
	pstate *s = calloc(1, sizeof(*s));
	int i, rc;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->h = h;
	s->limit = h->limit;
	s->blocks.prev = s->blocks.next = &s->blocks;
	for (i = 0; i < HOOK_COUNT; i++)
		s->ref_hook[i] = LUA_NOREF;
	if (!shadow_alloc(&s->sh, h->nd)) {
		snprintf(err, errlen, "out of memory");
		state_close(h, s);
		return NULL;
	}
	s->L = lua_newstate(capped_alloc, s);
	if (!s->L) {
		snprintf(err, errlen, "%s: cannot create a Lua state within policy.memory_limit",
			 h->display);
		state_close(h, s);
		return NULL;
	}
	*(odx__policy **)lua_getextraspace(s->L) = h;
	lua_pushcfunction(s->L, traceback);
	s->ref_msgh = luaL_ref(s->L, LUA_REGISTRYINDEX);
	a.s = s;
	a.op = OP_SETUP;
	rc = run_op(s, &a, load_budget, err, errlen);
	a.op = OP_INIT;
	if (rc == LUA_OK && s->ref_hook[HOOK_INIT] != LUA_NOREF)
		rc = run_op(s, &a, load_budget, err, errlen);
	a.op = OP_SELFTEST;
	if (rc == LUA_OK && s->ref_hook[HOOK_SELFTEST] != LUA_NOREF)
		rc = run_op(s, &a, load_budget, err, errlen);
	if (rc == RC_ABANDONED)
		return NULL; /* freed by run_op */
	if (rc != LUA_OK)
		goto out_close;
	return s;

out_close:
	state_close(h, s);
	return NULL;
}

/* ---- the host ------------------------------------------------------------------------------- */

static int read_source(odx__policy *h, char *err, size_t errlen)
{
	struct stat st;
	unsigned char *buf;
	FILE *f;

	if (h->text && !h->path)
		return 0;
	f = fopen(h->path, "rb");
	if (!f || fstat(fileno(f), &st) != 0) {
		snprintf(err, errlen, "policy '%s': cannot read the file: %s", h->path,
			 strerror(errno));
		if (f)
			fclose(f);
		return ODX_ECONFIG;
	}
	if (st.st_size > (off_t)MAX_SOURCE) {
		snprintf(err, errlen,
			 "policy '%s': the file is %lld bytes, more than the %u a policy may have",
			 h->path, (long long)st.st_size, MAX_SOURCE);
		fclose(f);
		return ODX_ECONFIG;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf || fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
		snprintf(err, errlen, "policy '%s': cannot read the file", h->path);
		free(buf);
		fclose(f);
		return ODX_ECONFIG;
	}
	fclose(f);
	buf[st.st_size] = '\0';
	free((void *)h->text);
	h->text = buf;
	h->text_len = (size_t)st.st_size;
	h->mtime = st.st_mtim;
	return 0;
}

int odx__policy_open(odx__policy **out, const odx__policy_params *p, char *err, size_t errlen)
{
	odx__policy *h = calloc(1, sizeof(*h));
	char why[ODX__MSG_MAX];
	int d, rc = ODX_ENOMEM;
	size_t i;

	if (!h)
		return ODX_ENOMEM;
	h->nd = p->ndevices;
	h->limit = p->memory_limit;
	h->budget_ns = p->budget_ns;
	h->load_timeout_ns = p->load_timeout_ns ? p->load_timeout_ns : DEFAULT_LOAD_TIMEOUT_NS;
	h->log = p->log;
	h->log_user = p->log_user;
	h->rng = 0x2545f4914f6cdd1dull;
	h->rng_now = &h->rng;
	h->t_open = odx__now_ns();
	h->mcap = 64;
	pthread_mutex_init(&h->wd_lock, NULL);
	pthread_cond_init(&h->wd_cond, NULL);
	pthread_mutex_init(&h->ev_lock, NULL);
	pthread_mutex_init(&h->lock, NULL);
	pthread_mutex_init(&h->pend_lock, NULL);
	h->spec = strdup(p->spec);
	h->model_dir = strdup(p->model_dir ? p->model_dir : "");
	h->devs = calloc((size_t)h->nd + 1, sizeof(*h->devs));
	h->models = calloc(h->mcap, sizeof(*h->models));
	h->dev_mean = calloc((size_t)h->nd + 1, sizeof(*h->dev_mean));
	h->dev_n = calloc((size_t)h->nd + 1, sizeof(*h->dev_n));
	h->nnodes = p->device_node ? p->nnodes : h->nd;
	h->device_node = calloc((size_t)h->nd + 1, sizeof(*h->device_node));
	h->qnow = calloc((size_t)h->nd + 1, sizeof(*h->qnow));
	h->bw = calloc((size_t)h->nnodes * (size_t)h->nnodes + 1, sizeof(*h->bw));
	if (!h->spec || !h->model_dir || !h->devs || !h->models || !h->dev_mean || !h->dev_n ||
	    !h->device_node || !h->qnow || !h->bw)
		goto out_fail;
	for (i = 0; i < (size_t)h->nnodes * (size_t)h->nnodes; i++)
		atomic_init(&h->bw[i], LINK_BANDWIDTH);
	for (d = 0; d < h->nd; d++) {
		h->device_node[d] = p->device_node ? p->device_node[d] : d;
		if (h->device_node[d] < 0 || h->device_node[d] >= h->nnodes) {
			snprintf(err, errlen, "policy: device %d on memory node %d of %d", d,
				 h->device_node[d], h->nnodes);
			rc = ODX_EINVAL;
			goto out_fail;
		}
	}
	for (d = 0; d < h->nd; d++) {
		h->devs[d].kind = strdup(p->devices[d].kind);
		h->devs[d].name = strdup(p->devices[d].name);
		h->devs[d].memory = p->devices[d].memory;
		if (!h->devs[d].kind || !h->devs[d].name)
			goto out_fail;
	}
	if (strncmp(p->spec, "lua:", 4) == 0) {
		for (i = 0; i < sizeof(embedded) / sizeof(embedded[0]); i++)
			if (strcmp(embedded[i].name, p->spec + 4) == 0) {
				h->text = embedded[i].text;
				h->text_len = *embedded[i].size;
			}
		if (!h->text) {
			snprintf(err, errlen,
				 "policy '%s': no such shipped policy (lua:eager, lua:round_robin, "
				 "lua:locality, lua:heft, lua:lru, lua:lookahead)",
				 p->spec);
			rc = ODX_ECONFIG;
			goto out_fail;
		}
		snprintf(why, sizeof(why), "policies/%s.lua", p->spec + 4);
		h->display = strdup(why);
	} else {
		h->path = strdup(p->spec);
		h->display = strdup(p->spec);
		if (!h->path || !h->display)
			goto out_fail;
		rc = read_source(h, err, errlen);
		if (rc)
			goto out_fail;
	}
	if (!h->display)
		goto out_fail;
	models_load(h);
	pthread_once(&esc_once, escape_install);
	if (pthread_create(&h->wd, NULL, watchdog, h) != 0)
		goto out_fail;
	h->wd_started = true;
	h->next_check = odx__now_ns() + RELOAD_CHECK_NS;
	h->cur = state_open(h, why, sizeof(why));
	publish_hooks(h);
	if (!h->cur) {
		h->disabled = true;
		atomic_fetch_add(&h->failures, 1);
		snprintf(err, errlen, "policy %s failed to load: %s", h->display, why);
		say(h, ODX_LOG_WARN, true,
		    "policy %s failed to load: %s; the built-in least_loaded decides until the file "
		    "is fixed",
		    h->display, why);
	}
	*out = h;
	return 0;

out_fail:
	odx__policy_close(h);
	return rc;
}

void odx__policy_close(odx__policy *h)
{
	int d;
	size_t i;

	if (!h)
		return;
	models_save(h);
	/* lua_close is bounded by the watchdog like any entry: stop it only afterwards. */
	state_close(h, h->cur);
	h->cur = NULL;
	if (h->wd_started) {
		pthread_mutex_lock(&h->wd_lock);
		h->wd_stop = true;
		pthread_cond_signal(&h->wd_cond);
		pthread_mutex_unlock(&h->wd_lock);
		pthread_join(h->wd, NULL);
	}
	for (i = 0; i < h->mcap && h->models; i++)
		free(h->models[i].kernel);
	for (d = 0; d < h->nd && h->devs; d++) {
		free((void *)h->devs[d].kind);
		free((void *)h->devs[d].name);
	}
	if (h->path)
		free((void *)h->text);
	free(h->models);
	free(h->devs);
	free(h->dev_mean);
	free(h->dev_n);
	free(h->device_node);
	free(h->qnow);
	free((void *)h->bw);
	free(h->seen);
	free(h->transfer);
	free(h->valid);
	free(h->done);
	free(h->spec);
	free(h->path);
	free(h->display);
	free(h->model_dir);
	free(h->feasible);
	free(h->resident);
	free(h->missing);
	free(h->queue);
	pthread_mutex_destroy(&h->wd_lock);
	pthread_cond_destroy(&h->wd_cond);
	pthread_mutex_destroy(&h->ev_lock);
	pthread_mutex_destroy(&h->lock);
	pthread_mutex_destroy(&h->pend_lock);
	free(h);
}

void odx__policy_check_reload(odx__policy *h, bool force)
{
	char why[ODX__MSG_MAX];
	struct stat st;
	uint64_t now;
	pstate *s;

	if (!h->path)
		return;
	now = odx__now_ns();
	if (!force && now < h->next_check)
		return;
	h->next_check = now + RELOAD_CHECK_NS;
	if (stat(h->path, &st) != 0 || (st.st_mtim.tv_sec == h->mtime.tv_sec &&
					st.st_mtim.tv_nsec == h->mtime.tv_nsec))
		return;
	if (read_source(h, why, sizeof(why)) != 0) {
		h->mtime = st.st_mtim; /* retried when it changes again */
		say(h, ODX_LOG_WARN, true, "%s; keeping the running version", why);
		return;
	}
	s = state_open(h, why, sizeof(why));
	if (!s) {
		say(h, ODX_LOG_WARN, true,
		    "policy %s: the new version failed to load: %s; keeping the %s", h->display,
		    why, h->cur ? "running version" : "built-in least_loaded");
		return;
	}
	state_close(h, h->cur);
	h->cur = s;
	h->disabled = false;
	atomic_store(&h->gave_up, false);
	publish_hooks(h);
	h->consecutive = 0;
	h->nsites = 0;
	say(h, ODX_LOG_INFO, false, "policy %s: reloaded", h->display);
}

/* Moves the completions recorded by workers into the models and on_complete. */
static void process_events(odx__policy *h)
{
	char why[ODX__MSG_MAX];
	op_args a = {0};
	int n, i, rc;

	/* Workers take ev_lock for every completion: do not compete with them for nothing. */
	if (atomic_load_explicit(&h->nev, memory_order_relaxed) == 0)
		return;
	pthread_mutex_lock(&h->ev_lock);
	n = atomic_load_explicit(&h->nev, memory_order_relaxed);
	if (n == 0) {
		pthread_mutex_unlock(&h->ev_lock);
		return;
	}
	memcpy(h->ev_copy, h->ev, (size_t)n * sizeof(*h->ev));
	atomic_store_explicit(&h->nev, 0, memory_order_relaxed);
	pthread_mutex_unlock(&h->ev_lock);
	for (i = 0; i < n; i++)
		model_add(h, h->ev_copy[i].kernel, h->ev_copy[i].device, h->ev_copy[i].bytes,
			  (double)h->ev_copy[i].ns / 1000.0);
	if (!h->cur || h->disabled || h->cur->ref_hook[HOOK_ON_COMPLETE] == LUA_NOREF)
		return;
	a.op = OP_COMPLETE;
	a.s = h->cur;
	a.events = h->ev_copy;
	a.nevents = n;
	rc = run_op(h->cur, &a, h->budget_ns, why, sizeof(why));
	if (rc == RC_ABANDONED)
		say(h, ODX_LOG_ERROR, true, "%s", why);
	else if (rc != LUA_OK)
		fail(h, why, why);
}

int odx__policy_place(odx__policy *h, const odx__policy_task *tasks, int n, const int *queue,
		      int *out)
{
	char why[ODX__MSG_MAX];
	op_args a = {0};
	int i, rc;

	if (n > BATCH_MAX) { /* the reused tables hold BATCH_MAX tasks */
		int done = 0;

		for (i = 0; i < n; i += BATCH_MAX)
			done += odx__policy_place(h, tasks + i, n - i < BATCH_MAX ? n - i : BATCH_MAX,
						  queue, out + i);
		return done;
	}
	odx__policy_check_reload(h, false);
	process_events(h);
	for (i = 0; i < n; i++)
		out[i] = -1;
	if (!h->cur || h->disabled || n == 0)
		return 0;
	h->place_calls++;
	h->placed += (uint64_t)n;
	a.op = OP_PLACE;
	a.s = h->cur;
	a.tasks = tasks;
	a.n = n;
	a.queue = queue;
	a.out = out;
	rc = run_op(h->cur, &a, h->budget_ns, why, sizeof(why));
	if (rc == RC_ABANDONED) {
		for (i = 0; i < n; i++)
			out[i] = -1;
		atomic_fetch_add(&h->failures, 1);
		say(h, ODX_LOG_ERROR, true, "%s", why);
		return 0;
	}
	if (rc != LUA_OK) {
		/* The site is the message's first line: one log line per distinct error. */
		char site[256];

		snprintf(site, sizeof(site), "%.*s", (int)strcspn(why, "\n"), why);
		for (i = 0; i < n; i++)
			out[i] = -1;
		fail(h, site, why);
		return 0;
	}
	if (a.invalid) {
		char msg[ODX__MSG_MAX + 64];

		snprintf(msg, sizeof(msg), "%s (%d invalid answer%s in a batch of %d)", a.bad,
			 a.invalid, a.invalid > 1 ? "s" : "", n);
		fail(h, "invalid answer", msg);
		return a.decided;
	}
	h->consecutive = 0;
	return a.decided;
}

/* Runs one call of a hook other than place (a->op set): ODX_ENOSYS when the policy is off or
 * lacks the hook, ODX_EINVAL when the call failed or the answer is invalid (counted and logged
 * as for place), else 0. */
static int run_hook(odx__policy *h, op_args *a, enum hook hook)
{
	char why[ODX__MSG_MAX];
	int rc;

	if (!h->cur || h->disabled || h->cur->ref_hook[hook] == LUA_NOREF)
		return ODX_ENOSYS;
	a->s = h->cur;
	rc = run_op(h->cur, a, h->budget_ns, why, sizeof(why));
	/* place_rank's instruction hook and random stream end with the call, however it ended. */
	h->rng_now = &h->rng;
	if (rc == RC_ABANDONED) {
		atomic_fetch_add(&h->failures, 1);
		say(h, ODX_LOG_ERROR, true, "%s", why);
		return ODX_EINVAL;
	}
	if (hook == HOOK_PLACE_RANK)
		lua_sethook(h->cur->L, NULL, 0, 0);
	if (rc != LUA_OK) {
		char site[256];

		snprintf(site, sizeof(site), "%.*s", (int)strcspn(why, "\n"), why);
		fail(h, site, why);
		return ODX_EINVAL;
	}
	if (a->invalid) {
		fail(h, "invalid answer", a->bad);
		return hook == HOOK_PLACE_RANK ? 0 : ODX_EINVAL;
	}
	h->consecutive = 0;
	return 0;
}

int odx__policy_host_evict(odx__policy *h, int memnode, uint64_t need, const odx__evict_cand *c,
			   int n, int *order)
{
	op_args a = {.op = OP_EVICT, .memnode = memnode, .need = need, .cands = c, .n = n,
		     .order = order};
	int rc;

	if (n < 0 || (n > 0 && (!c || !order)))
		return ODX_EINVAL;
	rc = run_hook(h, &a, HOOK_EVICT);
	return rc < 0 ? rc : a.norder;
}

int odx__policy_host_prefetch(odx__policy *h, const odx__prefetch_task *w, int n, int *order)
{
	op_args a = {.op = OP_PREFETCH, .window = w, .n = n, .order = order};
	int i, rc;

	if (n < 0 || (n > 0 && (!w || !order)))
		return ODX_EINVAL;
	for (i = 0; i < n; i++)
		if (w[i].device < 0 || w[i].device >= h->nd || w[i].nbufs < 0 ||
		    (w[i].nbufs > 0 && (!w[i].buffer_ids || !w[i].missing_bytes)))
			return ODX_EINVAL;
	rc = run_hook(h, &a, HOOK_PREFETCH);
	return rc < 0 ? rc : a.norder;
}

int odx__policy_host_place_rank(odx__policy *h, const odx__rank_task *b, int n, int nranks,
				int *out_rank)
{
	op_args a = {.op = OP_PLACE_RANK, .ranks = b, .n = n, .nranks = nranks, .order = out_rank};
	int i, rc;

	if (n < 0 || nranks < 1 || (n > 0 && (!b || !out_rank)))
		return ODX_EINVAL;
	for (i = 0; i < n; i++)
		if (b[i].nbufs < 0 || (b[i].nbufs > 0 && (!b[i].owner_rank || !b[i].buf_bytes)))
			return ODX_EINVAL;
	rc = run_hook(h, &a, HOOK_PLACE_RANK);
	if (rc < 0)
		return rc;
	return a.decided;
}

int odx__policy_host_tick(odx__policy *h, const int *queue, const uint64_t *done)
{
	op_args a = {.op = OP_TICK, .queue = queue, .done = done};

	return run_hook(h, &a, HOOK_ON_TICK);
}

void odx__policy_host_set_bandwidth(odx__policy *h, int src_node, int dst_node,
				    double bytes_per_s)
{
	if (src_node < 0 || dst_node < 0 || src_node >= h->nnodes || dst_node >= h->nnodes ||
	    !(bytes_per_s > 0) || isinf(bytes_per_s))
		return;
	atomic_store_explicit(&h->bw[src_node * h->nnodes + dst_node], bytes_per_s,
			      memory_order_relaxed);
}

void odx__policy_feedback(odx__policy *h, const char *kernel, int device, uint64_t bytes,
			  uint64_t ns)
{
	int n;

	pthread_mutex_lock(&h->ev_lock);
	n = atomic_load_explicit(&h->nev, memory_order_relaxed);
	if (n < EVENTS_MAX) {
		h->ev[n] = (event){.kernel = kernel, .device = device, .bytes = bytes, .ns = ns};
		atomic_store_explicit(&h->nev, n + 1, memory_order_relaxed);
	} else {
		h->ev_dropped++;
	}
	pthread_mutex_unlock(&h->ev_lock);
}

void odx__policy_describe(odx_context *ctx, char *buf, size_t len)
{
	odx__policy *h = ctx->policy;
	uint64_t seq, start;
	int op;

	if (!h) {
		snprintf(buf, len, "policy %s (built in)", odx__config_str(ctx->config, "policy"));
		return;
	}
	/* Racy by design (another thread runs the calls): each word is read atomically. */
	seq = atomic_load(&h->seq);
	start = atomic_load(&h->call_start);
	op = atomic_load(&h->call_op);
	if ((seq & 1) && op >= 0 && op < OP_COUNT)
		snprintf(buf, len, "policy %s (file %s): in '%s' for %llu ms%s", h->spec, h->display,
			 op_names[op], (unsigned long long)((odx__now_ns() - start) / 1000000),
			 atomic_load(&h->kill_seq) == seq ? ", being abandoned" : "");
	else
		snprintf(buf, len, "policy %s (file %s): no call running%s", h->spec, h->display,
			 atomic_load(&h->gave_up) ? "; gave up on it, the built-in decides" : "");
}

bool odx__policy_enabled(const odx__policy *h)
{
	return h->cur && !h->disabled;
}

bool odx__policy_has_hook(const odx__policy *h, const char *name)
{
	int i;

	for (i = 0; h->cur && i < HOOK_COUNT; i++)
		if (strcmp(hook_names[i], name) == 0)
			return h->cur->ref_hook[i] != LUA_NOREF;
	return false;
}

const char *odx__policy_name(const odx__policy *h)
{
	return h->display;
}

uint64_t odx__policy_failures(const odx__policy *h)
{
	return atomic_load(&((odx__policy *)h)->failures);
}

/* ---- context glue --------------------------------------------------------------------------- */

static void ctx_log(void *user, odx_log_level level, bool error, const char *msg)
{
	odx_context *ctx = user;

	if (error)
		odx__fail(ctx, ODX_ECONFIG, "%s", msg);
	if (level != ODX_LOG_DEBUG)
		odx__log(ctx, level, "%s", msg);
}

/*
 * The Lua state is used by one thread at a time, under h->lock. Placement is flat-combined: a
 * thread that pushes a ready task and finds the lock taken leaves its task to the holder, which
 * drains the pending list before it lets go (`placing` says the holder is such a drainer) and
 * re-checks after unlocking. A holder that is not draining (a hook call from the tier manager,
 * the fabric or the tick thread) does not re-check: a pusher that finds one waits for the lock
 * and drains itself.
 */
static _Thread_local odx__policy *held; /* the host whose lock this thread holds */

static void drain(odx_context *ctx, odx__policy *h);

static void place_pending(odx_context *ctx, odx__policy *h)
{
	while (atomic_load(&h->npending) > 0) {
		if (pthread_mutex_trylock(&h->lock) != 0) {
			if (atomic_load(&h->placing) || held == h)
				return; /* the drainer (or this thread, later) sees our task */
			pthread_mutex_lock(&h->lock);
		}
		held = h;
		atomic_store(&h->placing, true);
		drain(ctx, h);
		atomic_store(&h->placing, false);
		held = NULL;
		pthread_mutex_unlock(&h->lock);
	}
}

/* Takes the Lua state for a call of `hook`; NULL when there is no Lua policy, it lacks the hook
 * (checked without the lock: a reload in between only makes run_hook answer ODX_ENOSYS), or
 * this thread holds the state already (a seam called from inside the policy host). */
static odx__policy *hook_enter(odx_context *ctx, enum hook hook)
{
	odx__policy *h = ctx ? ctx->policy : NULL;

	if (!h || held == h || !(atomic_load(&h->hooks) & (1u << hook)))
		return NULL;
	pthread_mutex_lock(&h->lock);
	held = h;
	return h;
}

/* Never drains the pending list: pushers that found us holding the state waited and drained
 * themselves, and the caller may hold locks (a memory node's) that placing must not nest in. */
static void hook_leave(odx__policy *h)
{
	held = NULL;
	pthread_mutex_unlock(&h->lock);
}

static void refresh_queues(odx_context *ctx, odx__policy *h)
{
	int d;

	for (d = 0; d < ctx->ndevices; d++) {
		h->qnow[d] = atomic_load_explicit(&ctx->devices[d].load, memory_order_relaxed);
		h->done[d] = atomic_load_explicit(&ctx->devices[d].tasks_run, memory_order_relaxed);
	}
}

/* Calls on_tick every policy.tick_ms, and checks for a changed policy file when no placement
 * does (an idle program still picks up an edit). */
static void *ticker(void *arg)
{
	odx_context *ctx = arg;
	odx__policy *h = ctx->policy;
	uint64_t next = odx__now_ns() + h->tick_ns;

	pthread_setname_np(pthread_self(), "odx-policy-tick");
	pthread_mutex_lock(&h->tick_lock);
	while (!h->tick_stop) {
		struct timespec ts;
		uint64_t now = odx__now_ns(), wait = next > now ? next - now : 0;

		if (wait > 0) {
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += (time_t)(wait / 1000000000u);
			ts.tv_nsec += (long)(wait % 1000000000u);
			ts.tv_sec += ts.tv_nsec / 1000000000L;
			ts.tv_nsec %= 1000000000L;
			pthread_cond_timedwait(&h->tick_cond, &h->tick_lock, &ts);
			continue;
		}
		next = now + h->tick_ns;
		pthread_mutex_unlock(&h->tick_lock);
		place_pending(ctx, h); /* deferred tasks wait at most one tick */
		/* on_tick, and the reload check an idle program needs, under the state's lock. */
		pthread_mutex_lock(&h->lock);
		held = h;
		odx__policy_check_reload(h, false);
		if (odx__policy_enabled(h) && h->cur->ref_hook[HOOK_ON_TICK] != LUA_NOREF) {
			refresh_queues(ctx, h);
			odx__policy_host_tick(h, h->qnow, h->done);
		}
		hook_leave(h);
		pthread_mutex_lock(&h->tick_lock);
	}
	pthread_mutex_unlock(&h->tick_lock);
	return NULL;
}

int odx__policy_evict(odx_context *ctx, int memnode, uint64_t need, const odx__evict_cand *c,
		      int n, int *order)
{
	odx__policy *h = hook_enter(ctx, HOOK_EVICT);
	int rc;

	if (!h)
		return ODX_ENOSYS;
	rc = odx__policy_host_evict(h, memnode, need, c, n, order);
	hook_leave(h);
	return rc;
}

int odx__policy_prefetch(odx_context *ctx, const odx__prefetch_task *w, int n, int *order)
{
	odx__policy *h = hook_enter(ctx, HOOK_PREFETCH);
	int rc;

	if (!h)
		return ODX_ENOSYS;
	refresh_queues(ctx, h);
	rc = odx__policy_host_prefetch(h, w, n, order);
	hook_leave(h);
	return rc;
}

int odx__policy_place_rank(odx_context *ctx, const odx__rank_task *b, int n, int nranks,
			   int *out_rank)
{
	odx__policy *h = hook_enter(ctx, HOOK_PLACE_RANK);
	int rc;

	if (!h)
		return ODX_ENOSYS;
	rc = odx__policy_host_place_rank(h, b, n, nranks, out_rank);
	hook_leave(h);
	return rc;
}

void odx__policy_set_bandwidth(odx_context *ctx, int src_node, int dst_node, double bytes_per_s)
{
	if (ctx && ctx->policy)
		odx__policy_host_set_bandwidth(ctx->policy, src_node, dst_node, bytes_per_s);
}

int odx__policy_ctx_open(odx_context *ctx, char *err, size_t errlen)
{
	const char *spec = odx__config_str(ctx->config, "policy");
	odx__policy_device *devs;
	odx__policy_params p;
	odx__policy *h = NULL;
	char why[ODX__MSG_MAX] = "";
	int *nodes, d, rc;

	if (odx__sched_find(spec))
		return 0;
	devs = calloc((size_t)ctx->ndevices + 1, sizeof(*devs));
	nodes = calloc((size_t)ctx->ndevices + 1, sizeof(*nodes));
	if (!devs || !nodes) {
		free(devs);
		free(nodes);
		return ODX_ENOMEM;
	}
	for (d = 0; d < ctx->ndevices; d++)
		nodes[d] = ctx->devices[d].memnode;
	for (d = 0; d < ctx->ndevices; d++)
		devs[d] = (odx__policy_device){
			.kind = odx_backend_kind_name(ctx->devices[d].kind),
			.name = ctx->devices[d].name,
			.memory = ctx->devices[d].props.memory_bytes,
		};
	p = (odx__policy_params){
		.spec = spec,
		.ndevices = ctx->ndevices,
		.devices = devs,
		.nnodes = ctx->nmemnodes,
		.device_node = nodes,
		.memory_limit = odx__config_size(ctx->config, "policy.memory_limit",
						 odx__topo_memory(ctx->topo)),
		.budget_ns = 1000u * (uint64_t)odx__config_int(ctx->config, "policy.budget"),
		.load_timeout_ns = 1000000u *
				   (uint64_t)odx__config_int(ctx->config, "policy.load_timeout_ms"),
		.model_dir = odx__config_str(ctx->config, "policy.model_dir"),
		.log = ctx_log,
		.log_user = ctx,
	};
	rc = odx__policy_open(&h, &p, why, sizeof(why));
	free(devs);
	free(nodes);
	if (rc) {
		snprintf(err, errlen, "%s", why[0] ? why : odx_strerror(rc));
		return rc;
	}
	h->ctx = ctx;
	h->feasible = calloc((size_t)BATCH_MAX * (size_t)ctx->ndevices, sizeof(*h->feasible));
	h->resident = calloc((size_t)BATCH_MAX * (size_t)ctx->ndevices, sizeof(*h->resident));
	h->missing = calloc((size_t)BATCH_MAX * (size_t)ctx->ndevices, sizeof(*h->missing));
	h->transfer = calloc((size_t)BATCH_MAX * (size_t)ctx->ndevices, sizeof(*h->transfer));
	h->queue = calloc((size_t)ctx->ndevices, sizeof(*h->queue));
	h->valid = calloc((size_t)ctx->nmemnodes + 1, sizeof(*h->valid));
	h->done = calloc((size_t)ctx->ndevices, sizeof(*h->done));
	if (!h->feasible || !h->resident || !h->missing || !h->transfer || !h->queue || !h->valid ||
	    !h->done) {
		odx__policy_close(h);
		return ODX_ENOMEM;
	}
	ctx->policy = h;
	h->tick_ns = 1000000u * (uint64_t)odx__config_int(ctx->config, "policy.tick_ms");
	if (h->tick_ns) {
		pthread_mutex_init(&h->tick_lock, NULL);
		pthread_cond_init(&h->tick_cond, NULL);
		h->tick_started = pthread_create(&h->tick, NULL, ticker, ctx) == 0;
		if (!h->tick_started) {
			pthread_mutex_destroy(&h->tick_lock);
			pthread_cond_destroy(&h->tick_cond);
			odx__log(ctx, ODX_LOG_WARN, "policy %s: no tick thread, on_tick is not called",
				 h->display);
		}
	}
	return 0;
}

void odx__policy_ctx_close(odx_context *ctx)
{
	odx__policy *h = ctx->policy;

	if (!h)
		return;
	if (h->place_calls)
		odx__log(ctx, ODX_LOG_INFO,
			 "policy %s: %llu place calls for %llu tasks (%.1f a call), %llu failed calls",
			 h->display, (unsigned long long)h->place_calls,
			 (unsigned long long)h->placed, (double)h->placed / (double)h->place_calls,
			 (unsigned long long)atomic_load(&h->failures));
	if (h->tick_started) {
		pthread_mutex_lock(&h->tick_lock);
		h->tick_stop = true;
		pthread_cond_signal(&h->tick_cond);
		pthread_mutex_unlock(&h->tick_lock);
		pthread_join(h->tick, NULL);
		pthread_mutex_destroy(&h->tick_lock);
		pthread_cond_destroy(&h->tick_cond);
		h->tick_started = false;
	}
	process_events(ctx->policy); /* last completions into the models */
	odx__policy_close(ctx->policy);
	ctx->policy = NULL;
}

static void describe_task(odx_context *ctx, odx__policy *h, int i, odx__task *t)
{
	odx__policy_task *pt = &h->tasks[i];
	int nd = ctx->ndevices, d, a;

	*pt = (odx__policy_task){
		.kernel = t->kernel->name,
		.priority = t->priority,
		.tag = t->tag,
		.feasible = &h->feasible[i * nd],
		.resident = &h->resident[i * nd],
		.missing = &h->missing[i * nd],
		.transfer_us = &h->transfer[i * nd],
	};
	for (d = 0; d < nd; d++) {
		h->feasible[i * nd + d] = odx__device_can_run(ctx, &ctx->devices[d], t);
		h->resident[i * nd + d] = 0;
		h->missing[i * nd + d] = 0;
		h->transfer[i * nd + d] = 0;
	}
	for (a = 0; a < t->nargs; a++) {
		const odx_buffer *b = t->args[a].v.buffer;
		int m;

		if (t->args[a].kind != ODX_ARG_BUFFER)
			continue;
		pt->bytes += b->size;
		if (!(t->args[a].access & ODX_R))
			continue;
		/* Relaxed, as in sched.c: a stale answer only makes placement worse. */
		for (m = 0; m < ctx->nmemnodes; m++)
			h->valid[m] = atomic_load_explicit(&b->replicas[m].state,
							   memory_order_relaxed) != ODX__INVALID;
		for (d = 0; d < nd; d++) {
			int dst = ctx->devices[d].memnode;
			double best = 0;

			if (h->valid[dst]) {
				h->resident[i * nd + d] += b->size;
				continue;
			}
			if (b->zero)
				continue;
			h->missing[i * nd + d] += b->size;
			/* From the fastest link among the nodes holding a valid copy. */
			for (m = 0; m < ctx->nmemnodes; m++)
				if (h->valid[m] && atomic_load_explicit(&h->bw[m * h->nnodes + dst],
									memory_order_relaxed) > best)
					best = atomic_load_explicit(&h->bw[m * h->nnodes + dst],
								    memory_order_relaxed);
			h->transfer[i * nd + d] += (double)b->size * 1e6 /
						   (best > 0 ? best : best_in(h, dst));
		}
	}
}

/* Places everything pending, one `place` call per batch. Called with h->lock held. */
static void drain(odx_context *ctx, odx__policy *h)
{
	for (;;) {
		odx__task *t;
		int n = 0, i, d;

		pthread_mutex_lock(&h->pend_lock);
		while (n < BATCH_MAX && (t = h->pend_head) != NULL) {
			h->pend_head = t->policy_next;
			h->batch[n++] = t;
		}
		if (!h->pend_head)
			h->pend_tail = NULL;
		atomic_fetch_sub(&h->npending, n);
		pthread_mutex_unlock(&h->pend_lock);
		if (n == 0)
			return;
		if (odx__policy_enabled(h)) {
			for (i = 0; i < n; i++)
				describe_task(ctx, h, i, h->batch[i]);
			for (d = 0; d < ctx->ndevices; d++)
				h->queue[d] = atomic_load_explicit(&ctx->devices[d].load,
								   memory_order_relaxed);
			odx__policy_place(h, h->tasks, n, h->queue, h->out);
		} else {
			odx__policy_place(h, h->tasks, 0, h->queue, h->out); /* reload check */
			for (i = 0; i < n; i++)
				h->out[i] = -1;
		}
		for (i = 0; i < n; i++) {
			t = h->batch[i];
			d = h->out[i] >= 0 ? h->out[i] : ctx->sched->place(ctx, t);
			odx__sched_queue(ctx, t, d);
		}
	}
}

static bool all_busy(odx_context *ctx)
{
	int d;

	for (d = 0; d < ctx->ndevices; d++)
		if (atomic_load_explicit(&ctx->devices[d].load, memory_order_relaxed) <
		    DEFER_MIN_LOAD)
			return false;
	return true;
}

void odx__policy_push(odx_context *ctx, odx__task *t)
{
	odx__policy *h = ctx->policy;

	/* Buffer reads, writes, releases and forced tasks have nothing to decide. */
	if (t->kind != ODX__TASK_KERNEL || t->device_mask_only) {
		odx__sched_queue(ctx, t, ctx->sched->place(ctx, t));
		return;
	}
	t->policy_next = NULL;
	pthread_mutex_lock(&h->pend_lock);
	if (h->pend_tail)
		h->pend_tail->policy_next = t;
	else
		h->pend_head = t;
	h->pend_tail = t;
	atomic_fetch_add(&h->npending, 1);
	pthread_mutex_unlock(&h->pend_lock);
	/* While every device has work, placing later costs nothing and makes bigger batches (one
	 * Lua call for many tasks): the task waits until a device runs low (odx__policy_task_done),
	 * the batch is full, or the next tick (no deferring without a tick thread as a backstop,
	 * policy.tick_ms = 0). The fence pairs with the one in task_done: either
	 * we see a device run low, or its worker sees our task. */
	atomic_thread_fence(memory_order_seq_cst);
	if (h->tick_started && atomic_load(&h->npending) < DEFER_BATCH && all_busy(ctx))
		return;
	/* Flat combining: whoever holds the lock places everything pending, ours included; a
	 * task appended while the holder was finishing is seen by the re-check after unlock. */
	place_pending(ctx, h);
}

void odx__policy_task_done(odx__task *t, int status)
{
	odx_context *ctx = t->ctx;
	odx__policy *h = ctx->policy;
	uint64_t bytes = 0;
	int a;

	/* The device runs low (its load was decremented before this call): place what waits. */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load(&h->npending) > 0 &&
	    atomic_load_explicit(&ctx->devices[t->device].load, memory_order_relaxed) <
		    DEFER_MIN_LOAD)
		place_pending(ctx, h);

	if (status || !t->launched || !t->t_start || t->kind != ODX__TASK_KERNEL)
		return;
	for (a = 0; a < t->nargs; a++)
		if (t->args[a].kind == ODX_ARG_BUFFER)
			bytes += t->args[a].v.buffer->size;
	odx__policy_feedback(t->ctx->policy, t->kernel->name, t->device, bytes,
			     odx__now_ns() - t->t_start);
}

/* ---- test harness --------------------------------------------------------------------------- */

typedef struct harness {
	const char *spec;
	odx__policy *h;
	char last[ODX__MSG_MAX];
	bool verbose;
} harness;

static void harness_log(void *user, odx_log_level level, bool error, const char *msg)
{
	harness *hs = user;

	if (error)
		snprintf(hs->last, sizeof(hs->last), "%s", msg);
	if (hs->verbose)
		fprintf(stderr, "[policy %d] %s\n", (int)level, msg);
}

static harness *harness_of(lua_State *L)
{
	return lua_touserdata(L, lua_upvalueindex(1));
}

static lua_Integer field_int(lua_State *L, int t, const char *k, lua_Integer def)
{
	lua_Integer v;

	lua_getfield(L, t, k);
	v = luaL_optinteger(L, -1, def);
	lua_pop(L, 1);
	return v;
}

/* harness.open{devices = {"host", {kind=, name=, memory=}, ...}, budget_us=, memory_limit=}:
 * true, or false and the load error. */
static int harness_open(lua_State *L)
{
	harness *hs = harness_of(L);
	odx__policy_device devs[64];
	char names[64][32], err[ODX__MSG_MAX] = "";
	odx__policy_params p;
	int nodes[64], nnodes = 0, nd, d, rc;

	luaL_checktype(L, 1, LUA_TTABLE);
	lua_getfield(L, 1, "devices");
	luaL_checktype(L, -1, LUA_TTABLE);
	nd = (int)lua_rawlen(L, -1);
	luaL_argcheck(L, nd >= 1 && nd <= 64, 1, "1 to 64 devices");
	for (d = 0; d < nd; d++) {
		lua_rawgeti(L, -1, d + 1);
		snprintf(names[d], sizeof(names[d]), "dev%d", d);
		devs[d] = (odx__policy_device){.kind = "host", .name = names[d], .memory = 1ull << 30};
		if (lua_isstring(L, -1)) {
			devs[d].kind = lua_tostring(L, -1);
		} else if (lua_istable(L, -1)) {
			lua_getfield(L, -1, "kind");
			if (lua_isstring(L, -1))
				devs[d].kind = lua_tostring(L, -1);
			lua_getfield(L, -2, "name");
			if (lua_isstring(L, -1))
				devs[d].name = lua_tostring(L, -1);
			lua_pop(L, 2);
			devs[d].memory = (uint64_t)field_int(L, -1, "memory", 1ll << 30);
		}
		nodes[d] = lua_istable(L, -1) ? (int)field_int(L, -1, "node", d + 1) - 1 : d;
		luaL_argcheck(L, nodes[d] >= 0 && nodes[d] < 64, 1, "node: 1 to 64");
		nnodes = nodes[d] + 1 > nnodes ? nodes[d] + 1 : nnodes;
		lua_pop(L, 1); /* the strings stay alive in the machine table */
	}
	p = (odx__policy_params){
		.spec = hs->spec,
		.ndevices = nd,
		.devices = devs,
		.nnodes = nnodes,
		.device_node = nodes,
		.memory_limit = (uint64_t)field_int(L, 1, "memory_limit", 8 << 20),
		.budget_ns = 1000u * (uint64_t)field_int(L, 1, "budget_us", 1000),
		.log = harness_log,
		.log_user = hs,
	};
	odx__policy_close(hs->h);
	hs->h = NULL;
	hs->last[0] = '\0';
	rc = odx__policy_open(&hs->h, &p, err, sizeof(err));
	if (rc)
		return luaL_error(L, "harness.open: %s", err);
	lua_pushboolean(L, odx__policy_enabled(hs->h));
	if (!odx__policy_enabled(hs->h)) {
		lua_pushstring(L, err);
		return 2;
	}
	return 1;
}

static uint64_t row_value(lua_State *L, int t, const char *k, int d, uint64_t def)
{
	uint64_t v = def;

	lua_getfield(L, t, k);
	if (lua_istable(L, -1)) {
		lua_rawgeti(L, -1, d + 1);
		if (lua_isboolean(L, -1))
			v = (uint64_t)lua_toboolean(L, -1);
		else if (lua_isinteger(L, -1))
			v = (uint64_t)lua_tointeger(L, -1);
		lua_pop(L, 1);
	}
	lua_pop(L, 1);
	return v;
}

/* Pushes the answer of an order hook: the 1-based list, or nil and the failure. */
static int push_order(lua_State *L, harness *hs, int rc, const int *order)
{
	int i;

	if (rc < 0) {
		lua_pushnil(L);
		lua_pushstring(L, hs->last[0] ? hs->last : odx_strerror(rc));
		return 2;
	}
	lua_createtable(L, rc, 0);
	for (i = 0; i < rc; i++) {
		lua_pushinteger(L, order[i] + 1);
		lua_rawseti(L, -2, i + 1);
	}
	return 1;
}

/* push_order for a per-task answer, plus the failure the policy host recorded during the call
 * (the C fallback answered those entries): the answers, and that message as a second value. */
static int push_answer(lua_State *L, harness *hs, int rc, const int *out, uint64_t before)
{
	int nret = push_order(L, hs, rc, out);

	if (nret == 1 && odx__policy_failures(hs->h) != before) {
		lua_pushstring(L, hs->last);
		return 2;
	}
	return nret;
}

/* harness.place(tasks [, queue]): the answers (1-based devices, 0 for the built-in) and the
 * failure message of this call, if any. */
static int harness_place(lua_State *L)
{
	harness *hs = harness_of(L);
	odx__policy_task tasks[BATCH_MAX];
	static bool feas[BATCH_MAX * 64];
	static uint64_t res[BATCH_MAX * 64], mis[BATCH_MAX * 64];
	int queue[64], out[BATCH_MAX], n, nd, i, d;
	uint64_t before;

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	luaL_checktype(L, 1, LUA_TTABLE);
	nd = hs->h->nd;
	n = (int)lua_rawlen(L, 1);
	luaL_argcheck(L, n <= BATCH_MAX, 1, "too many tasks");
	for (d = 0; d < nd; d++) {
		queue[d] = 0;
		if (lua_istable(L, 2)) {
			lua_rawgeti(L, 2, d + 1);
			queue[d] = (int)luaL_optinteger(L, -1, 0);
			lua_pop(L, 1);
		}
	}
	for (i = 0; i < n; i++) {
		int t;

		lua_rawgeti(L, 1, i + 1);
		t = lua_gettop(L);
		luaL_checktype(L, t, LUA_TTABLE);
		lua_getfield(L, t, "kernel");
		tasks[i] = (odx__policy_task){
			.kernel = lua_isstring(L, -1) ? lua_tostring(L, -1) : "k",
			.priority = (int)field_int(L, t, "priority", 0),
			.bytes = (uint64_t)field_int(L, t, "bytes", 0),
			.tag = "",
			.feasible = &feas[i * nd],
			.resident = &res[i * nd],
			.missing = &mis[i * nd],
		};
		for (d = 0; d < nd; d++) {
			feas[i * nd + d] = row_value(L, t, "feasible", d, 1) != 0;
			res[i * nd + d] = row_value(L, t, "resident", d, 0);
			mis[i * nd + d] = row_value(L, t, "missing", d,
						    tasks[i].bytes > res[i * nd + d]
							    ? tasks[i].bytes - res[i * nd + d]
							    : 0);
		}
		/* the kernel string stays referenced by the caller's task table */
		lua_settop(L, t - 1);
	}
	before = odx__policy_failures(hs->h);
	hs->last[0] = '\0';
	odx__policy_place(hs->h, tasks, n, queue, out);
	return push_answer(L, hs, n, out, before);
}

/* harness.complete(kernel, device, bytes, us): one completed task for the model. */
static int harness_complete(lua_State *L)
{
	harness *hs = harness_of(L);
	const char *k = luaL_checkstring(L, 1);
	lua_Integer d = luaL_checkinteger(L, 2);

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	luaL_argcheck(L, d >= 1 && d <= hs->h->nd, 2, "no such device");
	/* The kernel name must outlive the event: models copy it when processed, right here. */
	odx__policy_feedback(hs->h, k, (int)d - 1, (uint64_t)luaL_checkinteger(L, 3),
			     (uint64_t)(luaL_checknumber(L, 4) * 1000.0));
	process_events(hs->h);
	return 0;
}

#define HARNESS_BUFS 16 /* buffers per task in the harness's synthetic lists */

/* Reads list `k` of a task table: up to HARNESS_BUFS tables, `f1` and `f2` of each. */
static int read_bufs(lua_State *L, int t, const char *k, const char *f1, uint64_t *v1,
		     const char *f2, uint64_t *v2)
{
	int n = 0;

	lua_getfield(L, t, k);
	if (lua_istable(L, -1)) {
		n = (int)lua_rawlen(L, -1);
		luaL_argcheck(L, n <= HARNESS_BUFS, 1, "too many buffers");
		for (int j = 0; j < n; j++) {
			lua_rawgeti(L, -1, j + 1);
			luaL_checktype(L, -1, LUA_TTABLE);
			v1[j] = (uint64_t)field_int(L, -1, f1, 0);
			v2[j] = (uint64_t)field_int(L, -1, f2, 0);
			lua_pop(L, 1);
		}
	}
	lua_pop(L, 1);
	return n;
}

/* harness.evict(need, {{id=, bytes=, last_use=ns, priority=, dirty=}, ...} [, node]): the
 * order (1-based), or nil and the failure. */
static int harness_evict(lua_State *L)
{
	harness *hs = harness_of(L);
	odx__evict_cand c[BATCH_MAX];
	int order[BATCH_MAX], n, i, rc;
	lua_Integer need = luaL_checkinteger(L, 1);

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	luaL_checktype(L, 2, LUA_TTABLE);
	n = (int)lua_rawlen(L, 2);
	luaL_argcheck(L, n <= BATCH_MAX, 2, "too many candidates");
	for (i = 0; i < n; i++) {
		lua_rawgeti(L, 2, i + 1);
		luaL_checktype(L, -1, LUA_TTABLE);
		c[i] = (odx__evict_cand){
			.buffer_id = (uint64_t)field_int(L, -1, "id", i + 1),
			.bytes = (uint64_t)field_int(L, -1, "bytes", 0),
			.last_use_ns = (uint64_t)field_int(L, -1, "last_use", 0),
			.priority = (int)field_int(L, -1, "priority", 0),
		};
		lua_getfield(L, -1, "dirty");
		c[i].dirty = lua_toboolean(L, -1);
		lua_pop(L, 2);
	}
	hs->last[0] = '\0';
	rc = odx__policy_host_evict(hs->h, (int)luaL_optinteger(L, 3, 1) - 1, (uint64_t)need, c, n,
				    order);
	return push_order(L, hs, rc, order);
}

/* harness.prefetch({{task=, device=, priority=, buffers={{id=, missing=}, ...}}, ...}
 * [, queue]): the order (1-based), or nil and the failure. */
static int harness_prefetch(lua_State *L)
{
	harness *hs = harness_of(L);
	static odx__prefetch_task w[BATCH_MAX];
	static uint64_t ids[BATCH_MAX][HARNESS_BUFS], miss[BATCH_MAX][HARNESS_BUFS];
	int order[BATCH_MAX], n, i, rc;

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	luaL_checktype(L, 1, LUA_TTABLE);
	n = (int)lua_rawlen(L, 1);
	luaL_argcheck(L, n <= BATCH_MAX, 1, "too many tasks");
	for (i = 0; i < hs->h->nd && lua_istable(L, 2); i++) {
		lua_rawgeti(L, 2, i + 1);
		hs->h->qnow[i] = (int)luaL_optinteger(L, -1, 0);
		lua_pop(L, 1);
	}
	for (i = 0; i < n; i++) {
		lua_rawgeti(L, 1, i + 1);
		luaL_checktype(L, -1, LUA_TTABLE);
		w[i] = (odx__prefetch_task){
			.task_id = (uint64_t)field_int(L, -1, "task", i + 1),
			.device = (int)field_int(L, -1, "device", 1) - 1,
			.priority = (int)field_int(L, -1, "priority", 0),
			.buffer_ids = ids[i],
			.missing_bytes = miss[i],
		};
		w[i].nbufs = read_bufs(L, lua_gettop(L), "buffers", "id", ids[i], "missing", miss[i]);
		lua_pop(L, 1);
	}
	hs->last[0] = '\0';
	rc = odx__policy_host_prefetch(hs->h, w, n, order);
	return push_order(L, hs, rc, order);
}

/* harness.place_rank({{task=, kernel=, priority=, bytes=, tag=, buffers={{owner=, bytes=},
 * ...}}, ...}, nranks): the ranks (1-based, 0 where owner-computes decides) and the failure of
 * this call, if any; nil and the failure when the whole call fell back. */
static int harness_place_rank(lua_State *L)
{
	harness *hs = harness_of(L);
	static odx__rank_task b[BATCH_MAX];
	static uint64_t owner64[BATCH_MAX][HARNESS_BUFS], bytes[BATCH_MAX][HARNESS_BUFS];
	static int owner[BATCH_MAX][HARNESS_BUFS];
	int out[BATCH_MAX], n, i, j, rc, nranks = (int)luaL_checkinteger(L, 2);
	uint64_t before;

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	luaL_checktype(L, 1, LUA_TTABLE);
	n = (int)lua_rawlen(L, 1);
	luaL_argcheck(L, n <= BATCH_MAX, 1, "too many tasks");
	for (i = 0; i < n; i++) {
		lua_rawgeti(L, 1, i + 1);
		luaL_checktype(L, -1, LUA_TTABLE);
		b[i] = (odx__rank_task){
			.task_id = (uint64_t)field_int(L, -1, "task", i + 1),
			.priority = (int)field_int(L, -1, "priority", 0),
			.bytes = (uint64_t)field_int(L, -1, "bytes", 0),
			.owner_rank = owner[i],
			.buf_bytes = bytes[i],
		};
		lua_getfield(L, -1, "kernel");
		b[i].kernel = lua_isstring(L, -1) ? lua_tostring(L, -1) : "k";
		lua_getfield(L, -2, "tag");
		b[i].tag = lua_isstring(L, -1) ? lua_tostring(L, -1) : NULL;
		lua_pop(L, 2); /* the strings stay referenced by the caller's task table */
		b[i].nbufs = read_bufs(L, lua_gettop(L), "buffers", "owner", owner64[i], "bytes",
				       bytes[i]);
		for (j = 0; j < b[i].nbufs; j++)
			owner[i][j] = (int)owner64[i][j] - 1;
		lua_pop(L, 1);
	}
	before = odx__policy_failures(hs->h);
	hs->last[0] = '\0';
	rc = odx__policy_host_place_rank(hs->h, b, n, nranks, out);
	return push_answer(L, hs, rc < 0 ? rc : n, out, before);
}

/* harness.tick([queue [, done]]): true, or false and the failure. */
static int harness_tick(lua_State *L)
{
	harness *hs = harness_of(L);
	int queue[64] = {0}, i, rc;
	uint64_t done[64] = {0};

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	for (i = 0; i < hs->h->nd; i++) {
		if (lua_istable(L, 1)) {
			lua_rawgeti(L, 1, i + 1);
			queue[i] = (int)luaL_optinteger(L, -1, 0);
			lua_pop(L, 1);
		}
		if (lua_istable(L, 2)) {
			lua_rawgeti(L, 2, i + 1);
			done[i] = (uint64_t)luaL_optinteger(L, -1, 0);
			lua_pop(L, 1);
		}
	}
	hs->last[0] = '\0';
	rc = odx__policy_host_tick(hs->h, queue, done);
	lua_pushboolean(L, rc == 0);
	if (rc == 0)
		return 1;
	lua_pushstring(L, hs->last[0] ? hs->last : odx_strerror(rc));
	return 2;
}

/* harness.bandwidth(src, dst, bytes_per_s): a measured link (1-based memory nodes). */
static int harness_bandwidth(lua_State *L)
{
	harness *hs = harness_of(L);

	luaL_argcheck(L, hs->h != NULL, 1, "call harness.open first");
	odx__policy_host_set_bandwidth(hs->h, (int)luaL_checkinteger(L, 1) - 1,
				       (int)luaL_checkinteger(L, 2) - 1, luaL_checknumber(L, 3));
	return 0;
}

static int harness_failures(lua_State *L)
{
	harness *hs = harness_of(L);

	lua_pushinteger(L, hs->h ? (lua_Integer)odx__policy_failures(hs->h) : 0);
	lua_pushboolean(L, hs->h && odx__policy_enabled(hs->h));
	return 2;
}

static int harness_run(lua_State *L)
{
	static const luaL_Reg funcs[] = {
		{"open", harness_open},
		{"place", harness_place},
		{"complete", harness_complete},
		{"failures", harness_failures},
		{"evict", harness_evict},
		{"prefetch", harness_prefetch},
		{"place_rank", harness_place_rank},
		{"tick", harness_tick},
		{"bandwidth", harness_bandwidth},
		{NULL, NULL},
	};
	harness *hs = lua_touserdata(L, 1);
	const char *path = lua_tostring(L, 2);

	sandbox(L, false);
	if (luaL_loadfilex(L, path, "t") != LUA_OK)
		lua_error(L);
	luaL_newlibtable(L, funcs);
	lua_pushlightuserdata(L, hs);
	luaL_setfuncs(L, funcs, 1);
	lua_call(L, 1, 0);
	return 0;
}

int odx__policy_test_run(const char *spec, const char *test_path, char *err, size_t errlen)
{
	harness hs = {.spec = spec, .verbose = getenv("ODX_POLICY_TEST_VERBOSE") != NULL};
	lua_State *L = luaL_newstate();
	int rc;

	if (!L)
		return ODX_ENOMEM;
	*(odx__policy **)lua_getextraspace(L) = NULL;
	lua_pushcfunction(L, traceback);
	lua_pushcfunction(L, harness_run);
	lua_pushlightuserdata(L, &hs);
	lua_pushstring(L, test_path);
	rc = lua_pcall(L, 2, 0, 1);
	if (rc != LUA_OK)
		snprintf(err, errlen, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1) : "error");
	lua_close(L);
	odx__policy_close(hs.h);
	return rc == LUA_OK ? 0 : ODX_EINVAL;
}
