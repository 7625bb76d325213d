/*
 * wsp_open / wsp_close and the handle's small accessors.
 *
 * Opening builds the tiers bottom-up: the pack, the predictor, the device
 * and its slots, then the host cache (which starts the I/O and decode
 * workers and pins its memory through the device's hooks).  Closing tears
 * them down in the reverse order, after the copy stream has drained.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/util.h"
#include "gpu/unpack.h"
#include "pager/pager.h"

static int check_options(const struct wsp_options *o, struct wspi_err *err)
{
	for (size_t i = 0; i < WSP_ARRAY_SIZE(o->reserved); i++)
		if (o->reserved[i])
			return WSP_ERR(err, -EINVAL, "wsp_options: reserved fields are not zero "
				       "(fill the struct with wsp_options_init)");
	if (o->gpu_slots == 0)
		return WSP_ERR(err, -EINVAL, "gpu_slots is 0: at least one slot is needed");
	if (o->gpu_slots > WSP_MAX_GPU_SLOTS)
		return WSP_ERR(err, -EINVAL, "gpu_slots is %u: at most %u", o->gpu_slots,
			       WSP_MAX_GPU_SLOTS);
	if (o->page_bytes == 0 || o->page_bytes % 4096)
		return WSP_ERR(err, -EINVAL, "page_bytes %llu is not a positive multiple of 4096",
			       (unsigned long long)o->page_bytes);
	if (o->io > WSP_IO_MMAP)
		return WSP_ERR(err, -EINVAL, "unknown I/O backend %d", (int)o->io);
	if (o->policy > WSP_POLICY_LRU)
		return WSP_ERR(err, -EINVAL, "unknown eviction policy %d", (int)o->policy);
	if ((o->flags & WSP_OPEN_HOST_DECODE) && (o->flags & WSP_OPEN_GPU_DECODE))
		return WSP_ERR(err, -EINVAL, "WSP_OPEN_HOST_DECODE and WSP_OPEN_GPU_DECODE together: "
			       "the host and the GPU cannot both decode every layer");
	struct stat st;
	if (o->overflow_dir && stat(o->overflow_dir, &st) < 0)
		return WSP_ERR(err, -errno, "overflow_dir %s: %s", o->overflow_dir, strerror(errno));
	if (o->overflow_dir && !S_ISDIR(st.st_mode))
		return WSP_ERR(err, -ENOTDIR, "overflow_dir %s: not a directory", o->overflow_dir);
	if (o->reserved_u32)
		return WSP_ERR(err, -EINVAL, "wsp_options: reserved fields are not zero "
			       "(fill the struct with wsp_options_init)");
	if (o->n_devices && !o->devices)
		return WSP_ERR(err, -EINVAL, "n_devices is %u but devices is NULL", o->n_devices);
	if (o->layer_devices && o->n_devices < 2)
		return WSP_ERR(err, -EINVAL, "layer_devices is set but n_devices is %u: it "
			       "places layers over several devices", o->n_devices);
	if (o->device < 0 && o->device != WSP_DEVICE_HOST)
		return WSP_ERR(err, WSP_ENODEVICE, "device %d is neither a CUDA ordinal nor WSP_DEVICE_HOST",
			       o->device);
	return 0;
}

/* How far ahead each tier looks: the host tier as many layers as its budget
 * holds (the layer in use aside), the slots all but the one being used. */
/* Bytes of host-tier prefetch window when the model does not fit. */
#define PAGER_WINDOW_BYTES (1ull << 30)

