/* SPDX-License-Identifier: Apache-2.0 */
/*
 * model.c - the performance models a policy reads (odx.estimate, batch.estimate, free_at,
 * task_us) and the link bandwidths behind its transfer estimates.
 *
 * A model is a running mean and variance of a kernel's time per device and size class (powers of
 * two of its bytes), in an open-addressed table, persisted in policy.model_dir. Separate from the
 * host because it needs no Lua: the host feeds it completions, the ops read it.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core.h"
#include "policy_internal.h"

#define OUTLIER_MIN_SAMPLES 10
#define OUTLIER_SIGMAS 5.0
#define MODEL_FILE "odx-models.txt"

/* ---- performance models --------------------------------------------------------------------- */

uint32_t pol_str_hash(const char *s)
{
	uint32_t x = 2166136261u;

	for (; *s; s++)
		x = (x ^ (unsigned char)*s) * 16777619u;
	return x;
}

int pol_size_bucket(uint64_t bytes)
{
	return bytes ? 64 - __builtin_clzll(bytes) : 0;
}

static size_t model_slot(const odx__policy *h, const char *k, uint32_t hash, int d, int b)
{
	size_t i = (hash ^ (uint32_t)d * 0x9e3779b1u ^ (uint32_t)b * 0x85ebca6bu) & (h->mcap - 1);

	while (h->models[i].kernel &&
	       !(h->models[i].hash == hash && h->models[i].device == d &&
		 h->models[i].bucket == b && strcmp(h->models[i].kernel, k) == 0))
		i = (i + 1) & (h->mcap - 1);
	return i;
}

pol_model *pol_model_find(odx__policy *h, const char *k, uint32_t hash, int d, int b, bool create)
{
	size_t i;

	if (!h->mcap)
		return NULL;
	i = model_slot(h, k, hash, d, b);
	if (h->models[i].kernel)
		return &h->models[i];
	if (!create)
		return NULL;
	if (2 * (h->mcount + 1) > h->mcap) {
		pol_model *old = h->models, *grown = calloc(2 * h->mcap, sizeof(*grown));
		size_t oldcap = h->mcap, j;

		if (!grown)
			return NULL;
		h->models = grown;
		h->mcap *= 2;
		for (j = 0; j < oldcap; j++)
			if (old[j].kernel)
				h->models[model_slot(h, old[j].kernel, old[j].hash, old[j].device,
						     old[j].bucket)] = old[j];
		free(old);
		i = model_slot(h, k, hash, d, b);
	}
	h->models[i] = (pol_model){.hash = hash, .device = d, .bucket = b};
	h->models[i].kernel = strdup(k);
	if (!h->models[i].kernel)
		return NULL;
	h->mcount++;
	return &h->models[i];
}

/* Welford's running mean and variance, ignoring samples far above the mean once it is known. */
static void welford(uint64_t *n, double *mean, double *m2, uint64_t *rejected, double x)
{
	double delta;

	if (*n >= OUTLIER_MIN_SAMPLES &&
	    x > *mean + OUTLIER_SIGMAS * sqrt(*m2 / (double)(*n - 1))) {
		if (rejected)
			(*rejected)++;
		return;
	}
	(*n)++;
	delta = x - *mean;
	*mean += delta / (double)*n;
	*m2 += delta * (x - *mean);
}

void pol_model_add(odx__policy *h, const char *kernel, int d, uint64_t bytes, double us)
{
	pol_model *e = pol_model_find(h, kernel, pol_str_hash(kernel), d, pol_size_bucket(bytes), true);
	double m2 = 0;

	if (e)
		welford(&e->n, &e->mean, &e->m2, &e->rejected, us);
	if (d >= 0 && d < h->nd)
		welford(&h->dev_n[d], &h->dev_mean[d], &m2, NULL, us);
}

void pol_models_load(odx__policy *h)
{
	char path[4096], kernel[256], dev[160];
	int d, b;
	unsigned long long n;
	double mean, m2;
	FILE *f;

	if (!h->model_dir || !h->model_dir[0])
		return;
	snprintf(path, sizeof(path), "%s/%s", h->model_dir, MODEL_FILE);
	f = fopen(path, "r");
	if (!f)
		return;
	while (fscanf(f, "%255[^\t\n]\t%d\t%159[^\t\n]\t%d\t%llu\t%lg\t%lg\n", kernel, &d, dev, &b,
		      &n, &mean, &m2) == 7) {
		pol_model *e;

		/* A model is only meaningful for the same device in the same slot. */
		if (d < 0 || d >= h->nd || strcmp(dev, h->devs[d].name) != 0)
			continue;
		e = pol_model_find(h, kernel, pol_str_hash(kernel), d, b, true);
		if (e && e->n == 0) {
			e->n = n;
			e->mean = mean;
			e->m2 = m2;
		}
	}
	fclose(f);
}

void pol_models_save(odx__policy *h)
{
	char path[4096], tmp[4200];
	FILE *f;
	size_t i;

	if (!h->model_dir || !h->model_dir[0] || h->mcount == 0)
		return;
	if (mkdir(h->model_dir, 0755) != 0 && errno != EEXIST) {
		pol_say(h, ODX_LOG_WARN, false, "policy models: cannot create %s: %s", h->model_dir,
			strerror(errno));
		return;
	}
	snprintf(path, sizeof(path), "%s/%s", h->model_dir, MODEL_FILE);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "w");
	if (!f) {
		pol_say(h, ODX_LOG_WARN, false, "policy models: cannot write %s: %s", tmp,
			strerror(errno));
		return;
	}
	for (i = 0; i < h->mcap; i++) {
		const pol_model *e = &h->models[i];

		if (!e->kernel || e->n == 0 || strpbrk(e->kernel, "\t\n") ||
		    strpbrk(h->devs[e->device].name, "\t\n"))
			continue;
		fprintf(f, "%s\t%d\t%s\t%d\t%llu\t%.17g\t%.17g\n", e->kernel, e->device,
			h->devs[e->device].name, e->bucket, (unsigned long long)e->n, e->mean,
			e->m2);
	}
	if (fclose(f) != 0 || rename(tmp, path) != 0)
		pol_say(h, ODX_LOG_WARN, false, "policy models: cannot write %s: %s", path,
			strerror(errno));
}

/* Fastest measured link into node `dst` from another node (bytes/s). */
double pol_best_in(odx__policy *h, int dst)
{
	double best = 0;
	int s;

	for (s = 0; s < h->nnodes; s++)
		if (s != dst) {
			double v = atomic_load_explicit(&h->bw[s * h->nnodes + dst],
							memory_order_relaxed);

			best = v > best ? v : best;
		}
	return best > 0 ? best : POL_LINK_BANDWIDTH;
}
