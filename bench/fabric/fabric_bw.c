/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fabric_bw.c - ping-pong latency and windowed bandwidth between two ranks, 8 B .. 64 MiB,
 * through ODX's transport (odx_fab, its caller waiting in odx_fab_wait) and through a raw libfabric
 * loop written beside it (same provider, same sizes, busy-polling its own CQ), plus a 256 MiB
 * memcpy as the in-node limit.
 * One JSON object per line on rank 0. Run with two ranks:
 *
 *   scripts/odx-run -n 2 build/bench/fabric/fabric_bw [-p tcp|shm|...] [-m max_bytes]
 *                                                     [-n min_bytes] [-k pairs] [-w window] [-q]
 *
 * -q: quick (fewer iterations; the meson benchmark smoke pass). -n skips the sizes below
 * min_bytes (and the memcpy reference), for a quick look at a few sizes. -k: raw/ODX pairs per
 * size (5). -w: transfers in flight per bandwidth round for every size (default 16 below 1 MiB, 4
 * below 16 MiB, 2 above). The raw loop exchanges its
 * endpoint names over odx_fab control messages, so both run under the same launcher.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "fabric.h"
#include "odx/odx.h"

#define MAX_SIZES 32
#define NAME_MSG 77

static int rank;
static bool quick;

#define DIE(...)                                                                                   \
	do {                                                                                       \
		fprintf(stderr, "fabric_bw rank %d: ", rank);                                      \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
		exit(1);                                                                           \
	} while (0)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int lat_iters(size_t size)
{
	long n = (long)((64u << 20) / (size ? size : 1));
	if (quick)
		n /= 10;
	return n < 5 ? 5 : n > 500 ? (quick ? 100 : 500) : (int)n;
}

static int bw_reps(size_t size, int window)
{
	long n = (long)((256ul << 20) / (size * (size_t)window));
	if (quick)
		n /= 10;
	return n < 3 ? 3 : n > 100 ? (quick ? 20 : 100) : (int)n;
}

/* Untimed rounds before each timed loop: a fifth of the timed ones (at least 1 and 2). The
 * loops run back to back: a pause before a loop (the machine idle) slowed the raw loop by 5-15%
 * here for longer than its warm-up, so a sleep between them would skew the ratio. */
static int warm_reps(int reps)
{
	return reps / 5 > 1 ? reps / 5 : 1;
}

static int warm_iters(int iters)
{
	return iters / 5 > 2 ? iters / 5 : 2;
}

static int window_opt; /* -w: transfers in flight per bandwidth round (0: by size) */

static int bw_window(size_t size)
{
	if (window_opt)
		return window_opt;
	return size >= (16u << 20) ? 2 : size >= (1u << 20) ? 4 : 16;
}

/* ---- ODX side ----------------------------------------------------------------------------- */

static atomic_int odx_done;
static char name_buf[512];
static size_t name_len;
static atomic_int name_arrived;

static void on_done(void *arg, int status, const char *msg)
{
	if (status)
		DIE("transfer failed: %s %s", odx_err_name(status), msg ? msg : "");
	atomic_fetch_add(&odx_done, 1);
	(void)arg;
}

static void on_msg(void *user, int src, uint32_t type, const void *payload, size_t len)
{
	if (type == NAME_MSG && len <= sizeof(name_buf)) {
		memcpy(name_buf, payload, len);
		name_len = len;
		atomic_store(&name_arrived, 1);
	}
	(void)user;
	(void)src;
}

static bool odx_reached(void *arg)
{
	return atomic_load(&odx_done) >= *(const int *)arg;
}

/* Waits as an application thread would, in odx_fab_wait: it drives progress on the calling
 * thread while it waits (polling the CQ and running the completions itself, as the raw loop does),
 * and blocks only when nothing is in motion. */
static void odx_wait(odx_fab *f, int target)
{
	int ret = odx_fab_wait(f, odx_reached, &target, 120000);
	if (ret)
		DIE("ODX wait: %s", odx_err_name(ret));
}

