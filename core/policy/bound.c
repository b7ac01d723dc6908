/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bound.c - how long a policy call may run. The budget is CPU time of the calling thread,
 * watched by one thread per host: a call past its budget gets a count hook that raises a Lua
 * error (the soft bound); a call that still runs HARD_CPU_BUDGETS more budgets after that hook
 * was armed, or past its wall-clock ceiling, is left by the escape signal and siglongjmp wherever
 * it is, a C function included, and its state is freed without touching Lua (the hard bound).
 * Counting from the arming, not from the call's start, lets the hook end every call that runs
 * Lua code, however late a loaded machine schedules the watchdog: only code the hook cannot
 * reach (a C function, a hook-less handler) meets the hard bound.
 *
 * pol_run_op and pol_state_close are the only entries into a state: each sets an escape point
 * first. Kept apart from the host because the signal handler, the escape points and the unsafe
 * regions (policy_internal.h) must be read together.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>

#include "core.h"
#include "policy_internal.h"

/* The hard bound (docs/policies.md, "What a policy cannot do"): a call still running after this
 * many budgets of its thread's CPU time since the soft bound's hook was armed (which happens
 * after one to one and a half budgets), or past its wall-clock ceiling, is abandoned. A close
 * (no hook to arm) counts from when the watchdog first saw it. */
#define HARD_CPU_BUDGETS 4
#define HOOK_COUNT_STEP 1000     /* instructions between budget hook calls once armed */
#define HARD_WALL_BUDGETS 100    /* a hook call's wall-clock ceiling, in budgets ... */
#define HARD_WALL_MIN_NS 2000000000ull /* ... but never under 2 s (a preempted call is not cut) */
#define ESCAPE_SIGNAL (SIGRTMIN + 5) /* sent by the watchdog to a thread past its hard deadline */

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

/* ---- the hard bound: escape points and the watchdog's signal -------------------------------- */

/* The escape point of the Lua entry this thread is in; NULL outside one. Touched by the thread
 * before any signal can target it, so the handler's TLS read allocates nothing. */
_Thread_local pol_escape *volatile pol_esc_now;
static struct sigaction esc_chained; /* what held ESCAPE_SIGNAL before us: called for others */
static pthread_once_t esc_once = PTHREAD_ONCE_INIT;

__attribute__((noreturn)) void pol_escape_jump(pol_escape *e)
{
	pol_esc_now = NULL;
	siglongjmp(e->jb, 1);
}

/* Jumps out of the call when the watchdog gave up on it, unless this thread is in an unsafe
 * region (then that region's exit jumps). Anything else is not ours: chained. */
