/*
 * A pager over several devices (wsp_options.n_devices >= 2): one member
 * pager per device, each with its own GPU tier and link, its share of the
 * host budget, and its own layers; a member never reads another's layers
 * (they are on demand to it), so each layer is read from disk and cached
 * once.  The group's handle owns the members and routes each call on a
 * layer to the member the layer belongs to; it has no tiers of its own.
 *
 * Members are whole pagers opened through wsp_open: nothing in the tiers
 * knows about groups, and a member's errors become the group's (the
 * calling thread's wsp_errmsg names the group's handle).
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pager/pager.h"

struct pager_group {
	unsigned n;                    /* devices */
	int *devices;
	struct wsp_pager_s **members;  /* NULL for a device given no layer */
	uint32_t *owner;               /* per layer: its device's index */
};

/* Each layer's device: the caller's, checked, or consecutive layers split
 * where the running raw bytes cross k/n of the total (a layer goes where
 * its middle falls), as a pipeline splits a model. */
static int assign_layers(const struct wsp_pack_s *pk, const struct wsp_options *o,
			 uint32_t *owner, struct wspi_err *err)
{
	uint32_t nl = pk->m.hdr->n_layers;
	uint64_t total = 0, before = 0;
	for (uint32_t i = 0; i < nl; i++)
		total += pk->layers[i].raw_bytes;
	for (uint32_t i = 0; i < nl; i++) {
		if (o->layer_devices) {
			if (o->layer_devices[i] >= o->n_devices)
				return WSP_ERR(err, -EINVAL, "layer_devices[%u] (layer %s) is %u: "
					       "there are %u devices", i, pk->layers[i].name,
					       o->layer_devices[i], o->n_devices);
			owner[i] = o->layer_devices[i];
			continue;
		}
		uint64_t raw = pk->layers[i].raw_bytes;
		long double mid = (long double)before + (long double)raw / 2;
		uint64_t k = total ? (uint64_t)(mid * o->n_devices / (long double)total) : 0;
		owner[i] = (uint32_t)WSP_MIN(k, (uint64_t)o->n_devices - 1);
		before += raw;
	}
	return 0;
}

static int check_devices(const struct wsp_options *o, struct wspi_err *err)
{
	if (!o->devices)
		return WSP_ERR(err, -EINVAL, "n_devices is %u but devices is NULL", o->n_devices);
	for (unsigned k = 0; k < o->n_devices; k++) {
		int d = o->devices[k];
		if (d < 0 && d != WSP_DEVICE_HOST)
			return WSP_ERR(err, WSP_ENODEVICE, "devices[%u] is %d: neither a CUDA "
				       "ordinal nor WSP_DEVICE_HOST", k, d);
		for (unsigned j = 0; j < k && d >= 0; j++)
			if (o->devices[j] == d)
				return WSP_ERR(err, -EINVAL, "devices names GPU %d twice (%u and %u)",
					       d, j, k);
	}
	return 0;
}

/* Member k's options: its device, its share of the host budget, and every
 * other device's layers on demand besides the caller's. */
static int member_options(struct wsp_pager_s *pg, unsigned k, struct wsp_options *mo,
			  const char ***names)
{
	const struct wsp_pack_s *pk = pg->pk;
	struct pager_group *g = pg->group;
	uint32_t nl = pk->m.hdr->n_layers;
	size_t given = 0;
	uint64_t mine = 0, total = 0;
	for (const char *const *n = pg->opt.on_demand; n && *n; n++)
		given++;
	const char **list = calloc(given + nl + 1, sizeof(*list));
	if (!list)
		return -ENOMEM;
	size_t at = 0;
	for (size_t i = 0; i < given; i++)
		list[at++] = pg->opt.on_demand[i];
	for (uint32_t i = 0; i < nl; i++) {
		total += pk->layers[i].raw_bytes;
		if (g->owner[i] == k)
			mine += pk->layers[i].raw_bytes;
		else
			list[at++] = pk->layers[i].name;
	}
	*mo = pg->opt;
	mo->devices = NULL;
	mo->layer_devices = NULL;
	mo->n_devices = 0;
	mo->device = g->devices[k];
	mo->on_demand = list;
	uint64_t budget = pg->opt.host_cache_bytes ? pg->opt.host_cache_bytes
						   : pager_default_host_bytes();
	mo->host_cache_bytes = WSP_MAX((uint64_t)((long double)budget * mine / (total ? total : 1)),
				       1ull << 20);
	*names = list;
	return 0;
}

