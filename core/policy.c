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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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
#define HOOK_COUNT_STEP 1000     /* instructions between budget hook calls once armed */
#define OUTLIER_MIN_SAMPLES 10
#define OUTLIER_SIGMAS 5.0
#define MODEL_FILE "odx-models.txt"

/* The shipped policies, embedded by odx-embed (policies/meson.build). */
#define EMBEDDED(X) X(eager) X(round_robin) X(locality) X(heft)
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
	HOOK_PLACE_RANK, /* not called yet: fabric issue */
	HOOK_PREFETCH,   /* not called yet: tier issue */
	HOOK_EVICT,      /* not called yet: tier issue */
	HOOK_COUNT,
};
static const char *const hook_names[HOOK_COUNT] = {
	"place", "init", "on_complete", "selftest", "place_rank", "prefetch", "evict",
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
	T_COUNT,
};
#define NROWS 4 /* T_FEASIBLE .. T_RESIDENT */

typedef struct pstate {
	lua_State *L;
	odx__policy *h;
	size_t used, limit;
	int ref_msgh;
	int ref_hook[HOOK_COUNT]; /* LUA_NOREF where absent */
	int ref_table[T_COUNT];
	int rows;                 /* rows allocated in the per-task x device tables */
	int last_n;               /* entries filled by the previous batch */
	int place_line;           /* where `place` is defined, for answer errors */
	char chunk[256];          /* file name as Lua reports it */
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
	int consecutive;
	_Atomic uint64_t failures;
	uint64_t sites[MAX_SITES];
	int nsites;
	uint64_t rng;

	/* watchdog: arms a count hook on the running state only when a call overruns */
	pthread_t wd;
	bool wd_started, wd_stop;
	pthread_mutex_t wd_lock;  /* also held while a state is closed */
	pthread_cond_t wd_cond;
	_Atomic uint64_t seq;     /* odd while a call runs */
	_Atomic uint64_t armed_seq;
	_Atomic uint64_t call_start, call_budget;
	_Atomic(lua_State *) call_L;
	_Atomic bool wd_idle;

	/* models */
	model_entry *models;
	size_t mcap, mcount;
	double *dev_mean;
	uint64_t *dev_n;

	/* completions, pushed by workers */
	pthread_mutex_t ev_lock;
	event ev[EVENTS_MAX], ev_copy[EVENTS_MAX];
	int nev;
	uint64_t ev_dropped;

	/* context glue */
	odx_context *ctx;
	pthread_mutex_t lock;     /* the Lua state: one thread at a time */
	pthread_mutex_t pend_lock;
	odx__task *pend_head, *pend_tail;
	_Atomic int npending;
	odx__task *batch[BATCH_MAX];
	odx__policy_task tasks[BATCH_MAX];
	bool *feasible;
	uint64_t *resident, *missing;
	int *queue, out[BATCH_MAX];
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

static void *watchdog(void *arg)
{
	odx__policy *h = arg;
	uint64_t period = h->budget_ns / 2, last_seq = 0, quiet_since = odx__now_ns();

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
			lua_State *L = atomic_load(&h->call_L);

			/* The state cannot be closed under us: closing takes wd_lock. */
			if (atomic_load(&h->seq) == s && now > start + budget &&
			    atomic_load(&h->armed_seq) != s) {
				atomic_store(&h->armed_seq, s);
				lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_COUNT_STEP);
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

/* lua_pcall under the budget: the normal path stores three words and bumps a counter. */
static int pcall_budget(pstate *s, int nargs, int msgh, uint64_t budget)
{
	odx__policy *h = s->h;
	uint64_t mine;
	int rc;

	atomic_store(&h->call_L, s->L);
	atomic_store(&h->call_budget, budget);
	atomic_store(&h->call_start, odx__now_ns());
	mine = atomic_fetch_add(&h->seq, 1) + 1;
	if (atomic_load(&h->wd_idle))
		wake_watchdog(h);
	rc = lua_pcall(s->L, nargs, 0, msgh);
	atomic_fetch_add(&h->seq, 1);
	if (atomic_load(&h->armed_seq) == mine)
		lua_sethook(s->L, NULL, 0, 0);
	return rc;
}

/* ---- the sandbox ---------------------------------------------------------------------------- */

static void *capped_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	pstate *s = ud;
	size_t old = ptr ? osize : 0;
	void *p;

	if (nsize == 0) {
		free(ptr);
		s->used -= old;
		return NULL;
	}
	if (nsize > old && s->used + (nsize - old) > s->limit)
		return NULL;
	p = realloc(ptr, nsize);
	if (!p)
		return nsize <= old ? ptr : NULL; /* Lua assumes shrinking never fails */
	s->used = s->used - old + nsize;
	return p;
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
	if (h)
		say(h, ODX_LOG_INFO, false, "policy %s: %s", h->display, lua_tostring(L, -1));
	else
		fprintf(stderr, "%s\n", lua_tostring(L, -1)); /* the test harness's own state */
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

/* odx.random(): [0, 1); odx.random(m): 1..m; odx.random(m, n): m..n (as math.random). */
static int lua_odx_random(lua_State *L)
{
	static _Thread_local uint64_t harness_rng = 0x2545f4914f6cdd1dull;
	odx__policy *h = host_of(L);
	uint64_t r = next_random(h ? &h->rng : &harness_rng);
	lua_Integer lo = 1, hi;

	if (lua_gettop(L) == 0) {
		lua_pushnumber(L, (lua_Number)(r >> 11) * (1.0 / 9007199254740992.0));
		return 1;
	}
	hi = luaL_checkinteger(L, 1);
	if (lua_gettop(L) >= 2) {
		lo = hi;
		hi = luaL_checkinteger(L, 2);
	}
	luaL_argcheck(L, lo <= hi, 1, "interval is empty");
	lua_pushinteger(L, lo + (lua_Integer)(r % ((uint64_t)(hi - lo) + 1)));
	return 1;
}

/* odx.argmin(row [, n]): index and value of the smallest number in row[1..n]; nil if none. */
static int lua_odx_argmin(lua_State *L)
{
	lua_Integer n, i, best = 0;
	lua_Number bestv = 0;

	luaL_checktype(L, 1, LUA_TTABLE);
	n = luaL_optinteger(L, 2, (lua_Integer)lua_rawlen(L, 1));
	for (i = 1; i <= n; i++) {
		int isnum;
		lua_Number v;

		lua_rawgeti(L, 1, i);
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
	lua_getfield(L, -1, LUA_STRLIBNAME);
	lua_pushnil(L);
	lua_setfield(L, -2, "dump");
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

enum op {
	OP_SETUP,
	OP_INIT,
	OP_SELFTEST,
	OP_PLACE,
	OP_COMPLETE,
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
} op_args;

static int newref_table(lua_State *L, int narr)
{
	lua_createtable(L, narr, 0);
	return luaL_ref(L, LUA_REGISTRYINDEX);
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
	};
	int t;

	for (t = 0; t < T_COUNT; t++)
		s->ref_table[t] = newref_table(L, 0);
	for (t = 0; t < T_COUNT; t++) {
		if (!fields[t].field)
			continue;
		lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[fields[t].parent]);
		lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[t]);
		lua_setfield(L, -2, fields[t].field);
		lua_pop(L, 1);
	}
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_table[T_BATCH]);
	lua_pushinteger(L, s->h->nd);
	lua_setfield(L, -2, "ndevices");
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
	lua_getfield(L, -1, "api");
	if (!lua_isnil(L, -1) && !(lua_isinteger(L, -1) && lua_tointeger(L, -1) == 1))
		luaL_error(L, "%s: 'api' must be 1 (the hook API this ODX implements)",
			   chunkname + 1);
	lua_pop(L, 1);
	for (i = 0; i < HOOK_COUNT; i++) {
		lua_getfield(L, -1, hook_names[i]);
		if (lua_isnil(L, -1)) {
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
	lua_createtable(L, h->nd, 0);
	for (d = 0; d < h->nd; d++) {
		lua_createtable(L, 0, 4);
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

static void fill_batch(lua_State *L, pstate *s, op_args *a)
{
	odx__policy *h = s->h;
	int idx[T_COUNT], t, i, d, nd = h->nd;

	for (t = T_BATCH; t <= T_FREE_AT; t++)
		idx[t] = push_table(L, s, (enum table)t);
	/* Rows are made once and reused: no allocation per task after warm-up. */
	for (; s->rows < a->n; s->rows++) {
		for (t = T_FEASIBLE; t < T_FEASIBLE + NROWS; t++) {
			lua_createtable(L, nd, 0);
			lua_rawseti(L, idx[t], s->rows + 1);
		}
	}
	lua_pushinteger(L, a->n);
	lua_setfield(L, idx[T_BATCH], "n");
	for (d = 0; d < nd; d++) {
		lua_pushinteger(L, a->queue[d]);
		lua_rawseti(L, idx[T_QUEUE], d + 1);
		lua_pushnumber(L, h->dev_n[d] ? a->queue[d] * h->dev_mean[d] : 0);
		lua_rawseti(L, idx[T_FREE_AT], d + 1);
	}
	for (i = 0; i < a->n; i++) {
		const odx__policy_task *pt = &a->tasks[i];
		uint32_t hash = str_hash(pt->kernel);
		int b = size_bucket(pt->bytes), row[NROWS], r;

		lua_pushstring(L, pt->kernel);
		lua_rawseti(L, idx[T_KERNEL], i + 1);
		lua_pushinteger(L, pt->priority);
		lua_rawseti(L, idx[T_PRIORITY], i + 1);
		lua_pushinteger(L, (lua_Integer)pt->bytes);
		lua_rawseti(L, idx[T_BYTES], i + 1);
		lua_pushstring(L, pt->tag ? pt->tag : "");
		lua_rawseti(L, idx[T_TAG], i + 1);
		for (r = 0; r < NROWS; r++) {
			lua_rawgeti(L, idx[T_FEASIBLE + r], i + 1);
			row[r] = lua_gettop(L);
		}
		for (d = 0; d < nd; d++) {
			model_entry *e = model_find(h, pt->kernel, hash, d, b, false);

			lua_pushboolean(L, pt->feasible[d]);
			lua_rawseti(L, row[0], d + 1);
			lua_pushnumber(L, e && e->n ? e->mean : -1);
			lua_rawseti(L, row[1], d + 1);
			lua_pushnumber(L, (double)pt->missing[d] * 1e6 / LINK_BANDWIDTH);
			lua_rawseti(L, row[2], d + 1);
			lua_pushinteger(L, (lua_Integer)pt->resident[d]);
			lua_rawseti(L, row[3], d + 1);
		}
		lua_pop(L, NROWS);
	}
	/* Entries left from a larger batch would confuse `#`: clear them. */
	for (i = a->n; i < s->last_n; i++)
		for (t = T_KERNEL; t <= T_TAG; t++) {
			lua_pushnil(L);
			lua_rawseti(L, idx[t], i + 1);
		}
	s->last_n = a->n;
	lua_settop(L, idx[T_BATCH]);
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
	for (i = 1; i <= a->n || i <= (int)lua_rawlen(L, outdev); i++) {
		lua_pushnil(L);
		lua_rawseti(L, outdev, i);
	}
	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_hook[HOOK_PLACE]);
	lua_pushvalue(L, batch);
	lua_pushvalue(L, out);
	lua_call(L, 2, 1);
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
	lua_setfield(L, ev, "n");
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

static int protected_op(lua_State *L)
{
	op_args *a = lua_touserdata(L, 1);

	lua_settop(L, 0);
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
	}
	return 0;
}

/* Runs one operation under the budget; on failure writes the message (file, line, traceback)
 * into err and returns the Lua status. */
static int run_op(pstate *s, op_args *a, uint64_t budget, char *err, size_t errlen)
{
	lua_State *L = s->L;
	int base = lua_gettop(L), rc;

	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_msgh);
	lua_pushcfunction(L, protected_op);
	lua_pushlightuserdata(L, a);
	rc = pcall_budget(s, 1, base + 1, budget);
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

static void state_close(odx__policy *h, pstate *s)
{
	if (!s)
		return;
	/* The watchdog may be arming a hook on this state: it holds wd_lock while it does. */
	pthread_mutex_lock(&h->wd_lock);
	if (s->L)
		lua_close(s->L);
	pthread_mutex_unlock(&h->wd_lock);
	free(s);
}

/* A new state with the policy loaded, initialised and self-tested; NULL with err on failure. */
static pstate *state_open(odx__policy *h, char *err, size_t errlen)
{
	uint64_t load_budget = h->budget_ns * LOAD_BUDGET_FACTOR;
	op_args a = {0};
	pstate *s = calloc(1, sizeof(*s));
	int i;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->h = h;
	s->limit = h->limit;
	for (i = 0; i < HOOK_COUNT; i++)
		s->ref_hook[i] = LUA_NOREF;
	s->L = lua_newstate(capped_alloc, s);
	if (!s->L) {
		snprintf(err, errlen, "%s: cannot create a Lua state within policy.memory_limit",
			 h->display);
		free(s);
		return NULL;
	}
	*(odx__policy **)lua_getextraspace(s->L) = h;
	lua_pushcfunction(s->L, traceback);
	s->ref_msgh = luaL_ref(s->L, LUA_REGISTRYINDEX);
	a.s = s;
	a.op = OP_SETUP;
	if (run_op(s, &a, load_budget, err, errlen) != LUA_OK)
		goto out_close;
	a.op = OP_INIT;
	if (s->ref_hook[HOOK_INIT] != LUA_NOREF && run_op(s, &a, load_budget, err, errlen))
		goto out_close;
	a.op = OP_SELFTEST;
	if (s->ref_hook[HOOK_SELFTEST] != LUA_NOREF && run_op(s, &a, load_budget, err, errlen))
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
	h->log = p->log;
	h->log_user = p->log_user;
	h->rng = 0x2545f4914f6cdd1dull;
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
	if (!h->spec || !h->model_dir || !h->devs || !h->models || !h->dev_mean || !h->dev_n)
		goto out_fail;
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
				 "lua:locality, lua:heft)",
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
	if (pthread_create(&h->wd, NULL, watchdog, h) != 0)
		goto out_fail;
	h->wd_started = true;
	h->next_check = odx__now_ns() + RELOAD_CHECK_NS;
	h->cur = state_open(h, why, sizeof(why));
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
	if (h->wd_started) {
		pthread_mutex_lock(&h->wd_lock);
		h->wd_stop = true;
		pthread_cond_signal(&h->wd_cond);
		pthread_mutex_unlock(&h->wd_lock);
		pthread_join(h->wd, NULL);
	}
	models_save(h);
	state_close(h, h->cur);
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
	h->consecutive = 0;
	h->nsites = 0;
	say(h, ODX_LOG_INFO, false, "policy %s: reloaded", h->display);
}

/* Moves the completions recorded by workers into the models and on_complete. */
static void process_events(odx__policy *h)
{
	char why[ODX__MSG_MAX];
	op_args a = {0};
	int n, i;

	/* One uncontended lock per batch: cheaper than explaining a racy peek to TSan. */
	pthread_mutex_lock(&h->ev_lock);
	n = h->nev;
	if (n == 0) {
		pthread_mutex_unlock(&h->ev_lock);
		return;
	}
	memcpy(h->ev_copy, h->ev, (size_t)n * sizeof(*h->ev));
	h->nev = 0;
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
	if (run_op(h->cur, &a, h->budget_ns, why, sizeof(why)) != LUA_OK)
		fail(h, why, why);
}

int odx__policy_place(odx__policy *h, const odx__policy_task *tasks, int n, const int *queue,
		      int *out)
{
	char why[ODX__MSG_MAX];
	op_args a = {0};
	int i;

	odx__policy_check_reload(h, false);
	process_events(h);
	for (i = 0; i < n; i++)
		out[i] = -1;
	if (!h->cur || h->disabled || n == 0)
		return 0;
	a.op = OP_PLACE;
	a.s = h->cur;
	a.tasks = tasks;
	a.n = n;
	a.queue = queue;
	a.out = out;
	if (run_op(h->cur, &a, h->budget_ns, why, sizeof(why)) != LUA_OK) {
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

void odx__policy_feedback(odx__policy *h, const char *kernel, int device, uint64_t bytes,
			  uint64_t ns)
{
	pthread_mutex_lock(&h->ev_lock);
	if (h->nev < EVENTS_MAX)
		h->ev[h->nev++] = (event){.kernel = kernel, .device = device, .bytes = bytes,
					  .ns = ns};
	else
		h->ev_dropped++;
	pthread_mutex_unlock(&h->ev_lock);
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

int odx__policy_ctx_open(odx_context *ctx, char *err, size_t errlen)
{
	const char *spec = odx__config_str(ctx->config, "policy");
	odx__policy_device *devs;
	odx__policy_params p;
	odx__policy *h = NULL;
	char why[ODX__MSG_MAX] = "";
	int d, rc;

	if (odx__sched_find(spec))
		return 0;
	devs = calloc((size_t)ctx->ndevices, sizeof(*devs));
	if (!devs)
		return ODX_ENOMEM;
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
		.memory_limit = odx__config_size(ctx->config, "policy.memory_limit",
						 odx__topo_memory(ctx->topo)),
		.budget_ns = 1000u * (uint64_t)odx__config_int(ctx->config, "policy.budget"),
		.model_dir = odx__config_str(ctx->config, "policy.model_dir"),
		.log = ctx_log,
		.log_user = ctx,
	};
	rc = odx__policy_open(&h, &p, why, sizeof(why));
	free(devs);
	if (rc) {
		snprintf(err, errlen, "%s", why[0] ? why : odx_strerror(rc));
		return rc;
	}
	h->ctx = ctx;
	h->feasible = calloc((size_t)BATCH_MAX * (size_t)ctx->ndevices, sizeof(*h->feasible));
	h->resident = calloc((size_t)BATCH_MAX * (size_t)ctx->ndevices, sizeof(*h->resident));
	h->missing = calloc((size_t)BATCH_MAX * (size_t)ctx->ndevices, sizeof(*h->missing));
	h->queue = calloc((size_t)ctx->ndevices, sizeof(*h->queue));
	if (!h->feasible || !h->resident || !h->missing || !h->queue) {
		odx__policy_close(h);
		return ODX_ENOMEM;
	}
	ctx->policy = h;
	return 0;
}

void odx__policy_ctx_close(odx_context *ctx)
{
	if (!ctx->policy)
		return;
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
	};
	for (d = 0; d < nd; d++) {
		h->feasible[i * nd + d] = odx__device_can_run(ctx, &ctx->devices[d], t);
		h->resident[i * nd + d] = 0;
		h->missing[i * nd + d] = 0;
	}
	for (a = 0; a < t->nargs; a++) {
		const odx_buffer *b = t->args[a].v.buffer;

		if (t->args[a].kind != ODX_ARG_BUFFER)
			continue;
		pt->bytes += b->size;
		if (!(t->args[a].access & ODX_R))
			continue;
		for (d = 0; d < nd; d++) {
			/* Relaxed, as in sched.c: a stale answer only makes placement worse. */
			int st = atomic_load_explicit(&b->replicas[ctx->devices[d].memnode].state,
						      memory_order_relaxed);

			if (st != ODX__INVALID)
				h->resident[i * nd + d] += b->size;
			else if (!b->zero)
				h->missing[i * nd + d] += b->size;
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
	/* Flat combining: whoever holds the lock places everything pending, ours included; a
	 * task appended while the holder was finishing is seen by the re-check after unlock. */
	while (atomic_load(&h->npending) > 0 && pthread_mutex_trylock(&h->lock) == 0) {
		drain(ctx, h);
		pthread_mutex_unlock(&h->lock);
	}
}

void odx__policy_task_done(odx__task *t, int status)
{
	uint64_t bytes = 0;
	int a;

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
	int nd, d, rc;

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
		lua_pop(L, 1); /* the strings stay alive in the machine table */
	}
	p = (odx__policy_params){
		.spec = hs->spec,
		.ndevices = nd,
		.devices = devs,
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
	lua_createtable(L, n, 0);
	for (i = 0; i < n; i++) {
		lua_pushinteger(L, out[i] + 1);
		lua_rawseti(L, -2, i + 1);
	}
	if (odx__policy_failures(hs->h) != before) {
		lua_pushstring(L, hs->last);
		return 2;
	}
	return 1;
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