static void odx_bench(odx_fab *f, size_t size, unsigned char *buf, unsigned char *buf2,
		      double *lat_us, double *gbps)
{
	int peer = 1 - rank;
	static uint64_t key = 1;
	int iters = lat_iters(size);
	odx_fab_barrier(f, 60000);
	double t0 = 0;
	for (int i = -warm_iters(iters); i < iters; i++) {
		if (i == 0)
			t0 = now_s();
		atomic_store(&odx_done, 0);
		uint64_t k = key++;
		if (rank == 0) {
			odx_fab_recv(f, peer, k | (1ull << 50), buf2, size, on_done, NULL);
			odx_fab_send(f, peer, k, buf, size, on_done, NULL);
			odx_wait(f, 2);
		} else {
			odx_fab_recv(f, peer, k, buf2, size, on_done, NULL);
			odx_wait(f, 1);
			odx_fab_send(f, peer, k | (1ull << 50), buf, size, on_done, NULL);
			odx_wait(f, 2);
		}
	}
	*lat_us = (now_s() - t0) / iters / 2 * 1e6;

	int window = bw_window(size), reps = bw_reps(size, window);
	odx_fab_barrier(f, 60000);
	for (int r = -warm_reps(reps); r < reps; r++) {
		if (r == 0)
			t0 = now_s();
		atomic_store(&odx_done, 0);
		uint64_t base = key;
		key += (uint64_t)window + 1;
		if (rank == 0) {
			static uint64_t ack;
			odx_fab_recv(f, peer, base + (uint64_t)window, &ack, sizeof(ack), on_done,
				     NULL);
			for (int w = 0; w < window; w++)
				odx_fab_send(f, peer, base + (uint64_t)w, buf, size, on_done, NULL);
			odx_wait(f, window + 1);
		} else {
			static uint64_t ack;
			for (int w = 0; w < window; w++)
				odx_fab_recv(f, peer, base + (uint64_t)w, buf2 + 0, size, on_done,
					     NULL);
			odx_wait(f, window);
			odx_fab_send(f, peer, base + (uint64_t)window, &ack, sizeof(ack), on_done,
				     NULL);
			odx_wait(f, window + 1);
		}
	}
	*gbps = (double)size * window * reps / (now_s() - t0) / 1e9;
}

/* ---- raw libfabric side ------------------------------------------------------------------- */

struct raw {
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	fi_addr_t peer;
	struct fid_mr *mr1, *mr2;
	void *desc1, *desc2;
};

#define FI_CHECK(call)                                                                             \
	do {                                                                                       \
		int rc_ = (int)(call);                                                             \
		if (rc_)                                                                           \
			DIE("%s: %s", #call, fi_strerror(-rc_));                                   \
	} while (0)

static void raw_open(struct raw *r, const char *prov, const char *iface, odx_fab *f)
{
	struct fi_info *hints = fi_allocinfo();
	hints->caps = FI_TAGGED;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->av_type = FI_AV_TABLE;
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY;
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->fabric_attr->prov_name = strdup(prov);
	if (iface && strcmp(prov, "shm"))
		hints->domain_attr->name = strdup(iface);
	FI_CHECK(fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &r->info));
	fi_freeinfo(hints);
	FI_CHECK(fi_fabric(r->info->fabric_attr, &r->fabric, NULL));
	FI_CHECK(fi_domain(r->fabric, r->info, &r->domain, NULL));
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = 2};
	FI_CHECK(fi_av_open(r->domain, &av_attr, &r->av, NULL));
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED,
				     .size = 1024,
				     .wait_obj = FI_WAIT_NONE};
	FI_CHECK(fi_cq_open(r->domain, &cq_attr, &r->cq, NULL));
	FI_CHECK(fi_endpoint(r->domain, r->info, &r->ep, NULL));
	FI_CHECK(fi_ep_bind(r->ep, &r->av->fid, 0));
	FI_CHECK(fi_ep_bind(r->ep, &r->cq->fid, FI_TRANSMIT | FI_RECV));
	FI_CHECK(fi_enable(r->ep));
	char name[256] = {0};
	size_t len = sizeof(name);
	FI_CHECK(fi_getname(&r->ep->fid, name, &len));
	/* names travel over ODX control messages */
	odx_fab_barrier(f, 60000);
	if (odx_fab_send_msg(f, 1 - rank, NAME_MSG, name, sizeof(name)))
		DIE("could not send the raw endpoint name");
	double limit = now_s() + 60;
	while (!atomic_load(&name_arrived))
		if (now_s() > limit)
			DIE("raw endpoint name never arrived");
	if (fi_av_insert(r->av, name_buf, 1, &r->peer, 0, NULL) != 1)
		DIE("fi_av_insert of the peer's raw endpoint failed");
}