static void escape_handler(int sig, siginfo_t *si, void *uc)
{
	pol_escape *e = pol_esc_now;
	int saved = errno;

	if (e && atomic_load(&e->h->kill_seq) == e->seq) {
		if (!e->unsafe)
			pol_escape_jump(e);
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

static void *watchdog(void *arg)
{
	odx__policy *h = arg;
	uint64_t period = h->budget_ns / 2, last_seq = 0, quiet_since = odx__now_ns();
	uint64_t seen_seq = 0, seen_cpu = 0; /* the running call, and its CPU time when first seen */
	uint64_t armed_cpu = 0;              /* its CPU time when the soft hook was armed */

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
				armed_cpu = cpu;
				lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_COUNT_STEP);
			}
			/* The hard bound: HARD_CPU_BUDGETS of the thread's CPU, or the ceiling, and
			 * the call is abandoned wherever it is (a C function, a hook-less handler).
			 * Re-sent every period until the call ends: a signal that found the thread
			 * between the escape point and the call is ignored. */
			if (atomic_load(&h->seq) == s && tid &&
			    ((cpu && L && atomic_load(&h->armed_seq) == s && armed_cpu &&
			      cpu - armed_cpu >= HARD_CPU_BUDGETS * budget) ||
			     (cpu && !L && seen_cpu && cpu - seen_cpu >= HARD_CPU_BUDGETS * budget) ||
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

int pol_watchdog_start(odx__policy *h)
{
	pthread_once(&esc_once, escape_install);
	if (pthread_create(&h->wd, NULL, watchdog, h) != 0)
		return ODX_ENOMEM;
	h->wd_started = true;
	return 0;
}

void pol_watchdog_stop(odx__policy *h)
{
	if (!h->wd_started)
		return;
	pthread_mutex_lock(&h->wd_lock);
	h->wd_stop = true;
	pthread_cond_signal(&h->wd_cond);
	pthread_mutex_unlock(&h->wd_lock);
	pthread_join(h->wd, NULL);
	h->wd_started = false;
}

/* Registers a Lua entry with the watchdog (L NULL: a close, no soft hook) and publishes its
 * escape point; returns the call's sequence number. The normal path stores a few words and
 * bumps a counter. */
static uint64_t call_begin(odx__policy *h, pol_escape *e, lua_State *L, enum op op, uint64_t budget,
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
	pol_esc_now = e;
	mine = atomic_fetch_add(&h->seq, 1) + 1;
	if (atomic_load(&h->wd_idle)) {
		pol_unsafe_enter(e); /* wd_lock */
		wake_watchdog(h);
		pol_unsafe_leave(e);
	}
	return mine;
}

static void call_end(odx__policy *h, lua_State *L, uint64_t mine)
{
	pol_esc_now = NULL;
	atomic_signal_fence(memory_order_seq_cst);
	atomic_fetch_add(&h->seq, 1);
	if (L && atomic_load(&h->armed_seq) == mine)
		lua_sethook(L, NULL, 0, 0);
}

/* ---- entries into a state ------------------------------------------------------------------- */

/* Frees a state without touching Lua: its blocks wholesale, then the host's side. Used after an
 * escape (the state may be mid-operation) and for what lua_close left (nothing, normally). */
void pol_state_free(odx__policy *h, pol_state *s)
{
	pol_blk *b, *next;

	/* The watchdog arms hooks on call_L under wd_lock: it must never see this state again. */
	pthread_mutex_lock(&h->wd_lock);
	if (atomic_load(&h->call_L) == s->L)
		atomic_store(&h->call_L, NULL);
	pthread_mutex_unlock(&h->wd_lock);
	for (b = s->blocks.next; b && b != &s->blocks; b = next) {
		next = b->next;
		free(b);
	}
	pol_shadow_free(&s->sh);
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
		 "its hard deadline (%d more times its CPU budget of %llu us after the budget ran "
		 "out, or a wall-clock ceiling of %llu ms); its Lua state is dropped%s",
		 h->spec, h->display, pol_op_names[op], (unsigned long long)((odx__now_ns() - start) / 1000000),
		 HARD_CPU_BUDGETS, (unsigned long long)(atomic_load(&h->call_budget) / 1000),
		 (unsigned long long)(atomic_load(&h->call_ceiling) / 1000000),
		 loading ? "" : " and the built-in least_loaded decides every call until the file "
				"changes");
}

/* After an escape from state s: it is freed (never touched again), the policy disabled. */
static void give_up(odx__policy *h, pol_state *s)
{
	if (h->cur == s) { /* else a new version's load: the running one stays */
		h->cur = NULL;
		h->disabled = true;
		pol_publish_hooks(h);
		atomic_store(&h->gave_up, true);
	}
	h->rng_now = &h->rng;
	pol_state_free(h, s);
}

/* Wall-clock ceiling of a hook call: HARD_WALL_BUDGETS budgets, at least HARD_WALL_MIN_NS. */
static uint64_t hook_ceiling(uint64_t budget)
{
	return budget * HARD_WALL_BUDGETS > HARD_WALL_MIN_NS ? budget * HARD_WALL_BUDGETS
							      : HARD_WALL_MIN_NS;
}

/*
 * Runs one operation under the budget, behind an escape point; on failure writes the message
 * (file, line, traceback) into err and returns the Lua status. POL_RC_ABANDONED: the call passed
 * its hard deadline and was left by siglongjmp; the state is freed (give_up) and must not be
 * used, err says which policy, file and hook.
 */
int pol_run_op(pol_state *s, pol_op_args *a, uint64_t budget, char *err, size_t errlen)
{
	odx__policy *h = s->h;
	lua_State *L = s->L;
	int base = lua_gettop(L), rc;
	bool load = a->op == OP_SETUP || a->op == OP_INIT || a->op == OP_SELFTEST;
	pol_escape e;
	uint64_t mine;

	lua_rawgeti(L, LUA_REGISTRYINDEX, s->ref_msgh);
	lua_pushcfunction(L, pol_protected_op);
	lua_pushlightuserdata(L, a);
	/* Nothing below sigsetjmp changes a local that the escape path reads. */
	if (sigsetjmp(e.jb, 0)) {
		s->esc = NULL;
		atomic_fetch_add(&h->seq, 1); /* the watchdog lets go of the call */
		abandoned_msg(h, a->op, atomic_load(&h->call_start), err, errlen);
		give_up(h, s);
		return POL_RC_ABANDONED;
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
void pol_state_close(odx__policy *h, pol_state *s)
{
	pol_escape e;
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
			pol_say(h, ODX_LOG_ERROR, true, "%s", msg);
			atomic_store(&h->gave_up, true);
			pol_state_free(h, s);
			return;
		}
		mine = call_begin(h, &e, NULL, OP_CLOSE, h->budget_ns * POL_LOAD_BUDGET_FACTOR,
				  h->load_timeout_ns);
		s->esc = &e;
		lua_close(s->L);
		s->esc = NULL;
		call_end(h, NULL, mine);
		s->L = NULL;
	}
	pol_state_free(h, s);
}
