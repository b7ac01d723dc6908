/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_open.c - opening and closing a fabric: endpoints, the name exchange, the threads, and the
 * order in which close gives everything back. Nothing here runs per operation.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>

#include "fab_state.h"
#include "odx/odx.h"

/* ---- open / close ----------------------------------------------------------------------- */

/* Opens rl's endpoint. Its address vector gets room for `lanes` addresses per rank (each peer's
 * copy lanes), or for one if the provider refuses that many (shm in libfabric 1.17 takes at most
 * 256 addresses): rl->av_lanes says which. */
int fab_open_endpoint(odx_fab *f, struct fab_rail *rl, bool source_broken, const char *name,
		      int lanes, char *err, size_t errlen)
{
	struct fi_info *info = rl->info;
	char shm_name[FAB_NAME_MAX];
	if (!name && !strcmp(rl->prov, "shm")) {
		/* The provider's own name would be pid-based: see fab_shm.c */
		fab_shm_name(shm_name, sizeof(shm_name));
		name = shm_name;
	}
	int ret = fi_fabric(info->fabric_attr, &rl->fabric, NULL);
	const char *step = "fi_fabric";
	if (!ret) {
		step = "fi_domain";
		ret = fi_domain(rl->fabric, info, &rl->domain, NULL);
	}
	if (!ret) {
		step = "fi_av_open";
		struct fi_av_attr av_attr = {.type = FI_AV_TABLE,
					     .count = (size_t)f->size * (size_t)lanes};
		rl->av_lanes = lanes;
		ret = fi_av_open(rl->domain, &av_attr, &rl->av, NULL);
		if (ret && lanes > 1) {
			av_attr.count = (size_t)f->size;
			rl->av_lanes = 1;
			ret = fi_av_open(rl->domain, &av_attr, &rl->av, NULL);
		}
	}
	if (!ret) {
		step = "fi_cq_open";
		/* Idle waiting: polling with a growing sleep (50 us .. 0.8 ms) by default, because the
		 * shm provider's wait fd is not signalled by data arriving (manual progress) and a
		 * blocked thread then sleeps its whole timeout; ODX_FAB_WAIT=fd blocks on the CQ's
		 * fd instead where the provider signals it (tcp; one endpoint only). */
		struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED,
					     .size = 4096,
					     .wait_obj = FI_WAIT_NONE};
		const char *w = getenv("ODX_FAB_WAIT");
		if (w && !strcmp(w, "fd"))
			cq_attr.wait_obj = FI_WAIT_FD;
		ret = fi_cq_open(rl->domain, &cq_attr, &rl->cq, NULL);
		if (ret && cq_attr.wait_obj != FI_WAIT_NONE) {
			/* no wait fd from this provider: poll with a growing sleep instead */
			cq_attr.wait_obj = FI_WAIT_NONE;
			ret = fi_cq_open(rl->domain, &cq_attr, &rl->cq, NULL);
		} else if (!ret && cq_attr.wait_obj == FI_WAIT_FD) {
			if (fi_control(&rl->cq->fid, FI_GETWAIT, &rl->cq_fd))
				rl->cq_fd = -1;
		}
	}
	if (!ret) {
		step = "fi_endpoint";
		ret = fi_endpoint(rl->domain, info, &rl->ep, NULL);
	}
	if (!ret) {
		step = "fi_ep_bind";
		ret = fi_ep_bind(rl->ep, &rl->av->fid, 0);
		if (!ret)
			ret = fi_ep_bind(rl->ep, &rl->cq->fid, FI_TRANSMIT | FI_RECV);
	}
	if (!ret && name) {
		step = "fi_setname";
		ret = fi_setname(&rl->ep->fid, (void *)name, strlen(name) + 1);
	}
	if (!ret) {
		step = "fi_enable";
		ret = fi_enable(rl->ep);
	}
	if (ret) {
		/* shm keeps each endpoint's queues in a /dev/shm segment named after it */
		bool shm = name && !strcmp(rl->prov, "shm");
		snprintf(err, errlen, "%s on provider %s failed: %s (%d)%s%s%s", step, rl->prov,
			 fi_strerror(-ret), ret, shm ? " (segment /dev/shm/" : "", shm ? name : "",
			 shm ? (ret == -FI_EBUSY ? ": held by a live process)"
				: ret == -FI_ENOSPC || ret == -FI_ENOMEM ? ": is /dev/shm full?)"
									 : ")")
			     : "");
		return fab_err(ret) == ODX_EIO ? ODX_EUNAVAIL : fab_err(ret);
	}
	uint64_t mr = info->domain_attr->mr_mode;
	rl->mr_local = mr & FI_MR_LOCAL;
	rl->mr_endpoint = mr & FI_MR_ENDPOINT;
	rl->mr_virt = mr & FI_MR_VIRT_ADDR;
	rl->mr_prov_key = mr & FI_MR_PROV_KEY;
	rl->mr_raw = mr & FI_MR_RAW;
	rl->has_rma = (info->caps & FI_RMA) != 0;
	rl->has_source = (info->caps & FI_SOURCE) != 0 && !source_broken;
	rl->rx_iov2 = info->rx_attr->iov_limit >= 2;
	fab_throttle_caps(f, rl);
	return 0;
}

