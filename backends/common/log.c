/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.c - formats a backend's log message into a buffer and hands it to the core (see log.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "log.h"

#define BACKEND_LOG_MAX 1024

void odx__backend_vlog(const odx_backend_host *host, odx_log_level level, const char *fmt,
		       va_list ap)
{
	char msg[BACKEND_LOG_MAX];

	/* The size check: a core older than the log op has none. */
	if (!host || !ODX_BACKEND_HAS_OP(host, odx_backend_host, log))
		return;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	host->log(host->core, level, msg);
}

void odx__backend_log(const odx_backend_host *host, odx_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	odx__backend_vlog(host, level, fmt, ap);
	va_end(ap);
}
