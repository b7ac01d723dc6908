/* SPDX-License-Identifier: Apache-2.0 */
/*
 * abi_module.c - the harness of the below-the-API backend tests (see abi_module.h).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "abi_module.h"

abi_module abi;

/* ---- the host side of the ABI: configuration from the environment, logs to stderr --------- */

/* "vulkan.allow_cpu" -> $ODX_VULKAN_ALLOW_CPU, as the core's configuration reads it. */
static const char *env_value(const char *key)
{
	char name[128] = "ODX_";
	size_t n = 4;

	for (; *key && n + 1 < sizeof(name); key++)
		name[n++] = *key == '.' ? '_'
					: (char)((*key >= 'a' && *key <= 'z') ? *key - 32 : *key);
	name[n] = '\0';
	return getenv(name);
}

static int cfg_str(void *core, const char *key, const char **out)
{
	const char *v = env_value(key);

	(void)core;
	if (!v)
		return ODX_ENOENT;
	*out = v;
	return 0;
}

static int cfg_int(void *core, const char *key, int64_t *out)
{
	const char *v = env_value(key);

	(void)core;
	if (!v)
		return ODX_ENOENT;
	*out = strtoll(v, NULL, 0);
	return 0;
}

static int cfg_bool(void *core, const char *key, bool *out)
{
	const char *v = env_value(key);

	(void)core;
	if (!v)
		return ODX_ENOENT;
	*out = strcasecmp(v, "true") == 0 || strcasecmp(v, "yes") == 0 || strcmp(v, "1") == 0;
	return 0;
}

static int cfg_size(void *core, const char *key, uint64_t percent_of, uint64_t *out)
{
	const char *v = env_value(key);
	char *end;
	double x;

	(void)core;
	if (!v)
		return ODX_ENOENT;
	x = strtod(v, &end);
	*out = *end == '%' ? (uint64_t)(x / 100.0 * (double)percent_of) : (uint64_t)x;
	return 0;
}

static int bind_thread(void *core, unsigned slot)
{
	(void)core;
	(void)slot;
	return 0;
}

static void log_line(void *core, odx_log_level level, const char *msg)
{
	(void)core;
	if (level <= ODX_LOG_WARN || getenv("ABI_OFFSETS_VERBOSE"))
		fprintf(stderr, "[%s] %s\n", abi.name, msg);
}

static void error_detail(void *core, const char *msg)
{
	(void)core;
	snprintf(abi.detail, sizeof(abi.detail), "%s", msg);
}

static odx_backend_host host = {
	.size = sizeof(odx_backend_host),
	.abi_version = ODX_BACKEND_ABI_VERSION,
	.host_cores = 2,
	.host_memory = 1ull << 30,
	.config_str = cfg_str,
	.config_int = cfg_int,
	.config_bool = cfg_bool,
	.config_size = cfg_size,
	.bind_thread = bind_thread,
	.log = log_line,
	.error_detail = error_detail,
};

/* ---- completion ----------------------------------------------------------------------------- */

typedef struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int pending;
	int status;
	char msg[512];
} waiter;

static waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, ""};

void *abi_waiter(void)
{
	return &w;
}

void abi_on_done(void *arg, int status, const char *msg)
{
	waiter *wt = arg;

	pthread_mutex_lock(&wt->lock);
	if (status != 0 && wt->status == 0) {
		wt->status = status;
		snprintf(wt->msg, sizeof(wt->msg), "%s", msg ? msg : "");
	}
	wt->pending--;
	pthread_cond_broadcast(&wt->cond);
	pthread_mutex_unlock(&wt->lock);
}

void abi_expect_done(void)
{
	pthread_mutex_lock(&w.lock);
	w.pending++;
	pthread_mutex_unlock(&w.lock);
}

void abi_wait_all(void)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ABI_WAIT_S;
	pthread_mutex_lock(&w.lock);
	while (w.pending > 0)
		if (pthread_cond_timedwait(&w.cond, &w.lock, &until) != 0)
			break;
	if (w.pending > 0) {
		pthread_mutex_unlock(&w.lock);
		fail_msg("%d operations still pending after %d s", w.pending, ABI_WAIT_S);
	}
	if (w.status != 0) {
		int rc = w.status;

		w.status = 0;
		pthread_mutex_unlock(&w.lock);
		fail_msg("an operation completed with %s: %s", odx_err_name(rc), w.msg);
	}
	pthread_mutex_unlock(&w.lock);
}