void fab_close_rail(struct fab_rail *rl)
{
	mr_close(&rl->sink_mr);
	if (rl->ep)
		fi_close(&rl->ep->fid);
	rl->ep = NULL;
	if (rl->av)
		fi_close(&rl->av->fid);
	if (rl->cq)
		fi_close(&rl->cq->fid);
	if (rl->domain)
		fi_close(&rl->domain->fid);
	if (rl->fabric)
		fi_close(&rl->fabric->fid);
	if (rl->info)
		fi_freeinfo(rl->info);
	memset(rl, 0, sizeof(*rl));
	rl->cq_fd = -1;
}

/* Ranks on the same host share a kernel boot and a network namespace: the shm endpoint can reach
 * them. Different namespaces count as different hosts (odx-run --netns tests the network). */
static void host_key(char *key, size_t n)
{
	char boot[64] = "", ns[64] = "";
	FILE *fp = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (fp) {
		if (!fgets(boot, sizeof(boot), fp))
			boot[0] = '\0';
		fclose(fp);
	}
	boot[strcspn(boot, "\n")] = '\0';
	ssize_t k = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
	ns[k > 0 ? k : 0] = '\0';
	memset(key, 0, n);
	snprintf(key, n, "%.36s/%.24s", boot, ns);
}

/* Name slot per rank: host key, then each rail's endpoint name, then the copy lanes' names of
 * the rail that has them (zeros where a rank has none). */
#define FAB_LANE_NAMES (FAB_HOST_KEY + FAB_RAILS_MAX * FAB_NAME_MAX)
#define FAB_SLOT (FAB_LANE_NAMES + (FAB_LANES_MAX - 1) * FAB_NAME_MAX)

