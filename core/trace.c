/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trace.c - the Chrome trace-event file (ODX_TRACE) and the run summary (ODX_STATS).
 *
 * Each lane (a device's compute lane, its copy lane, the disk tier, the transfers with one peer rank
 * in one direction) records spans into its own array, under the lane's own lock (uncontended but
 * for completions arriving on other threads). The file is written once, at close; with several
 * ranks each writes its own (ranked_path), named so that none overwrites another's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

#define LANE_MAX_EVENTS (4u << 20) /* per lane; beyond it spans are counted, not kept */

typedef struct trace_event {
	uint64_t t0, t1, id;
	uint64_t bytes; /* moved by the span (args "bytes"), 0: none said */
	uint64_t buf;   /* the buffer it moved (args "buffer"), 0: none */
	const char *cat;
	char name[112]; /* "write-back 'a label of ODX_LABEL_MAX bytes'" and a transfer's
			 * "'label' ('its consumer's tag'), SIZE (failed)" fit */
} trace_event;

struct odx__lane_trace {
	odx__lane_trace *next;
	pthread_mutex_t lock; /* uncontended but for asynchronous completions on other threads */
	char name[64];
	int pid, tid;
	trace_event *ev;
	size_t n, cap;
	uint64_t dropped;
};

struct odx__trace {
	pthread_mutex_t lock;
	odx__lane_trace *lanes;
	/* the transfer lanes, [2 * peer + (receive)], made on a peer's first transfer: a job of
	 * many ranks where each talks to few does not get a lane per rank */
	odx__lane_trace **peer;
};

odx__lane_trace *odx__lane_trace_new(odx_context *ctx, const char *name, int pid, int tid)
{
	odx__lane_trace *lt;

	if (!ctx->tracing)
		return NULL;
	if (!ctx->trace) {
		ctx->trace = calloc(1, sizeof(*ctx->trace));
		if (!ctx->trace)
			return NULL;
		pthread_mutex_init(&ctx->trace->lock, NULL);
	}
	lt = calloc(1, sizeof(*lt));
	if (!lt)
		return NULL;
	snprintf(lt->name, sizeof(lt->name), "%s", name);
	pthread_mutex_init(&lt->lock, NULL);
	lt->pid = pid;
	lt->tid = tid;
	pthread_mutex_lock(&ctx->trace->lock);
	lt->next = ctx->trace->lanes;
	ctx->trace->lanes = lt;
	pthread_mutex_unlock(&ctx->trace->lock);
	return lt;
}

odx__lane_trace *odx__trace_peer_lane(odx_context *ctx, int peer, bool send)
{
	odx__lane_trace *lt = NULL, **lanes;
	size_t slot = 2 * (size_t)peer + !send;
	char name[64];

	/* ctx->trace exists once tracing: the devices' lanes made it at open. */
	if (!ctx->tracing || !ctx->trace || peer < 0 || peer >= ctx->size)
		return NULL;
	pthread_mutex_lock(&ctx->trace->lock);
	if (!ctx->trace->peer)
		ctx->trace->peer = calloc(2 * (size_t)ctx->size, sizeof(*ctx->trace->peer));
	lanes = ctx->trace->peer;
	if (lanes)
		lt = lanes[slot];
	pthread_mutex_unlock(&ctx->trace->lock);
	if (lt || !lanes)
		return lt;
	/* Made outside the lock (odx__lane_trace_new takes it); a racing twin is kept in the list
	 * (an empty lane costs a name in the file), the first one stored wins. */
	snprintf(name, sizeof(name), "rank %d %s", peer, send ? "send" : "receive");
	lt = odx__lane_trace_new(ctx, name, 0, 2 * ctx->ndevices + 2 + (int)slot);
	if (!lt)
		return NULL;
	pthread_mutex_lock(&ctx->trace->lock);
	if (lanes[slot])
		lt = lanes[slot];
	else
		lanes[slot] = lt;
	pthread_mutex_unlock(&ctx->trace->lock);
	return lt;
}

static void record(odx__lane_trace *lt, const char *name, const char *cat, uint64_t t0, uint64_t t1,
		   uint64_t task_id, uint64_t bytes, uint64_t buf);

void odx__trace_span(odx__lane_trace *lt, const char *name, const char *cat, uint64_t t0,
		     uint64_t t1, uint64_t task_id)
{
	record(lt, name, cat, t0, t1, task_id, 0, 0);
}

void odx__trace_span_sized(odx__lane_trace *lt, const char *name, const char *cat, uint64_t t0,
			   uint64_t t1, uint64_t task_id, uint64_t bytes, uint64_t buf)
{
	record(lt, name, cat, t0, t1, task_id, bytes, buf);
}

