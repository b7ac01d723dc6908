/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_state.c - the out-of-line helpers of an open fabric's state: log lines, the rate-limited
 * bad-message log, and memory registration (the strictest path, taken when the provider asks).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <rdma/fi_tagged.h>

#include "fab_state.h"
#include "odx/odx.h"

void fab_log(const odx_fab *f, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "odx fabric [rank %d]: %s\n", f->rank, line);
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
	char line[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fab_log(f, "dropped a bad message: %s", line);
}

/* ---- memory registration: the strictest path when the provider asks for it --------------- */

int mr_register(odx_fab *f, struct fab_rail *rl, const void *buf, size_t len,
		       uint64_t access, struct fid_mr **mr)
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
