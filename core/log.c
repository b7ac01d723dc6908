/* SPDX-License-Identifier: Apache-2.0 */
/* log.c - the context's log: a callback, or stderr when ODX_LOG asks for it; silent otherwise. */
#include <stdio.h>

#include "core.h"

static const char *level_name[] = {"none", "error", "warn", "info", "debug"};

bool odx__log_enabled(const odx_context *ctx, odx_log_level level)
{
	return ctx && level != ODX_LOG_NONE && level <= ctx->log_level;
}

void odx__log(odx_context *ctx, odx_log_level level, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	if (!odx__log_enabled(ctx, level))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (ctx->log_fn)
		ctx->log_fn(ctx->log_user, level, msg);
	else
		fprintf(stderr, "odx %s: %s\n", level_name[level], msg);
}