static void raw_register(struct raw *r, unsigned char *buf, unsigned char *buf2, size_t len)
{
	if (!(r->info->domain_attr->mr_mode & FI_MR_LOCAL))
		return;
	FI_CHECK(fi_mr_reg(r->domain, buf, len, FI_SEND | FI_RECV, 0, 1, 0, &r->mr1, NULL));
	FI_CHECK(fi_mr_reg(r->domain, buf2, len, FI_SEND | FI_RECV, 0, 2, 0, &r->mr2, NULL));
	r->desc1 = fi_mr_desc(r->mr1);
	r->desc2 = fi_mr_desc(r->mr2);
}

static void raw_close(struct raw *r)
{
	if (r->mr1)
		fi_close(&r->mr1->fid);
	if (r->mr2)
		fi_close(&r->mr2->fid);
	fi_close(&r->ep->fid);
	fi_close(&r->cq->fid);
	fi_close(&r->av->fid);
	fi_close(&r->domain->fid);
	fi_close(&r->fabric->fid);
	fi_freeinfo(r->info);
}

static void raw_wait(struct raw *r, int n)
{
	struct fi_cq_tagged_entry e[16];
	double limit = now_s() + 120;
	while (n > 0) {
		ssize_t k = fi_cq_read(r->cq, e, 16);
		if (k > 0) {
			n -= (int)k;
		} else if (k == -FI_EAVAIL) {
			struct fi_cq_err_entry ee = {0};
			fi_cq_readerr(r->cq, &ee, 0);
			DIE("raw completion error: %s", fi_strerror(ee.err));
		} else if (now_s() > limit) {
			DIE("raw wait timed out");
		}
	}
}

static void raw_post_send(struct raw *r, void *buf, size_t len, void *desc, uint64_t tag,
			  struct fi_context2 *ctx)
{
	ssize_t ret;
	while ((ret = fi_tsend(r->ep, buf, len, desc, r->peer, tag, ctx)) == -FI_EAGAIN)
		fi_cq_read(r->cq, NULL, 0);
	if (ret)
		DIE("fi_tsend: %s", fi_strerror((int)-ret));
}

static void raw_post_recv(struct raw *r, void *buf, size_t len, void *desc, uint64_t tag,
			  struct fi_context2 *ctx)
{
	ssize_t ret;
	while ((ret = fi_trecv(r->ep, buf, len, desc, r->peer, tag, 0, ctx)) == -FI_EAGAIN)
		fi_cq_read(r->cq, NULL, 0);
	if (ret)
		DIE("fi_trecv: %s", fi_strerror((int)-ret));
}