static void plan_lookahead(struct wsp_pager_s *pg, uint64_t budget)
{
	const struct wsp_pack_s *pk = pg->pk;
	uint32_t n = pk->m.hdr->n_layers;
	uint64_t total = 0;
	for (uint32_t i = 0; i < n; i++)
		total += hcache_layer_bytes(pg->hc, i);   /* as the host tier keeps them */
	uint64_t avg = n ? total / n : 1;
	/* When the model fits, prefetch as far as the tier holds.  When it
	 * does not, a deep window would fill the whole cache with layers about
	 * to be used and every prefetch would evict a layer kept for the next
	 * pass: nothing would survive a pass.  The window only needs enough
	 * bytes in flight to keep the disk and decoders busy; the rest of the
	 * cache keeps a set of layers across passes (eviction then takes the
	 * layer used furthest ahead, as Belady's rule does). */
	uint64_t window = total <= budget ? budget : WSP_MIN(budget / 4, PAGER_WINDOW_BYTES);
	uint64_t fit = avg ? window / avg : n;
	unsigned host = fit > 1 ? (unsigned)WSP_MIN(fit - 1, (uint64_t)UINT32_MAX) : 1;
	if (total > budget)
		host = WSP_MAX(host, 2u);
	unsigned gpu = pg->opt.gpu_slots > 1 ? pg->opt.gpu_slots - 1 : 1;
	if (pg->opt.lookahead) {
		host = pg->opt.lookahead;
		gpu = WSP_MIN(gpu, pg->opt.lookahead);
	}
	host = WSP_MIN(host, n > 1 ? n - 1 : 1);
	host = WSP_MIN(host, PAGER_MAX_AHEAD);
	pg->host_ahead = WSP_MAX(host, gpu);
	pg->gpu_ahead = gpu;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* Slot sizes.  When a few layers (embeddings, output heads) are much larger
 * than the rest, up to two slots, and never all of them, take the largest
 * layer's size; the others take the largest of the rest ("much larger":
 * above 1.25 x that, itself at most 1.25 x the median layer).  Otherwise
 * every slot is the largest layer's size.  *small, *n_big: the second class
 * and how many slots take the first. */
static int slot_sizes(const struct wsp_pack_s *pk, unsigned n, uint64_t *small, unsigned *n_big,
		      struct wspi_err *err)
{
	uint32_t nl = pk->m.hdr->n_layers;
	uint64_t *sz = malloc((nl ? nl : 1) * sizeof(*sz)), big = 0;
	if (!sz)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	for (uint32_t l = 0; l < nl; l++)
		sz[l] = pk->layers[l].raw_bytes;
	qsort(sz, nl, sizeof(*sz), cmp_u64);
	uint64_t median = nl ? sz[nl / 2] : 0, limit = median + median / 4;
	unsigned oversize = 0;
	*small = 0;
	for (uint32_t l = 0; l < nl; l++) {
		big = WSP_MAX(big, sz[l]);
		if (sz[l] <= limit)
			*small = sz[l];
	}
	for (uint32_t l = 0; l < nl; l++)
		oversize += sz[l] > *small;
	free(sz);
	*n_big = n;
	if (n < 2 || !*small || big <= *small + *small / 4) {
		*small = big;
		return 0;
	}
	*n_big = oversize < 2 ? oversize : 2;
	if (*n_big > n - 1)
		*n_big = n - 1;
	return 0;
}

static void pager_free(struct wsp_pager_s *pg)
{
	who_decodes_stop(pg);   /* its thread reads the host tier */
	pager_copier_free(pg);
	pgroup_close(pg);
	wb_destroy(pg->wb);   /* waits for gradient copies still in flight */
	hcache_destroy(pg->hc);
	slots_destroy(&pg->sp);
	dirty_destroy(pg->dirty);   /* after the slots' copies from it; unpins */
	state_destroy(pg->state);
	dev_close(pg->dev);
	predictor_free(pg->pred);
	readahead_free(pg->ra);
	pack_close(pg->pk);
	free(pg->hinted);
	free(pg->on_demand);
	for (unsigned i = 0; i < pg->n_notices; i++)
		free(pg->notices[i]);
	pthread_mutex_destroy(&pg->log_lock);
	pthread_mutex_destroy(&pg->save_lock);
	pthread_cond_destroy(&pg->progress);
	pthread_mutex_destroy(&pg->lock);
	wspi_err_destroy(&pg->err);
	free(pg);
}

