/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fab_provider.c - provider profiles: what `auto`, `tcp`, `shm`, `ue` ... mean on the installed
 * libfabric, the fi_getinfo hints (RDM, AV table, the full mr_mode set, no ordering), and the
 * small quirk table that only tunes chunking and credits.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_errno.h>

#include "fab_internal.h"
#include "odx/odx.h"

#define FAB_FI_VERSION FI_VERSION(1, 9)

int fab_err(int fi_ret)
{
	switch (-fi_ret) {
	case 0:
		return 0;
	case FI_EAGAIN:
		return ODX_EAGAIN;
	case FI_ENOMEM:
		return ODX_ENOMEM;
	case FI_EINVAL:
		return ODX_EINVAL;
	case FI_ENODATA:
	case FI_ENOSYS:
	case FI_EOPNOTSUPP:
		return ODX_EUNAVAIL;
	case FI_ETIMEDOUT:
		return ODX_ETIMEDOUT;
	case FI_ECANCELED:
		return ODX_ECANCELED;
	case FI_ECONNREFUSED:
	case FI_ECONNRESET:
	case FI_ECONNABORTED:
	case FI_EHOSTUNREACH:
	case FI_ENOTCONN:
	case FI_EADDRNOTAVAIL:
	case FI_ESHUTDOWN:
		return ODX_EPEER;
	default:
		return ODX_EIO;
	}
}

/* The tcp profile: 1.17 gives RDM over tcp only through the rxm utility provider; 1.18 made the
 * tcp provider RDM-capable by itself. */
static const char *tcp_provider_name(void)
{
	return fi_version() >= FI_VERSION(1, 18) ? "tcp" : "tcp;ofi_rxm";
}