static int exchange_names(odx_fab *f, char *err, size_t errlen)
{
	unsigned char mine[FAB_SLOT];
	memset(mine, 0, sizeof(mine));
	host_key((char *)mine, FAB_HOST_KEY);
	for (int i = 0; i < f->nrails; i++) {
		size_t len = FAB_NAME_MAX;
		int ret = fi_getname(&f->rail[i].ep->fid,
				     mine + FAB_HOST_KEY + (size_t)i * FAB_NAME_MAX, &len);
		if (ret) {
			snprintf(err, errlen, "fi_getname on %s failed: %s", f->rail[i].prov,
				 fi_strerror(-ret));
			return fab_err(ret);
		}
		for (int k = 1; k < f->rail[i].nlanes; k++) {
			len = FAB_NAME_MAX;
			struct fab_lane *ln = f->rail[i].lanes[k];
			ret = fi_getname(&ln->rl.ep->fid,
					 mine + FAB_LANE_NAMES + (size_t)(k - 1) * FAB_NAME_MAX,
					 &len);
			if (ret) {
				snprintf(err, errlen, "fi_getname on a %s copy lane failed: %s",
					 f->rail[i].prov, fi_strerror(-ret));
				return fab_err(ret);
			}
		}
	}
	unsigned char *all = calloc((size_t)f->size, FAB_SLOT);
	f->peer_str = calloc((size_t)f->size, sizeof(*f->peer_str));
	if (!all || !f->peer_str) {
		free(all);
		return ODX_ENOMEM;
	}
	int ret = fab_wireup_exchange(&f->wu, mine, FAB_SLOT, all, FAB_WIREUP_TIMEOUT_MS, err,
				      errlen);
	static const unsigned char zeros[FAB_NAME_MAX];
	for (int r = 0; !ret && r < f->size; r++) {
		unsigned char *slot = all + (size_t)r * FAB_SLOT;
		/* shm for a rank on this host that opened one too; the network otherwise */
		int rail = 0;
		if (f->nrails > 1 && !memcmp(slot, mine, FAB_HOST_KEY) &&
		    memcmp(slot + FAB_HOST_KEY + FAB_NAME_MAX, zeros, FAB_NAME_MAX) != 0)
			rail = 1;
		struct fab_rail *rl = &f->rail[rail];
		unsigned char *name = slot + FAB_HOST_KEY + (size_t)rail * FAB_NAME_MAX;
		f->peers[r].rail = rail;
		int n = fi_av_insert(rl->av, name, 1, &f->peers[r].addr, 0, NULL);
		if (n != 1) {
			snprintf(err, errlen, "fi_av_insert of rank %d's %s address failed (%d)", r,
				 rl->prov, n);
			ret = ODX_EPEER;
		}
		size_t slen = sizeof(f->peer_str[r]);
		fi_av_straddr(rl->av, name, f->peer_str[r], &slen);
		/* copy lanes: as many as both have (both sides count the same) */
		int lanes = 1;
		while (lanes < rl->nlanes &&
		       memcmp(slot + FAB_LANE_NAMES + (size_t)(lanes - 1) * FAB_NAME_MAX, zeros,
			      FAB_NAME_MAX) != 0)
			lanes++;
		for (int k = 1; !ret && k < lanes; k++) {
			/* its lane in the rail's AV (our sends), its rail endpoint in our lane's AV
			 * (the source of what our lane receives) */
			struct fab_lane *ln = rl->lanes[k];
			if (fi_av_insert(rl->av,
					 slot + FAB_LANE_NAMES + (size_t)(k - 1) * FAB_NAME_MAX, 1,
					 &f->peers[r].lane_addr[k], 0, NULL) != 1 ||
			    fi_av_insert(ln->rl.av, name, 1, &ln->addr[r], 0, NULL) != 1) {
				snprintf(err, errlen,
					 "fi_av_insert of rank %d's copy lane %d address failed", r,
					 k);
				ret = ODX_EPEER;
			}
		}
		f->peers[r].lanes = lanes;
	}
	free(all);
	return ret;
}