static int open_tiers(struct wsp_pager_s *pg, const char *path)
{
	struct wspi_err *err = &pg->err;
	int rc;

	if ((rc = pack_open(path, &pg->pk, err)) < 0)
		return rc;
	uint32_t n = pg->pk->m.hdr->n_layers;
	if (n == 0)
		return WSP_ERR(err, WSP_ESTATE, "%s holds no layers (its checkpoint had no "
			       "tensors): there is nothing to page", pg->pk->dir);
	uint64_t max_raw = 0;
	uint32_t max_tensors = 0;
	for (uint32_t i = 0; i < n; i++) {
		max_raw = WSP_MAX(max_raw, pg->pk->layers[i].raw_bytes);
		max_tensors = WSP_MAX(max_tensors, pg->pk->layers[i].n_tensors);
	}
	pg->hinted = calloc(n ? n : 1, 1);
	pg->on_demand = calloc(n ? n : 1, 1);
	if (!pg->hinted || !pg->on_demand)
		return WSP_ERR(err, -ENOMEM, "out of memory");
	for (const char *const *name = pg->opt.on_demand; name && *name; name++) {
		const struct wsp_layer *l = wsp_pack_find_layer(pg->pk, *name);
		if (!l)
			return WSP_ERR(err, WSP_ENOTFOUND, "on_demand: no layer named \"%s\"", *name);
		pg->on_demand[l->index] = 1;
	}
	pg->opt.on_demand = NULL;   /* the caller's strings: read at open only */
	if ((rc = predictor_create(n, &pg->pred)) < 0 || (rc = readahead_create(n, &pg->ra)) < 0)
		return WSP_ERR(err, rc, "creating the predictor for %u layers: %s", n,
			       wsp_strerror(rc));
	if ((rc = dev_open(pg->opt.device, &pg->dev, err)) < 0)
		return rc;
	uint64_t small = 0;
	unsigned n_big = 0;
	if ((rc = slot_sizes(pg->pk, pg->opt.gpu_slots, &small, &n_big, err)) < 0 ||
	    (rc = slots_init(&pg->sp, pg->dev, pg->opt.gpu_slots, n_big, max_raw, small, max_tensors,
			     err)) < 0)
		return rc;

	struct hcache_config cfg;
	memset(&cfg, 0, sizeof(cfg));
	cfg.budget_bytes = pg->opt.host_cache_bytes ? pg->opt.host_cache_bytes
						    : pager_default_host_bytes();
	cfg.page_bytes = pg->opt.page_bytes;
	/* Host-memory slots share the process's memory with the cache. */
	if (dev_is_host(pg->dev))
		cfg.reserve_bytes = pg->sp.total_bytes;
	cfg.budget_total = !!(pg->opt.flags & WSP_OPEN_HOST_TOTAL);
	/* Within a total budget the per-layer bookkeeping counts too: with
	 * tens of thousands of layers it is tens of MB (the cache adds its own
	 * chunk table). */
	if (cfg.budget_total)
		cfg.reserve_bytes += pack_bytes(pg->pk) + predictor_bytes(pg->pred) +
				     readahead_bytes(pg->ra) + sizeof(*pg) + 2ull * n;
	/* With a GPU that decodes, EXPRANS chunks stay packed in the host tier
	 * and cross the link packed. */
	cfg.keep_packed = !dev_is_host(pg->dev) && pg->dev->ops->unpack &&
			  !(pg->opt.flags & WSP_OPEN_HOST_DECODE);
	cfg.decode_threads = pg->opt.decode_threads;
	cfg.policy = pg->opt.policy;
	io_config_init(&cfg.io);
	cfg.io.backend = pg->opt.io;
	if (pg->opt.queue_depth)
		cfg.io.queue_depth = pg->opt.queue_depth;
	if (pg->opt.io_threads)
		cfg.io.threads = pg->opt.io_threads;
	cfg.io.direct = !(pg->opt.flags & WSP_OPEN_NO_DIRECT);
	cfg.io.notice = pager_notice;
	cfg.io.notice_ctx = pg;
	cfg.predictor = pg->pred;
	if (!dev_is_host(pg->dev)) {
		if (pg->opt.flags & WSP_OPEN_NO_PIN) {
			pager_notice(pg, "WSP_OPEN_NO_PIN: the host cache is not page-locked; "
					 "host-to-GPU copies run at pageable speed (several times slower)");
		} else {
			cfg.pin = dev_pin_hook;
			cfg.unpin = dev_unpin_hook;
			cfg.pin_ctx = pg->dev;
		}
	}
	cfg.pin_later = cfg.pin != NULL;   /* after the GPU's set-up below */
	cfg.pin_piece_bytes = 32ull << 20;  /* ~7 ms of registration at a time */
	cfg.on_ready = pager_on_ready;
	cfg.on_unused = pager_on_unused;
	cfg.ready_ctx = pg;
	cfg.trace = pg->opt.trace;
	cfg.trace_ctx = pg->opt.trace_ctx;
	cfg.notice = pager_notice;
	cfg.notice_ctx = pg;
	/* Before the host tier: what it finishes loading is posted to it. */
	if ((rc = pager_copier_start(pg, err)) < 0)
		return rc;
	if ((rc = hcache_create(&cfg, pg->pk, &pg->hc, err)) < 0)
		return rc;
	struct unpacker *up = NULL;
	if (cfg.keep_packed && (rc = unpacker_create(pg->dev, pg->pk, pg->hc, pg->opt.gpu_packed_bytes, &up,
						   err)) < 0)
		return rc;
	if (up && !unpacker_pinned(up))
		pager_notice(pg, "cudaHostRegister refused the GPU decoder's status words: each "
				 "fill of a packed layer waits for its decode on the host");
	if ((rc = hcache_pin_start(pg->hc, err)) < 0) {
		unpacker_destroy(up);
		return rc;
	}
	pthread_mutex_lock(&pg->lock);
	pg->sp.unpack = up;
	pg->sp.pk = pg->pk;
	pthread_mutex_unlock(&pg->lock);
	who_decodes_init(pg);
	/* The budget in use: clamped, or net of staging under a total budget. */
	struct hcache_stats hs;
	hcache_get_stats(pg->hc, &hs);
	plan_lookahead(pg, hs.budget_bytes);
	return 0;
}