static bool is_ip_address(const char *s)
{
	unsigned char buf[16];
	return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* One fi_getinfo attempt for `prov` with `caps`; NULL when the provider cannot give it. */
static struct fi_info *getinfo_with(const char *prov, const char *iface, uint64_t caps)
{
	struct fi_info *hints = fi_allocinfo();
	struct fi_info *info = NULL;
	if (!hints)
		return NULL;
	hints->caps = caps;
	hints->mode = FI_CONTEXT | FI_CONTEXT2;
	hints->ep_attr->type = FI_EP_RDM;
	hints->domain_attr->av_type = FI_AV_TABLE;
	/* Everything we can code for: the strictest registration path runs whenever a provider asks
	 * for it, and FI_MR_RAW only turns the fi_read pull off. */
	hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_RAW | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
				      FI_MR_PROV_KEY | FI_MR_MMU_NOTIFY | FI_MR_ENDPOINT;
	/* Only the progress thread touches libfabric objects. */
	hints->domain_attr->threading = FI_THREAD_DOMAIN;
	hints->tx_attr->msg_order = 0;
	hints->rx_attr->msg_order = 0;
	hints->fabric_attr->prov_name = strdup(prov);
	const char *node = NULL;
	uint64_t flags = 0;
	if (iface && *iface && strcmp(prov, "shm") != 0) {
		if (is_ip_address(iface)) {
			node = iface;
			flags = FI_SOURCE;
		}
	}
	if (fi_getinfo(FAB_FI_VERSION, node, NULL, flags, hints, &info) != 0)
		info = NULL;
	fi_freeinfo(hints);
	if (info && node == NULL && iface && *iface && strcmp(prov, "shm") != 0) {
		/* Pin by interface name ourselves: rxm on 1.17 ignores the domain name in hints. */
		struct fi_info *pick = NULL;
		for (struct fi_info *i = info; i && !pick; i = i->next)
			if (i->domain_attr->name && !strcmp(i->domain_attr->name, iface))
				pick = i;
		struct fi_info *dup = pick ? fi_dupinfo(pick) : NULL;
		fi_freeinfo(info);
		info = dup;
	}
	return info;
}

static struct fi_info *getinfo_for(const char *prov, const char *iface)
{
	/* Required: tagged messages with directed receives. Wanted: FI_SOURCE (sender checks) and
	 * FI_RMA (the read-only pull). Ask for the most and step down. */
	const uint64_t base = FI_TAGGED | FI_DIRECTED_RECV;
	const uint64_t tries[] = {base | FI_SOURCE | FI_RMA, base | FI_SOURCE, base | FI_RMA, base};
	for (size_t i = 0; i < sizeof(tries) / sizeof(tries[0]); i++) {
		struct fi_info *info = getinfo_with(prov, iface, tries[i]);
		/* Required too: 8 bytes of remote CQ data, which carry each data chunk's check */
		if (info && info->domain_attr->cq_data_size < sizeof(uint64_t)) {
			fi_freeinfo(info);
			info = NULL;
		}
		if (info)
			return info;
	}
	return NULL;
}

void fab_list_providers(char *buf, size_t n)
{
	struct fi_info *hints = fi_allocinfo(), *info = NULL;
	size_t used = 0;
	buf[0] = '\0';
	if (!hints)
		return;
	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_TAGGED;
	if (fi_getinfo(FAB_FI_VERSION, NULL, NULL, 0, hints, &info) == 0) {
		for (struct fi_info *i = info; i; i = i->next) {
			const char *name = i->fabric_attr->prov_name;
			/* skip duplicates (one entry per interface) */
			bool seen = false;
			for (struct fi_info *j = info; j != i; j = j->next)
				seen |= !strcmp(j->fabric_attr->prov_name, name);
			if (seen)
				continue;
			if (!fab_appendf(buf, n, &used, "%s%s", used ? ", " : "", name))
				break;
		}
		fi_freeinfo(info);
	}
	fi_freeinfo(hints);
}

/* The quirk table: tuning only, never correctness. */
static void fill_profile(struct fab_profile *prof, const char *prov, const struct fi_info *info)
{
	snprintf(prof->prov, sizeof(prof->prov), "%s", prov);
	prof->chunk = 16u << 20;
	prof->window = 8;
	prof->credits = 64;
	/* Few: every data message is matched past them (the providers here keep one list of
	 * posted tagged receives, control ones first), which many make slower at small sizes
	 * (docs/performance-log.md). More in flight wait in the provider as unexpected messages
	 * (credits bound them). */
	prof->ctrl_rx = 16;
	prof->tx_limit = 0;
	prof->max_xfer = SIZE_MAX;
	prof->pull_min = SIZE_MAX;
	prof->source_broken = false;
	prof->lanes = 1;
	prof->lane_min = 8u << 20;
	if (!strcmp(prov, "shm")) {
		/* The receiver copies (process_vm_readv with CMA): a second copying thread speeds up
		 * large transfers, while pieces of a few MiB lose more to the hand-off than they
		 * gain, so only transfers of 2 * lane_min and more split (docs/performance-log.md) */
		prof->lanes = 2;
	}
	if (strstr(prov, "ofi_rxd")) {
		/* udp;ofi_rxd hung at 1 MiB single messages here; small chunks, few in flight and few
		 * credits keep it inside what it handles (see docs/distributed.md). */
		prof->chunk = 64u << 10;
		prof->window = 2;
		prof->credits = 16;
		/* kept as it was: rxd stops delivering in some runs of fabric_ue_2 with 128 as with
		 * 16 (under load), and too few runs were made to tell them apart */
		prof->ctrl_rx = 128;
		prof->tx_limit = 4;
		prof->max_xfer = 64u << 10;
		/* The one correctness quirk: 1.17's rxd reports source address 0 for every message,
		 * so the sender check falls back to the header (job key, rank range, sequence). */
		prof->source_broken = true;
	}
	if (strstr(prov, "tcp")) {
		/* Over tcp a large message is one rendezvous moved by one stream; 1 MiB chunks keep
		 * eight in flight and the pipe full, faster than single large messages from 8 MiB
		 * up (docs/performance-log.md) */
		prof->chunk = 1u << 20;
	}
	if (info->ep_attr->max_msg_size && prof->chunk > info->ep_attr->max_msg_size)
		prof->chunk = info->ep_attr->max_msg_size;
	const char *env = getenv("ODX_FAB_CHUNK");
	if (env && strtoull(env, NULL, 0) > 0)
		prof->chunk = strtoull(env, NULL, 0);
	env = getenv("ODX_FAB_LANE_MIN");
	if (env && strtoull(env, NULL, 0) > 0)
		prof->lane_min = strtoull(env, NULL, 0);
	env = getenv("ODX_FAB_PULL_MIN");
	if (env && *env)
		prof->pull_min = strtoull(env, NULL, 0);
}

int fab_resolve(const odx_fab_params *p, struct fab_profile *prof, struct fi_info **out, char *err,
		size_t errlen)
{
	const char *want = p && p->provider && *p->provider ? p->provider : "auto";
	const char *iface = p ? p->iface : NULL;
	const char *cands[4] = {NULL};
	size_t ncand = 0;
	if (!strcmp(want, "auto")) {
		/* never sockets, udp;ofi_rxd or 1.17's net: not fit for defaults */
		cands[ncand++] = "cxi";
		cands[ncand++] = "efa";
		cands[ncand++] = "verbs;ofi_rxm";
		cands[ncand++] = tcp_provider_name();
	} else if (!strcmp(want, "tcp")) {
		cands[ncand++] = tcp_provider_name();
	} else if (!strcmp(want, "verbs")) {
		cands[ncand++] = "verbs;ofi_rxm";
	} else if (!strcmp(want, "ue")) {
		/* a native Ultra Ethernet provider where one exists, else the reliable-unordered
		 * datagram stack over UDP */
		cands[ncand++] = "uet";
		cands[ncand++] = "udp;ofi_rxd";
	} else {
		cands[ncand++] = want; /* shm, cxi, efa, or a raw provider string */
	}
	for (size_t i = 0; i < ncand; i++) {
		struct fi_info *info = getinfo_for(cands[i], iface);
		if (!info)
			continue;
		fill_profile(prof, cands[i], info);
		*out = info;
		return 0;
	}
	char avail[512];
	fab_list_providers(avail, sizeof(avail));
	if (err)
		snprintf(
			err, errlen,
			"fabric.provider '%s'%s%s%s: no reliable-datagram (FI_EP_RDM, tagged) provider "
			"matches; available: %s",
			want, iface ? " on interface '" : "", iface ? iface : "", iface ? "'" : "",
			avail[0] ? avail : "none");
	return ODX_EINVAL;
}

int odx_fab_describe(const odx_fab_params *p, char *buf, size_t n)
{
	char avail[512];
	struct fab_profile prof;
	struct fi_info *info = NULL;
	char err[768] = "";
	size_t used = 0;
	if (!buf || !n)
		return ODX_EINVAL;
	buf[0] = '\0';
	fab_list_providers(avail, sizeof(avail));
	fab_appendf(buf, n, &used, "libfabric %u.%u, RDM providers: %s\n", FI_MAJOR(fi_version()),
		    FI_MINOR(fi_version()), avail[0] ? avail : "none");
	odx_fab_params autop = {0};
	if (p)
		autop.iface = p->iface;
	int ret = fab_resolve(&autop, &prof, &info, err, sizeof(err));
	if (info)
		fi_freeinfo(info);
	info = NULL;
	/* auto adds a shm endpoint for ranks on the same host when shm is present */
	odx_fab_params shmp = {.provider = "shm"};
	struct fab_profile shm_prof;
	bool shm = !ret && strcmp(prof.prov, "shm") != 0 &&
		   fab_resolve(&shmp, &shm_prof, &info, NULL, 0) == 0;
	if (info)
		fi_freeinfo(info);
	info = NULL;
	fab_appendf(buf, n, &used, "auto -> %s%s\n", ret ? "none" : prof.prov,
		    shm ? " (+ shm for ranks on the same host)" : "");
	if (shm)
		fab_appendf(buf, n, &used,
			    "shm copy lanes: %d (fabric.shm_lanes; transfers of %zu MiB "
			    "and more split over them)\n",
			    fab_lane_count(&shm_prof, p), 2 * shm_prof.lane_min >> 20);
	if (p && p->provider && strcmp(p->provider, "auto") != 0) {
		ret = fab_resolve(p, &prof, &info, err, sizeof(err));
		fab_appendf(buf, n, &used, "%s -> %s\n", p->provider, ret ? err : prof.prov);
		if (info)
			fi_freeinfo(info);
	}
	return ret;
}
