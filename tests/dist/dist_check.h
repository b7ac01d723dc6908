/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dist_check.h - what the multi-rank test programs share: CHECK(ctx, expr) ends the rank with
 * exit(1), naming the rank, the call, its error and the context's last message. Each program
 * defines `static int rank_` (set once odx_open says which rank it is) before including this.
 */
#ifndef ODX_TESTS_DIST_CHECK_H
#define ODX_TESTS_DIST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include "odx/odx.h"

#define CHECK(ctx, expr)                                                                           \
	do {                                                                                       \
		int rc_ = (expr);                                                                  \
		if (rc_) {                                                                         \
			fprintf(stderr, "rank %d: %s:%d: %s: %s: %s\n", rank_, __FILE__, __LINE__, \
				#expr, odx_err_name(rc_), odx_last_error(ctx));                    \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

#endif