int wsp_open(const char *path, const struct wsp_options *opt, wsp_pager **out, char *errbuf,
	     size_t errlen)
{
	struct wsp_pager_s *pg;
	int rc;

	if (errbuf && errlen)
		errbuf[0] = '\0';
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (!path) {
		if (errbuf && errlen)
			snprintf(errbuf, errlen, "wsp_open: no pack path");
		return -EINVAL;
	}
	pg = calloc(1, sizeof(*pg));
	if (!pg) {
		if (errbuf && errlen)
			snprintf(errbuf, errlen, "%s: out of memory", path);
		return -ENOMEM;
	}
	wspi_err_init(&pg->err);
	pthread_mutex_init(&pg->lock, NULL);
	pthread_cond_init(&pg->progress, NULL);
	pthread_mutex_init(&pg->log_lock, NULL);
	pthread_mutex_init(&pg->save_lock, NULL);
	if (opt)
		pg->opt = *opt;
	else
		wsp_options_init(&pg->opt);

	rc = check_options(&pg->opt, &pg->err);
	if (rc == 0 && pg->opt.n_devices == 1) {   /* one device: as `device` */
		pg->opt.device = pg->opt.devices[0];
		pg->opt.n_devices = 0;
		pg->opt.devices = NULL;
	}
	if (rc == 0)
		rc = pg->opt.n_devices ? pgroup_open(pg, path) : open_tiers(pg, path);
	if (rc < 0) {
		/* Name the pack unless the message already does. */
		if (!strstr(pg->err.msg, path))
			wspi_err_prefix(&pg->err, "%s", path);
		if (errbuf && errlen)
			wspi_err_copy(&pg->err, errbuf, errlen);
		pager_free(pg);
		return rc;
	}

	/* Before anything is observed the predictor says pack order: start the
	 * first layers on their way now. */
	if (!pg->group && !(pg->opt.flags & WSP_OPEN_NO_PREFETCH))
		pager_prefetch_ahead(pg);
	*out = pg;
	return 0;
}

void wsp_close(wsp_pager *pg)
{
	if (!pg)
		return;
	if (pg->group) {
		pager_forget_errors(pg);
		pager_free(pg);   /* closes the members */
		return;
	}
	/* Nothing more is posted or copied from here on. */
	pager_copier_stop(pg);
	pthread_mutex_lock(&pg->lock);
	for (unsigned i = 0; i < pg->sp.n; i++)
		pg->sp.slots[i].refs = 0;   /* layers still acquired are released */
	pthread_mutex_unlock(&pg->lock);
	/* Wait for the copies, hand their host pages back, then stop the host
	 * tier (it unpins through the device, which goes last). */
	pager_reap(pg, 1);
	pager_forget_errors(pg);   /* a later pager may get the same address */
	pager_free(pg);
}

wsp_pack *wsp_pager_pack(const wsp_pager *pg)
{
	return pg ? pg->pk : NULL;
}

void wsp_reset_prediction(wsp_pager *pg)
{
	if (pg && pg->group)
		pgroup_reset_prediction(pg);
	if (pg && pg->pred) {
		predictor_reset(pg->pred);
		readahead_reset(pg->ra);
		who_decodes_reset(pg);   /* a new workload may want the other decoder */
	}
}
