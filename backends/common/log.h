/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log.h - the one printf-style log helper of the vendor backends (compiled into each module that
 * uses it, like lanes.c: the backend ABI stays a header).
 */
#ifndef ODX_BACKENDS_COMMON_LOG_H
#define ODX_BACKENDS_COMMON_LOG_H

#include <stdarg.h>

#include "odx/backend.h"

/* Formats the message (cut at 1 KiB) and hands it to the core's log sink, if it has one; a NULL
 * host logs nothing. */
void odx__backend_log(const odx_backend_host *host, odx_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The same with a va_list, for a backend's own wrapper. */
void odx__backend_vlog(const odx_backend_host *host, odx_log_level level, const char *fmt,
		       va_list ap) __attribute__((format(printf, 3, 0)));

#endif /* ODX_BACKENDS_COMMON_LOG_H */