void odx__trace_span_buf(odx__lane_trace *lt, const char *what, const char *cat, uint64_t t0,
			 uint64_t t1, uint64_t task_id, const odx_buffer *b, uint64_t bytes)
{
	char who[ODX_LABEL_MAX + 24], name[sizeof(((trace_event *)0)->name)];

	if (!lt)
		return;
	odx__buffer_name(b, who, sizeof(who));
	snprintf(name, sizeof(name), "%s %s", what, who);
	record(lt, name, cat, t0, t1, task_id, bytes, b->id);
}

static void record(odx__lane_trace *lt, const char *name, const char *cat, uint64_t t0, uint64_t t1,
		   uint64_t task_id, uint64_t bytes, uint64_t buf)
{
	trace_event *e;

	if (!lt)
		return;
	pthread_mutex_lock(&lt->lock);
	if (lt->n == lt->cap) {
		size_t cap = lt->cap ? 2 * lt->cap : 1024;
		trace_event *ev;

		if (cap > LANE_MAX_EVENTS || !(ev = realloc(lt->ev, cap * sizeof(*ev)))) {
			lt->dropped++;
			pthread_mutex_unlock(&lt->lock);
			return;
		}
		lt->ev = ev;
		lt->cap = cap;
	}
	e = &lt->ev[lt->n++];
	e->t0 = t0;
	e->t1 = t1;
	e->id = task_id;
	e->bytes = bytes;
	e->buf = buf;
	e->cat = cat;
	snprintf(e->name, sizeof(e->name), "%s", name);
	pthread_mutex_unlock(&lt->lock);
}

static void put_json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/*
 * With several ranks, rank R writes `path` with ".rankR" before the extension of its last
 * component ("t/trace.json" -> "t/trace.rank1.json"), or after it when that has none ("trace" ->
 * "trace.rank1"; a leading dot, as in ".trace", is no extension). One rank: `path` itself.
 */
static const char *ranked_path(const odx_context *ctx, const char *path, char *out, size_t n)
{
	const char *base = strrchr(path, '/'), *dot;

	if (ctx->size <= 1)
		return path;
	base = base ? base + 1 : path;
	dot = strrchr(base, '.');
	if (!dot || dot == base)
		dot = base + strlen(base);
	snprintf(out, n, "%.*s.rank%d%s", (int)(dot - path), path, ctx->rank, dot);
	return out;
}

int odx__trace_write(odx_context *ctx, const char *path)
{
	odx__lane_trace *lt;
	char ranked[4096];
	FILE *f;
	size_t i;

	if (!ctx->trace)
		return 0;
	if (strlen(path) + 16 > sizeof(ranked) && ctx->size > 1)
		return odx__fail(ctx, ODX_EINVAL, "trace file name too long: '%s'", path);
	path = ranked_path(ctx, path, ranked, sizeof(ranked));
	f = fopen(path, "we");
	if (!f)
		return odx__fail(ctx, ODX_EIO, "cannot write trace file '%s': %s", path,
				 strerror(errno));
	fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", f);
	/* Files of several ranks opened together (one view in Perfetto) stay apart by name. */
	if (ctx->size > 1)
		fprintf(f, "{\"ph\":\"M\",\"pid\":0,\"name\":\"process_name\","
			   "\"args\":{\"name\":\"odx rank %d\"}}",
			ctx->rank);
	else
		fprintf(f, "{\"ph\":\"M\",\"pid\":0,\"name\":\"process_name\","
			   "\"args\":{\"name\":\"odx\"}}");
	for (lt = ctx->trace->lanes; lt; lt = lt->next) {
		fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\","
			   "\"args\":{\"name\":",
			lt->pid, lt->tid);
		put_json_string(f, lt->name);
		fprintf(f, "}},\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_sort_index\","
			   "\"args\":{\"sort_index\":%d}}",
			lt->pid, lt->tid, lt->tid);
		for (i = 0; i < lt->n; i++) {
			const trace_event *e = &lt->ev[i];
			uint64_t t0 = e->t0 > ctx->t_open ? e->t0 - ctx->t_open : 0;

			fprintf(f, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"cat\":\"%s\",\"name\":",
				lt->pid, lt->tid, e->cat);
			put_json_string(f, e->name);
			fprintf(f, ",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"id\":%llu", t0 / 1e3,
				(e->t1 - e->t0) / 1e3, (unsigned long long)e->id);
			if (e->bytes)
				fprintf(f, ",\"bytes\":%llu", (unsigned long long)e->bytes);
			if (e->buf)
				fprintf(f, ",\"buffer\":%llu", (unsigned long long)e->buf);
			fputs("}}", f);
		}
		if (lt->dropped)
			odx__log(ctx, ODX_LOG_WARN, "trace: lane '%s' dropped %llu spans", lt->name,
				 (unsigned long long)lt->dropped);
	}
	fputs("\n]}\n", f);
	if (fclose(f) != 0)
		return odx__fail(ctx, ODX_EIO, "cannot write trace file '%s': %s", path,
				 strerror(errno));
	odx__log(ctx, ODX_LOG_INFO, "trace written to %s", path);
	return 0;
}

