/* SPDX-License-Identifier: Apache-2.0 */
/* error.c - the error table, per-context last error. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core.h"

ODX_API const char *odx_version(void)
{
#define ODX__STR2(x) #x
#define ODX__STR(x) ODX__STR2(x)
	return ODX__STR(ODX_VERSION_MAJOR) "." ODX__STR(ODX_VERSION_MINOR) "." ODX__STR(
		ODX_VERSION_PATCH);
}

ODX_API unsigned odx_version_number(void)
{
	return ODX_VERSION_NUMBER;
}

ODX_API const char *odx_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
#define ODX__ERR_MSG(name, value, msg)                                                             \
	case ODX_##name:                                                                           \
		return msg;
		ODX_ERRNO_MAP(ODX__ERR_MSG)
#undef ODX__ERR_MSG
	}
	return "unknown error";
}

ODX_API const char *odx_err_name(int err)
{
	switch (err) {
	case 0:
		return "ODX_OK";
#define ODX__ERR_NAME(name, value, msg)                                                            \
	case ODX_##name:                                                                           \
		return "ODX_" #name;
		ODX_ERRNO_MAP(ODX__ERR_NAME)
#undef ODX__ERR_NAME
	}
	return "ODX_E?";
}

int odx__fail(odx_context *ctx, int code, const char *fmt, ...)
{
	char msg[ODX__MSG_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!ctx)
		return code;
	pthread_mutex_lock(&ctx->error_lock);
	snprintf(ctx->last_error, sizeof(ctx->last_error), "%s: %s", odx_err_name(code), msg);
	pthread_mutex_unlock(&ctx->error_lock);
	odx__log(ctx, ODX_LOG_DEBUG, "%s: %s", odx_err_name(code), msg);
	return code;
}

/* Why this thread's last odx_open failed ("" after one that succeeded): odx_last_error(NULL). */
static _Thread_local char open_error[ODX__MSG_MAX];

void odx__set_open_error(const char *msg)
{
	snprintf(open_error, sizeof(open_error), "%s", msg ? msg : "");
}

ODX_API const char *odx_last_error(odx_context *ctx)
{
	/* A per-thread copy, so a concurrent failure cannot change the text under the caller. */
	static _Thread_local char copy[ODX__MSG_MAX];

	if (!ctx)
		return open_error;
	pthread_mutex_lock(&ctx->error_lock);
	memcpy(copy, ctx->last_error, sizeof(copy));
	pthread_mutex_unlock(&ctx->error_lock);
	return copy;
}

uint64_t odx__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Per thread, and only between a backend's failing call and the core reading it right after on
 * the same thread: no context needs to own it. */
static _Thread_local char backend_detail[ODX__MSG_MAX];

void odx__backend_detail_set(const char *msg)
{
	/* Precision bounds the read: a backend's text need not end within our size. */
	snprintf(backend_detail, sizeof(backend_detail), "%.*s", (int)sizeof(backend_detail) - 1,
		 msg ? msg : "");
}

const char *odx__backend_detail_take(char *buf, size_t n)
{
	snprintf(buf, n, "%s", backend_detail);
	backend_detail[0] = '\0';
	return buf;
}