/* ---- operations -------------------------------------------------------------------------- */

void abi_h2d(uint64_t mem, size_t off, const void *src, size_t n)
{
	int rc;

	abi_expect_done();
	rc = abi.ops->copy_h2d(abi.dev, mem, off, src, n, abi_on_done, &w);
	if (rc) {
		abi_on_done(&w, 0, NULL); /* nothing was queued */
		fail_msg("copy_h2d(%zu bytes at %zu): %s", n, off, odx_err_name(rc));
	}
}

void abi_d2h(void *dst, uint64_t mem, size_t off, size_t n)
{
	int rc;

	abi_expect_done();
	rc = abi.ops->copy_d2h(abi.dev, dst, mem, off, n, abi_on_done, &w);
	if (rc) {
		abi_on_done(&w, 0, NULL);
		fail_msg("copy_d2h(%zu bytes at %zu): %s", n, off, odx_err_name(rc));
	}
}

uint64_t abi_alloc(size_t size)
{
	uint64_t h = 0;
	int rc;

	abi.detail[0] = '\0';
	rc = abi.ops->mem_alloc(abi.dev, size, false, &h);
	if (rc)
		fail_msg("mem_alloc(%zu): %s: %s", size, odx_err_name(rc), abi.detail);
	return h;
}

/* ---- setup ---------------------------------------------------------------------------------- */

/* The module's file in $ODX_BACKEND_PATH, dlopen'ed; NULL if there is none. */
static void *open_module(const char *name, char *path, size_t path_size)
{
	const char *dirs = getenv("ODX_BACKEND_PATH");
	char *copy, *dir, *save = NULL;
	void *lib = NULL;

	if (!dirs)
		return NULL;
	copy = strdup(dirs);
	for (dir = strtok_r(copy, ":", &save); dir && !lib; dir = strtok_r(NULL, ":", &save)) {
		snprintf(path, path_size, "%s/libodx-backend-%s.so", dir, name);
		if (access(path, R_OK) == 0)
			lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	}
	free(copy);
	return lib;
}

void abi_skip(const char *why)
{
	printf("SKIP: %s: %s\n", abi.name, why);
	exit(77);
}

int abi_open(const char *name)
{
	odx_backend_entry_fn entry;
	char path[1024], reason[512] = "";
	void *sym;
	int rc;

	abi.name = name;
	abi.lib = open_module(name, path, sizeof(path));
	if (!abi.lib) {
		const char *why = dlerror();

		fprintf(stderr, "no loadable libodx-backend-%s.so in ODX_BACKEND_PATH=%s: %s\n",
			name, getenv("ODX_BACKEND_PATH") ? getenv("ODX_BACKEND_PATH") : "",
			why ? why : "not found");
		return -1;
	}
	sym = dlsym(abi.lib, ODX_BACKEND_ENTRY);
	if (!sym) {
		fprintf(stderr, "%s exports no %s\n", path, ODX_BACKEND_ENTRY);
		return -1;
	}
	memcpy(&entry, &sym, sizeof(entry));
	rc = entry(ODX_BACKEND_ABI_VERSION, &abi.desc);
	if (rc || !abi.desc || !abi.desc->ops) {
		fprintf(stderr, "%s: odx_backend_entry: %s\n", path, odx_err_name(rc));
		return -1;
	}
	abi.ops = abi.desc->ops;
	rc = abi.ops->open(&host, &abi.state, reason, sizeof(reason));
	if (rc == ODX_EUNAVAIL)
		abi_skip(reason);
	if (rc) {
		fprintf(stderr, "%s: open: %s: %s\n", name, odx_err_name(rc), reason);
		return -1;
	}
	if (abi.ops->device_count(abi.state) < 1)
		abi_skip("no device");
	rc = abi.ops->device_open(abi.state, 0, 0, &abi.props, &abi.dev);
	if (rc) {
		fprintf(stderr, "%s: device_open: %s: %s\n", name, odx_err_name(rc), abi.detail);
		return -1;
	}
	abi.align = abi.props.mem_align ? abi.props.mem_align : 256;
	return 0;
}

void abi_close(void)
{
	if (abi.dev)
		abi.ops->device_close(abi.dev);
	if (abi.state)
		abi.ops->close(abi.state);
	abi.dev = abi.state = NULL;
	/* The module stays loaded: drivers' threads may outlive close in their own libraries. */
}
