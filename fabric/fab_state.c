/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_state.c - the out-of-line helpers of an open fabric's state: log lines, the rate-limited
 * bad-message log, monotonic condition variables, and memory registration (the strictest path,
 * taken when the provider asks).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "fab_state.h"
#include "odx/odx.h"

/* One line on stderr: the rank, then prefix and the caller's text. */
__attribute__((format(printf, 3, 0))) static void vlog(const odx_fab *f, const char *prefix,
							const char *fmt, va_list ap)
{
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	fprintf(stderr, "odx fabric [rank %d]: %s%s\n", f->rank, prefix, line);
}

void fab_log(const odx_fab *f, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vlog(f, "", fmt, ap);
	va_end(ap);
}

/* A bad message: dropped, counted and logged, at most 10 lines a second. */
void fab_bad(odx_fab *f, const char *fmt, ...)
{
	stat_add(&f->bad_msgs, 1);
	int64_t now = fab_now_ns();
	if (now - f->log_window > 1000000000ll) {
		if (f->log_suppressed)
			fab_log(f, "%u more bad messages dropped without a log line",
				f->log_suppressed);
		f->log_window = now;
		f->log_count = 0;
		f->log_suppressed = 0;
	}
	if (f->log_count++ >= 10) {
		f->log_suppressed++;
		return;
	}
	va_list ap;
	va_start(ap, fmt);
	vlog(f, "dropped a bad message: ", fmt, ap);
	va_end(ap);
}

/* Timed waits use CLOCK_MONOTONIC deadlines: a clock change must not stretch them. */
void fab_cond_init_monotonic(pthread_cond_t *cond)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &ca);
	pthread_condattr_destroy(&ca);
}

/* ---- memory registration: the strictest path when the provider asks for it --------------- */

/* Registers buf in rl's domain (and binds it to the endpoint where the provider wants that);
 * returns 0 or a negative libfabric code, *mr NULL on failure. */
int fab_mr_register(odx_fab *f, struct fab_rail *rl, const void *buf, size_t len, uint64_t access,
		    struct fid_mr **mr)
{
	uint64_t key = rl->mr_prov_key ? 0 : f->next_mr_key++;
	int ret = fi_mr_reg(rl->domain, buf, len ? len : 1, access, 0, key, 0, mr, NULL);
	if (ret)
		return ret;
	if (rl->mr_endpoint) {
		ret = fi_mr_bind(*mr, &rl->ep->fid, 0);
		if (!ret)
			ret = fi_mr_enable(*mr);
		if (ret) {
			fi_close(&(*mr)->fid);
			*mr = NULL;
		}
	}
	return ret;
}