void odx__trace_free(odx_context *ctx)
{
	odx__lane_trace *lt, *next;

	if (!ctx->trace)
		return;
	for (lt = ctx->trace->lanes; lt; lt = next) {
		next = lt->next;
		pthread_mutex_destroy(&lt->lock);
		free(lt->ev);
		free(lt);
	}
	free(ctx->trace->peer); /* its lanes are in the list */
	pthread_mutex_destroy(&ctx->trace->lock);
	free(ctx->trace);
	ctx->trace = NULL;
}

static void emit(odx_context *ctx, FILE *f, const char *line)
{
	if (ctx->log_fn)
		ctx->log_fn(ctx->log_user, ODX_LOG_INFO, line);
	else
		fprintf(f, "%s\n", line);
}

static void emit_line(odx_context *ctx, const char *line)
{
	emit(ctx, stderr, line);
}

void odx__stats_print(odx_context *ctx)
{
	double wall = (double)(odx__now_ns() - ctx->t_open) / 1e9;
	uint64_t tasks = 0, bytes = 0;
	char line[512];
	int d, s, m;

	for (d = 0; d < ctx->ndevices; d++)
		tasks += atomic_load(&ctx->devices[d].tasks_run);
	for (s = 0; s < ctx->nmemnodes * ctx->nmemnodes; s++)
		bytes += atomic_load(&ctx->bytes_copied[s]);
	snprintf(line, sizeof(line),
		 "odx stats: %llu tasks on %d devices in %.3f s; %llu copies, %.1f MiB moved",
		 (unsigned long long)tasks, ctx->ndevices, wall,
		 (unsigned long long)atomic_load(&ctx->copies), (double)bytes / (1 << 20));
	emit(ctx, stderr, line);
	for (d = 0; d < ctx->ndevices; d++) {
		odx__device *dev = &ctx->devices[d];
		double busy = (double)atomic_load(&dev->busy_ns) / 1e9;

		snprintf(line, sizeof(line),
			 "  device %d (%s): %llu tasks (%llu launched behind their predecessor, "
			 "%llu taken from devices sharing its memory), "
			 "%llu reads and writes copied behind theirs, busy %.3f s (%.0f%% of the "
			 "run)",
			 d, dev->name, (unsigned long long)atomic_load(&dev->tasks_run),
			 (unsigned long long)atomic_load(&dev->chained),
			 (unsigned long long)atomic_load(&dev->stolen),
			 (unsigned long long)atomic_load(&dev->copied_behind), busy,
			 wall > 0 ? 100.0 * busy / wall : 0.0);
		emit(ctx, stderr, line);
	}
	for (s = 0; s < ctx->nmemnodes; s++)
		for (m = 0; m < ctx->nmemnodes; m++) {
			uint64_t b = atomic_load(&ctx->bytes_copied[s * ctx->nmemnodes + m]);

			if (!b)
				continue;
			snprintf(line, sizeof(line),
				 "  copied memory node %d -> %d: %.3f MiB (%llu bytes)", s, m,
				 (double)b / (1 << 20), (unsigned long long)b);
			emit(ctx, stderr, line);
		}
	if (atomic_load(&ctx->shuffles)) {
		snprintf(line, sizeof(line),
			 "  shuffles: %llu on this rank; parts: %llu bytes sent to other ranks, "
			 "%llu bytes received from them, %llu bytes copied locally",
			 (unsigned long long)atomic_load(&ctx->shuffles),
			 (unsigned long long)atomic_load(&ctx->shuffle_sent),
			 (unsigned long long)atomic_load(&ctx->shuffle_recvd),
			 (unsigned long long)atomic_load(&ctx->shuffle_copied));
		emit(ctx, stderr, line);
	}
	odx__tier_stats_print(ctx, emit_line);
	odx__dist_stats_print(ctx, emit_line);
}