int odx_fab_open(const odx_fab_params *p, odx_fab **out, char *err, size_t errlen)
{
	char dummy[8];
	if (!err) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	err[0] = '\0';
	if (!out) {
		snprintf(err, errlen, "odx_fab_open: out is NULL");
		return ODX_EINVAL;
	}
	odx_fab *f = calloc(1, sizeof(*f));
	if (!f)
		return ODX_ENOMEM;
	for (int i = 0; i < FAB_RAILS_MAX; i++)
		f->rail[i].cq_fd = -1;
	f->wake_fd = -1;
	f->failed_peer = -1;
	f->peer_timeout_ms = p && p->peer_timeout_ms > 0 ? p->peer_timeout_ms : 10000;
	f->max_retries = p && p->max_retries > 0 ? p->max_retries : 3;
	const char *spin = getenv("ODX_FAB_SPIN");
	f->spin = spin ? atoi(spin) : 200;
	const char *watch = getenv("ODX_FAB_ASSIST_WATCH");
	f->assist_watch = !watch || atoi(watch) != 0;
	const char *linger = getenv("ODX_FAB_ASSIST_LINGER_US");
	f->assist_linger_ns = linger ? 1000ll * atoi(linger) : FAB_ASSIST_LINGER_NS;
	pthread_mutex_init(&f->lock, NULL);
	pthread_mutex_init(&f->plock, NULL);
	fab_cond_init_monotonic(&f->cond);
	struct fi_info *shm_info = NULL;
	int ret = fab_fault_parse(&f->fault, p ? p->fault : NULL, err, errlen);
	if (ret)
		goto out_free;
	/* resolve the provider even for one rank: a wrong name is an error everywhere */
	ret = fab_resolve(p, &f->prof, &f->rail[0].info, err, errlen);
	if (ret)
		goto out_free;
	snprintf(f->rail[0].prov, sizeof(f->rail[0].prov), "%s", f->prof.prov);
	atomic_store(&f->pull_min, f->prof.pull_min);
	f->rail[0].chunk = f->prof.chunk;
	f->rail[0].lane_min = f->prof.lane_min;
	ret = fab_wireup_detect(&f->wu, err, errlen);
	if (ret)
		goto out_free;
	f->rank = f->wu.rank;
	f->size = f->wu.size;
	f->peers = calloc((size_t)f->size, sizeof(*f->peers));
	f->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (!f->peers || f->wake_fd < 0) {
		ret = ODX_ENOMEM;
		goto out_wireup;
	}
	int64_t now = fab_now_ns();
	for (int r = 0; r < f->size; r++) {
		f->peers[r].credits = f->prof.credits;
		f->peers[r].last_heard = now;
		f->peers[r].last_sent = now;
	}
	if (f->size == 1) {
		snprintf(f->provider, sizeof(f->provider), "self");
	} else {
		fab_shm_sweep(); /* segments that killed ODX ranks left behind (fab_shm.c) */
		f->nrails = 1;
		int lanes = fab_lane_count(&f->prof, p);
		ret = fab_open_endpoint(f, &f->rail[0], f->prof.source_broken, NULL, lanes, err,
					errlen);
		if (ret)
			goto out_close;
		/* auto mode: a second, shm endpoint for the ranks on this host (ODX_FAB_SHM=0: off) */
		const char *want = p && p->provider && *p->provider ? p->provider : "auto";
		const char *shm_env = getenv("ODX_FAB_SHM");
		if (!strcmp(want, "auto") && strcmp(f->prof.prov, "shm") != 0 &&
		    !(shm_env && !strcmp(shm_env, "0"))) {
			odx_fab_params sp = {.provider = "shm"};
			struct fab_profile shm_prof;
			char shm_err[256];
			if (fab_resolve(&sp, &shm_prof, &shm_info, shm_err, sizeof(shm_err)) == 0) {
				struct fab_rail *rl = &f->rail[1];
				rl->info = shm_info;
				shm_info = NULL;
				snprintf(rl->prov, sizeof(rl->prov), "shm");
				rl->chunk = shm_prof.chunk;
				rl->lane_min = shm_prof.lane_min;
				int shm_lanes = fab_lane_count(&shm_prof, p);
				if (fab_open_endpoint(f, rl, false, NULL, shm_lanes, shm_err,
						      sizeof(shm_err)) == 0) {
					f->nrails = 2;
					fab_open_lanes(f, rl, shm_lanes);
				} else {
					fab_close_rail(
						rl); /* the network endpoint serves every rank */
				}
			}
		}
		fab_open_lanes(f, &f->rail[0], lanes);
		snprintf(f->provider, sizeof(f->provider), "%s%s", f->prof.prov,
			 f->nrails > 1 ? "+shm" : "");
		/* room for one chunk of any rail */
		f->sink_len = f->rail[0].chunk;
		if (f->nrails > 1 && f->rail[1].chunk > f->sink_len)
			f->sink_len = f->rail[1].chunk;
		f->sink = mmap(NULL, f->sink_len, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (f->sink == MAP_FAILED)
			f->sink = NULL; /* then a longer sender truncates (the provider's error) */
		ret = exchange_names(f, err, errlen);
		if (ret)
			goto out_close;
		for (int rail = 0; rail < f->nrails; rail++) {
			for (int k = 1; k < f->rail[rail].nlanes; k++) {
				struct fab_lane *ln = f->rail[rail].lanes[k];
				if (pthread_create(&ln->thread, NULL, fab_lane_main, ln)) {
					snprintf(err, errlen,
						 "could not start a fabric copy lane thread");
					ret = ODX_ENOMEM;
					goto out_close;
				}
				ln->started = true;
			}
		}
		for (int rail = 0; rail < f->nrails; rail++) {
			for (unsigned i = 0; i < f->prof.ctrl_rx; i++) {
				/* owned by the queues (and the provider) from here on */
				struct fab_op *rx = op_new(OP_CTRL_RX, -1, FAB_CTRL_BUF);
				if (!rx) {
					ret = ODX_ENOMEM;
					goto out_close;
				}
				rx->rail = rail;
				push_ready(f, rx);
			}
		}
		now = fab_now_ns();
		for (int r = 0; r < f->size; r++)
			f->peers[r].last_heard = now;
	}
	if (pthread_create(&f->thread, NULL, fab_progress_main, f)) {
		snprintf(err, errlen, "could not start the fabric progress thread");
		ret = ODX_ENOMEM;
		goto out_close;
	}
	f->thread_started = true;
	*out = f;
	return 0;
out_close:
	odx_fab_close(f);
	return ret;
out_wireup:
	fab_wireup_finish(&f->wu);
out_free:
	fab_close_rail(&f->rail[0]);
	if (f->sink)
		munmap(f->sink, f->sink_len);
	free(f->peers);
	if (f->wake_fd >= 0)
		close(f->wake_fd);
	free(f);
	return ret;
}

static void free_op_list(struct fab_op *op)
{
	while (op) {
		struct fab_op *next = op->next;
		op_free(op);
		op = next;
	}
}

void odx_fab_close(odx_fab *f)
{
	if (!f)
		return;
	atomic_store(&f->closing, true);
	if (f->thread_started) {
		wake_fd_signal(f);
		pthread_join(f->thread, NULL);
	}
	/* Closing the endpoints first means the provider holds none of our buffers afterwards (the
	 * lanes' threads stop first: they touch their endpoints; the ops they held are on
	 * f->posted). */
	for (int i = 0; i < FAB_RAILS_MAX; i++) {
		fab_stop_lanes(&f->rail[i]);
		for (int k = 1; k < f->rail[i].nlanes; k++) {
			struct fab_rail *lrl = &f->rail[i].lanes[k]->rl;
			if (lrl->ep)
				fi_close(&lrl->ep->fid);
			lrl->ep = NULL;
		}
		if (f->rail[i].ep)
			fi_close(&f->rail[i].ep->fid);
		f->rail[i].ep = NULL;
	}
	while (f->posted) {
		struct fab_op *op = f->posted;
		posted_remove(f, op);
		op_free(op);
	}
	free_op_list(f->ready_head);
	free_op_list(f->delayed);
	for (int i = 0; i < FAB_RAILS_MAX; i++)
		for (int c = 0; c < 2; c++)
			free_op_list(f->rail[i].thr_head[c]);
	for (int r = 0; f->peers && r < f->size; r++) {
		free_op_list(f->peers[r].wait_head);
		free_op_list(f->peers[r].held_head);
	}
	pthread_mutex_lock(&f->lock);
	free_op_list(f->sub_o_head);
	pthread_mutex_unlock(&f->lock);
	while (f->active)
		fab_xfer_release(f, f->active);
	for (int i = 0; i < FAB_RAILS_MAX; i++) {
		fab_free_lanes(&f->rail[i]);
		fab_close_rail(&f->rail[i]);
	}
	fab_wireup_finish(&f->wu);
	if (f->wake_fd >= 0)
		close(f->wake_fd);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	pthread_mutex_destroy(&f->plock);
	if (f->sink)
		munmap(f->sink, f->sink_len);
	free(f->peer_str);
	free(f->peers);
	free(f);
}