static void raw_bench(struct raw *r, odx_fab *f, size_t size, unsigned char *buf,
		      unsigned char *buf2, double *lat_us, double *gbps)
{
	static struct fi_context2 ctx[64];
	static uint64_t tag = 1;
	int iters = lat_iters(size);
	odx_fab_barrier(f, 60000);
	double t0 = 0;
	for (int i = -warm_iters(iters); i < iters; i++) {
		if (i == 0)
			t0 = now_s();
		uint64_t t = tag++;
		if (rank == 0) {
			raw_post_recv(r, buf2, size, r->desc2, t | (1ull << 62), &ctx[0]);
			raw_post_send(r, buf, size, r->desc1, t, &ctx[1]);
			raw_wait(r, 2);
		} else {
			raw_post_recv(r, buf2, size, r->desc2, t, &ctx[0]);
			raw_wait(r, 1);
			raw_post_send(r, buf, size, r->desc1, t | (1ull << 62), &ctx[1]);
			raw_wait(r, 1);
		}
	}
	*lat_us = (now_s() - t0) / iters / 2 * 1e6;
	int window = bw_window(size), reps = bw_reps(size, window);
	static uint64_t ack;
	odx_fab_barrier(f, 60000);
	for (int rep = -warm_reps(reps); rep < reps; rep++) {
		if (rep == 0)
			t0 = now_s();
		uint64_t base = tag;
		tag += (uint64_t)window + 1;
		if (rank == 0) {
			raw_post_recv(r, &ack, sizeof(ack), NULL, base + (uint64_t)window,
				      &ctx[window]);
			for (int w = 0; w < window; w++)
				raw_post_send(r, buf, size, r->desc1, base + (uint64_t)w, &ctx[w]);
			raw_wait(r, window + 1);
		} else {
			for (int w = 0; w < window; w++)
				raw_post_recv(r, buf2, size, r->desc2, base + (uint64_t)w, &ctx[w]);
			raw_wait(r, window);
			raw_post_send(r, &ack, sizeof(ack), NULL, base + (uint64_t)window,
				      &ctx[window]);
			raw_wait(r, 1);
		}
	}
	*gbps = (double)size * window * reps / (now_s() - t0) / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(const double *v, int n)
{
	double t[16];
	memcpy(t, v, (size_t)n * sizeof(double));
	qsort(t, (size_t)n, sizeof(double), cmp_double);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

static double minimum(const double *v, int n)
{
	double m = v[0];
	for (int i = 1; i < n; i++)
		m = v[i] < m ? v[i] : m;
	return m;
}

static double maximum(const double *v, int n)
{
	double m = v[0];
	for (int i = 1; i < n; i++)
		m = v[i] > m ? v[i] : m;
	return m;
}

static double memcpy_gbps(void)
{
	size_t n = 256u << 20;
	unsigned char *a = malloc(n), *b = malloc(n);
	if (!a || !b)
		DIE("out of memory for the memcpy reference");
	memset(a, 1, n);
	memset(b, 2, n);
	double best = 0;
	for (int i = 0; i < (quick ? 2 : 5); i++) {
		double t0 = now_s();
		memcpy(b, a, n);
		double t = now_s() - t0;
		if (n / t / 1e9 > best)
			best = n / t / 1e9;
	}
	free(a);
	free(b);
	return best;
}

int main(int argc, char **argv)
{
	const char *prov = "tcp";
	size_t max = 64u << 20, min = 0;
	int opt;
	int pairs = 5;
	while ((opt = getopt(argc, argv, "p:m:n:k:w:q")) != -1) {
		if (opt == 'p')
			prov = optarg;
		else if (opt == 'm')
			max = strtoull(optarg, NULL, 0);
		else if (opt == 'n')
			min = strtoull(optarg, NULL, 0);
		else if (opt == 'k')
			pairs = atoi(optarg);
		else if (opt == 'w')
			window_opt = atoi(optarg);
		else if (opt == 'q')
			quick = true;
		else
			DIE("usage: fabric_bw [-p provider] [-m max_bytes] [-n min_bytes] [-k pairs] "
			    "[-w window] [-q]");
	}
	if (pairs < 1 || pairs > 15)
		DIE("-k: 1 to 15 pairs of raw and ODX runs per size");
	if (window_opt < 0 || window_opt > 63)
		DIE("-w: 1 to 63 transfers in flight per bandwidth round");
	odx_fab_params p = {.provider = prov, .iface = getenv("ODX_FABRIC_IFACE")};
	if (getenv("ODX_FABRIC_SHM_LANES"))
		p.shm_lanes = atoi(getenv("ODX_FABRIC_SHM_LANES"));
	odx_fab *f = NULL;
	char err[1024];
	int ret = odx_fab_open(&p, &f, err, sizeof(err));
	if (ret)
		DIE("odx_fab_open: %s", err);
	rank = odx_fab_rank(f);
	if (odx_fab_size(f) != 2)
		DIE("run with two ranks (scripts/odx-run -n 2)");
	odx_fab_set_handlers(f, on_msg, NULL, NULL);
	const char *picked = odx_fab_provider(f);
	size_t sizes[MAX_SIZES], nsizes = 0;
	for (size_t s = 8; s <= max && nsizes < MAX_SIZES; s *= 4) {
		if (s >= min)
			sizes[nsizes++] = s;
		if (s == 32768 && max >= 65536 && min <= 65536)
			sizes[nsizes++] = 65536;
	}
	if (nsizes && sizes[nsizes - 1] < max && nsizes < MAX_SIZES)
		sizes[nsizes++] = max; /* 64 MiB itself */
	unsigned char *buf = malloc(max), *buf2 = malloc(max);
	if (!buf || !buf2)
		DIE("out of memory");
	memset(buf, 0x5a, max);
	memset(buf2, 0, max);

	double memcpy_bw = rank == 0 && !min ? memcpy_gbps() : 1;
	if (rank == 0)
		printf("{\"bench\":\"fabric_bw\",\"test\":\"memcpy\",\"size\":%u,\"gbps\":%.3f}\n",
		       256u << 20, memcpy_bw);

	struct raw r = {0};
	raw_open(&r, picked, p.iface, f);
	raw_register(&r, buf, buf2, max);
	/* The project's protocol: raw and ODX alternate (A B A B), `pairs` pairs per size; we print
	 * the medians and the median ratio with its min and max (the host is shared and noisy). */
	if (quick)
		pairs = 1;
	for (size_t i = 0; i < nsizes; i++) {
		double rl[16], rb[16], ol[16], ob[16], lr[16], br[16];
		for (int k = 0; k < pairs; k++) {
			raw_bench(&r, f, sizes[i], buf, buf2, &rl[k], &rb[k]);
			odx_bench(f, sizes[i], buf, buf2, &ol[k], &ob[k]);
			lr[k] = ol[k] / rl[k]; /* latency: > 1 means ODX is slower */
			br[k] = ob[k] / rb[k]; /* bandwidth: > 1 means ODX is faster */
		}
		if (rank != 0)
			continue;
		double obw = median(ob, pairs);
		printf("{\"bench\":\"fabric_bw\",\"provider\":\"%s\",\"size\":%zu,\"pairs\":%d,"
		       "\"raw_lat_us\":%.2f,\"odx_lat_us\":%.2f,\"lat_ratio\":%.3f,\"lat_ratio_min\":%.3f,\"lat_ratio_max\":%.3f,"
		       "\"raw_gbps\":%.3f,\"odx_gbps\":%.3f,\"bw_ratio\":%.3f,\"bw_ratio_min\":%.3f,\"bw_ratio_max\":%.3f,"
		       "\"odx_vs_memcpy\":%.3f}\n",
		       picked, sizes[i], pairs, median(rl, pairs), median(ol, pairs),
		       median(lr, pairs), minimum(lr, pairs), maximum(lr, pairs), median(rb, pairs),
		       obw, median(br, pairs), minimum(br, pairs), maximum(br, pairs),
		       obw / memcpy_bw);
		fflush(stdout);
	}
	odx_fab_barrier(f, 60000);
	raw_close(&r);
	odx_fab_barrier(f, 60000);
	odx_fab_close(f);
	free(buf);
	free(buf2);
	return 0;
}