int pgroup_open(struct wsp_pager_s *pg, const char *path)
{
	struct wspi_err *err = &pg->err;
	const struct wsp_options *o = &pg->opt;
	int rc;
	if ((rc = check_devices(o, err)) < 0 || (rc = pack_open(path, &pg->pk, err)) < 0)
		return rc;
	uint32_t nl = pg->pk->m.hdr->n_layers;
	struct pager_group *g = calloc(1, sizeof(*g));
	if (g) {
		g->devices = calloc(o->n_devices, sizeof(*g->devices));
		g->members = calloc(o->n_devices, sizeof(*g->members));
		g->owner = calloc(nl ? nl : 1, sizeof(*g->owner));
	}
	pg->group = g;
	if (!g || !g->devices || !g->members || !g->owner)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	g->n = o->n_devices;
	memcpy(g->devices, o->devices, g->n * sizeof(*g->devices));
	if ((rc = assign_layers(pg->pk, o, g->owner, err)) < 0)
		return rc;
	for (unsigned k = 0; k < g->n; k++) {
		int used = 0;
		for (uint32_t i = 0; i < nl && !used; i++)
			used = g->owner[i] == k;
		if (!used)
			continue;   /* nothing to feed: no tiers on that device */
		struct wsp_options mo;
		const char **names;
		char msg[WSP_ERRMSG_MAX];
		if (member_options(pg, k, &mo, &names) < 0)
			return WSP_ERR(err, -ENOMEM, "out of memory");
		rc = wsp_open(path, &mo, &g->members[k], msg, sizeof(msg));
		free(names);
		if (rc < 0) {
			char dn[32];
			if (g->devices[k] == WSP_DEVICE_HOST)
				snprintf(dn, sizeof(dn), "host");
			else
				snprintf(dn, sizeof(dn), "GPU %d", g->devices[k]);
			return WSP_ERR(err, rc, "device %u (%s): %s", k, dn, msg);
		}
	}
	pg->opt.on_demand = NULL;   /* the caller's strings: read at open only */
	pg->opt.devices = NULL;
	pg->opt.layer_devices = NULL;
	return 0;
}

void pgroup_close(struct wsp_pager_s *pg)
{
	struct pager_group *g = pg->group;
	if (!g)
		return;
	for (unsigned k = 0; g->members && k < g->n; k++)
		wsp_close(g->members[k]);
	free(g->members);
	free(g->devices);
	free(g->owner);
	free(g);
	pg->group = NULL;
}

int pgroup_member(struct wsp_pager_s *pg, uint32_t layer, struct wsp_pager_s **member)
{
	struct wspi_err err;
	*member = NULL;
	if (layer < pg->pk->m.hdr->n_layers) {
		*member = pg->group->members[pg->group->owner[layer]];
		return 0;
	}
	wspi_err_init(&err);
	return pager_result(pg, &err, WSP_ERR(&err, WSP_ENOTFOUND, "no layer %u (the pack has %u)",
					      layer, pg->pk->m.hdr->n_layers));
}

int pgroup_refuse(struct wsp_pager_s *pg, const char *call)
{
	struct wspi_err err;
	wspi_err_init(&err);
	return pager_result(pg, &err, WSP_ERR(&err, WSP_ESTATE, "%s: training and saving need a "
					      "pager on one device (this one feeds %u)", call,
					      pg->group->n));
}

int pgroup_hint_next(struct wsp_pager_s *pg, const uint32_t *layers, size_t n)
{
	struct pager_group *g = pg->group;
	struct wspi_err err;
	wspi_err_init(&err);
	for (size_t i = 0; i < n; i++)
		if (layers[i] >= pg->pk->m.hdr->n_layers)
			return pager_result(pg, &err, WSP_ERR(&err, WSP_ENOTFOUND, "no layer %u (the "
							      "pack has %u)", layers[i],
							      pg->pk->m.hdr->n_layers));
	uint32_t *mine = malloc((n ? n : 1) * sizeof(*mine));
	if (!mine)
		return pager_result(pg, &err, WSP_ERR(&err, -ENOMEM, "out of memory"));
	wspi_err_destroy(&err);
	/* Each member its own layers, in the order given. */
	int rc = 0;
	for (unsigned k = 0; k < g->n && rc == 0; k++) {
		size_t m = 0;
		for (size_t i = 0; i < n; i++)
			if (g->owner[layers[i]] == k)
				mine[m++] = layers[i];
		if (m)
			rc = pgroup_pass(pg, g->members[k], wsp_hint_next(g->members[k], mine, m));
	}
	free(mine);
	return rc;
}

void pgroup_reset_prediction(struct wsp_pager_s *pg)
{
	for (unsigned k = 0; k < pg->group->n; k++)
		if (pg->group->members[k])
			wsp_reset_prediction(pg->group->members[k]);
}

/* The counters of struct wsp_stats that add up over the devices. */
#define SUMMED(f) offsetof(struct wsp_stats, f)
static const size_t summed[] = {
	SUMMED(acquires), SUMMED(gpu_hits), SUMMED(host_hits), SUMMED(misses),
	SUMMED(predicted), SUMMED(prefetches), SUMMED(prefetch_wasted), SUMMED(host_evictions),
	SUMMED(gpu_evictions), SUMMED(bytes_read), SUMMED(bytes_decoded), SUMMED(bytes_h2d),
	SUMMED(read_ns), SUMMED(decode_ns), SUMMED(h2d_ns), SUMMED(acquire_block_ns),
	SUMMED(host_cache_bytes), SUMMED(pinned_bytes), SUMMED(staging_bytes),
	SUMMED(acquire_failures), SUMMED(grad_pushes), SUMMED(bytes_d2h), SUMMED(grad_add_ns),
	SUMMED(updated_layers), SUMMED(updated_bytes), SUMMED(updated_resident),
	SUMMED(overflow_written), SUMMED(overflow_read), SUMMED(packed_gpu_hits),
	SUMMED(packed_gpu_bytes), SUMMED(readahead_left_out), SUMMED(slots_total_bytes),
	SUMMED(state_held), SUMMED(state_resident),
};
#undef SUMMED

/* Counters add up over the devices; sizes of one slot are the largest;
 * the I/O backend is the first member's (all share the options). */
int pgroup_get_stats(struct wsp_pager_s *pg, struct wsp_stats *out)
{
	struct pager_group *g = pg->group;
	int first = 1;
	memset(out, 0, sizeof(*out));
	for (unsigned k = 0; k < g->n; k++) {
		struct wsp_stats s;
		if (!g->members[k])
			continue;
		int rc = pgroup_pass(pg, g->members[k], wsp_get_stats(g->members[k], &s));
		if (rc < 0)
			return rc;
		for (size_t i = 0; i < WSP_ARRAY_SIZE(summed); i++)
			*(uint64_t *)((char *)out + summed[i]) +=
				*(const uint64_t *)((const char *)&s + summed[i]);
		out->slot_bytes = WSP_MAX(out->slot_bytes, s.slot_bytes);
		out->gpu_slots += s.gpu_slots;
		if (first) {
			memcpy(out->io_backend, s.io_backend, sizeof(out->io_backend));
			out->direct_io = s.direct_io;
		}
		out->direct_io &= s.direct_io;
		first = 0;
	}
	return 0;
}

int pgroup_who_decodes(struct wsp_pager_s *pg)
{
	int out = 0;
	for (unsigned k = 0; k < pg->group->n; k++) {
		if (!pg->group->members[k])
			continue;
		int c = wsp_who_decodes(pg->group->members[k]);
		/* One choice when the members agree; any still measuring wins. */
		if (!out || c == WSP_DECODE_TRYING)
			out = c;
		else if (out != c && out != WSP_DECODE_TRYING)
			out = WSP_DECODE_MIXED;
	}
	return out ? out : WSP_DECODE_GPU;
}

void pgroup_reset_stats(struct wsp_pager_s *pg)
{
	for (unsigned k = 0; k < pg->group->n; k++)
		if (pg->group->members[k])
			wsp_reset_stats(pg->group->members[k]);
}

int wsp_layer_device(wsp_pager *pg, uint32_t layer, int *device, unsigned *index)
{
	struct wspi_err err;
	if (!pg || !device)
		return -EINVAL;
	if (layer >= pg->pk->m.hdr->n_layers) {
		wspi_err_init(&err);
		return pager_result(pg, &err, WSP_ERR(&err, WSP_ENOTFOUND, "no layer %u (the pack "
						      "has %u)", layer, pg->pk->m.hdr->n_layers));
	}
	unsigned k = pg->group ? pg->group->owner[layer] : 0;
	*device = pg->group ? pg->group->devices[k] : pg->opt.device;
	if (index)
		*index = k;
	return 0;
}
