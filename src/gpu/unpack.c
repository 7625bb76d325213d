/* Slots filled from packed layers (see unpack.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "gpu/pagecopy.h"
#include "gpu/unpack.h"
#include "pack/exprans/exprans.h"
#include "pack/exprans/exprans_gpu.h"

#define UNPACK_STAGES 3u

struct unpacker {
	struct dev *dev;
	uint32_t n_layers;
	uint64_t *job0;                  /* n_layers + 1: each layer's jobs in the table */
	uint64_t *max_out;               /* per layer: its largest job's output */
	uint8_t *layouts;                /* per layer: the OR of its decode jobs' flags */
	uint64_t *packed_bytes;          /* per layer: the size of its packed form */
	uint32_t *chunk_of;              /* per job: chunk index in its tensor (messages) */
	uint32_t *tensor_of;             /* per job: global tensor index */
	struct exprans_gpu_job *jobs_dev;
	/* Status words, a row of n_jobs per decode queue: a layer filled
	 * twice in a row may decode on both queues at once, and each decode
	 * must report only its own.  status_host is pinned; status_view is
	 * status_host as the device sees it, or NULL. */
	uint32_t *status_dev, *status_host, *status_view;
	uint64_t n_jobs;
	/* Fills take turns: fill i decodes on decode queue i % 2; fills whose
	 * bytes come over the link take the staging buffers in turn.  A copy
	 * into a staging buffer waits for the decode that last read it: with
	 * three, that decode is two copies back, and a small layer's copy (a
	 * final norm: microseconds) never leaves the next large copy waiting
	 * for the decode of the one before it, as two buffers would. */
	void *stage[UNPACK_STAGES];
	uint64_t stage_bytes;
	struct dev_event *stage_free[UNPACK_STAGES], *copied, *decoded;
	int stage_used[UNPACK_STAGES];
	unsigned next, next_stage;
	int host_pinned;
	/* The GPU tier of packed layers: kept[l] holds layer l's packed
	 * bytes in device memory (stream-ordered allocations).  uses[l]
	 * counts layer l's fills (halved every AGE_FILLS x layers fills); a
	 * layer that does not fit displaces only layers filled less often
	 * than itself.  A loop over more layers than fit so keeps a fixed set
	 * (LRU would keep none: each pass evicts the layers the next pass
	 * needs first), and routed experts that run often displace rare ones. */
	uint64_t gpu_budget, gpu_resident, fills, hits;
	void **kept;
	uint64_t *kept_bytes, *uses;
};

#define AGE_FILLS 16u

/* The status words of n jobs: a row per decode queue, whole pages (pinned). */
static uint64_t status_bytes(uint64_t n)
{
	return wspi_align_up((uint64_t)DEV_DECODE_QUEUES * (n ? n : 1) * sizeof(uint32_t), 4096);
}

static uint64_t layer_chunks(const struct wsp_pack_s *pk, uint32_t l)
{
	const struct wspm_layer *L = &pk->m.layers[l];
	uint64_t n = 0;
	for (uint32_t t = L->first_tensor; t < L->first_tensor + L->n_tensors; t++)
		n += pk->m.tensors[t].n_chunks;
	return n;
}

/* One chunk of a layer in its packed form (pack.h). */
struct piece {
	uint64_t at, dst, raw;
	uint32_t tensor, index;
	const struct wspm_chunk *c;
};

static int by_dst(const void *a, const void *b)
{
	const struct piece *x = a, *y = b;
	return x->dst < y->dst ? -1 : x->dst > y->dst;
}

/* Layer l's jobs into jobs[] over its packed form (of *packed_bytes): one
 * per chunk (decode an EXPRANS one, copy the others), then one zero job per
 * gap of the raw layout that no chunk covers.  pc: room for the layer's
 * chunks.  Returns their number. */
static uint64_t layer_jobs(const struct wsp_pack_s *pk, uint32_t l, struct piece *pc,
			   struct exprans_gpu_job *jobs, uint32_t *chunk_of, uint32_t *tensor_of,
			   uint64_t *max_out, uint8_t *layouts, uint64_t *packed_bytes)
{
	const struct wspm_layer *L = &pk->m.layers[l];
	uint64_t k = 0, most = 0, at = 0;
	uint32_t n = 0;
	for (uint32_t t = L->first_tensor; t < L->first_tensor + L->n_tensors; t++) {
		const struct wspm_tensor *T = &pk->m.tensors[t];
		uint64_t dst = T->layer_offset;
		for (uint64_t c = 0; c < T->n_chunks; c++, n++) {
			const struct wspm_chunk *ch = &pk->m.chunks[T->first_chunk + c];
			pc[n] = (struct piece){ at, dst, ch->raw_bytes, t, (uint32_t)c, ch };
			dst += ch->raw_bytes;
			at = pack_packed_next(at, ch);
		}
	}
	*packed_bytes = at;
	for (uint32_t i = 0; i < n; i++) {
		const struct wspm_chunk *ch = pc[i].c;
		unsigned w = exprans_value_bytes(pk->m.tensors[pc[i].tensor].dtype);
		int decode = pack_chunk_stays_stored(ch);
		jobs[k] = (struct exprans_gpu_job){
			.in_off = pc[i].at, .out_off = pc[i].dst,
			.in_bytes = decode ? ch->stored_bytes : ch->raw_bytes,
			.n = decode && w ? ch->raw_bytes / w : 0, .width = w,
			.kind = decode ? EXPRANS_GPU_DECODE : EXPRANS_GPU_COPY,
			.flags = decode ? ch->transform : 0,
		};
		*layouts |= (uint8_t)jobs[k].flags;
		tensor_of[k] = pc[i].tensor;
		chunk_of[k] = pc[i].index;
		most = WSP_MAX(most, pc[i].raw);
		k++;
	}
	qsort(pc, n, sizeof(*pc), by_dst);
	uint64_t end = 0, raw = pk->layers[l].raw_bytes;
	for (uint32_t i = 0; i <= n; i++) {
		uint64_t next = i < n ? pc[i].dst : raw;
		if (next > end) {
			jobs[k] = (struct exprans_gpu_job){ .out_off = end, .in_bytes = next - end,
							    .kind = EXPRANS_GPU_ZERO };
			tensor_of[k] = L->first_tensor;
			chunk_of[k] = 0;
			most = WSP_MAX(most, next - end);
			k++;
		}
		if (i < n)
			end = WSP_MAX(end, pc[i].dst + pc[i].raw);
	}
	*max_out = most;
	return k;
}

void unpacker_destroy(struct unpacker *u)
{
	if (!u)
		return;
	struct dev *d = u->dev;
	for (unsigned k = 0; k < UNPACK_STAGES; k++) {
		d->ops->free(d, u->stage[k]);
		if (u->stage_free[k])
			d->ops->event_destroy(d, u->stage_free[k]);
	}
	if (u->copied)
		d->ops->event_destroy(d, u->copied);
	if (u->decoded)
		d->ops->event_destroy(d, u->decoded);
	for (uint32_t l = 0; u->kept && l < u->n_layers; l++)
		d->ops->free_async(d, DEV_Q_DECODE, u->kept[l]);
	free(u->kept);
	free(u->kept_bytes);
	free(u->uses);
	d->ops->free(d, u->jobs_dev);
	d->ops->free(d, u->status_dev);
	if (u->host_pinned)
		d->ops->unpin(d, u->status_host);
	free(u->status_host);
	free(u->job0);
	free(u->max_out);
	free(u->layouts);
	free(u->packed_bytes);
	free(u->chunk_of);
	free(u->tensor_of);
	free(u);
}

int unpacker_create(struct dev *d, const struct wsp_pack_s *pk, const struct hcache *hc,
		    uint64_t gpu_bytes, struct unpacker **out, struct wspi_err *err)
{
	uint32_t n_layers = pk->m.hdr->n_layers;
	uint64_t total = 0, max_pieces = 0, stage = 0;
	int any = 0;
	*out = NULL;
	for (uint32_t l = 0; l < n_layers; l++) {
		uint64_t c = layer_chunks(pk, l);
		total += 2 * c + 1;   /* a job a piece, a zero job a gap */
		max_pieces = WSP_MAX(max_pieces, c);
		any |= hcache_layer_packed(hc, l);
	}
	if (!any || !d->ops->unpack)
		return 0;

	struct unpacker *u = calloc(1, sizeof(*u));
	struct exprans_gpu_job *jobs = u ? malloc(total * sizeof(*jobs)) : NULL;
	struct piece *pc = malloc((max_pieces ? max_pieces : 1) * sizeof(*pc));
	int rc = 0;
	if (u) {
		u->dev = d;
		u->n_layers = n_layers;
		u->job0 = calloc((size_t)n_layers + 1, sizeof(*u->job0));
		u->max_out = calloc(n_layers ? n_layers : 1, sizeof(*u->max_out));
		u->layouts = calloc(n_layers ? n_layers : 1, sizeof(*u->layouts));
		u->packed_bytes = calloc(n_layers ? n_layers : 1, sizeof(*u->packed_bytes));
		u->chunk_of = malloc(total * sizeof(*u->chunk_of));
		u->tensor_of = malloc(total * sizeof(*u->tensor_of));
		u->status_host = aligned_alloc(4096, status_bytes(total));
		u->gpu_budget = d->ops->alloc_async ? gpu_bytes : 0;
		u->kept = calloc(n_layers ? n_layers : 1, sizeof(*u->kept));
		u->kept_bytes = calloc(n_layers ? n_layers : 1, sizeof(*u->kept_bytes));
		u->uses = calloc(n_layers ? n_layers : 1, sizeof(*u->uses));
	}
	if (!u || !jobs || !pc || !u->job0 || !u->max_out || !u->layouts || !u->packed_bytes ||
	    !u->chunk_of ||
	    !u->tensor_of ||
	    !u->status_host || !u->kept || !u->kept_bytes || !u->uses) {
		free(jobs);
		free(pc);
		unpacker_destroy(u);
		return WSP_ERR(err, -ENOMEM, "GPU decode: out of memory for the job tables");
	}
	/* Every layer has jobs: those the host tier keeps packed for its
	 * fills, every one for fills from device memory (unpacker_fill_device). */
	uint64_t k = 0;
	for (uint32_t l = 0; l < n_layers; l++) {
		u->job0[l] = k;
		k += layer_jobs(pk, l, pc, jobs + k, u->chunk_of + k, u->tensor_of + k,
				&u->max_out[l], &u->layouts[l], &u->packed_bytes[l]);
		uint64_t bytes = u->packed_bytes[l];
		if (hcache_layer_packed(hc, l)) {
			if (hcache_layer_bytes(hc, l) != bytes) {
				rc = WSP_ERR(err, WSP_ESTATE, "layer %u: the host tier keeps %" PRIu64
					     " packed bytes, the packed form has %" PRIu64, l,
					     hcache_layer_bytes(hc, l), bytes);
				goto fail;
			}
			stage = WSP_MAX(stage, bytes);
		}
	}
	u->job0[n_layers] = k;
	u->n_jobs = k;
	u->stage_bytes = wspi_align_up(stage ? stage : 1, 256);
	memset(u->status_host, 0, status_bytes(k));
	for (unsigned q = 0; q < UNPACK_STAGES; q++)
		if ((rc = d->ops->alloc(d, u->stage_bytes, &u->stage[q], err)) < 0 ||
		    (rc = d->ops->event_create(d, 0, &u->stage_free[q], err)) < 0)
			goto fail;
	if ((rc = d->ops->alloc(d, k * sizeof(*jobs), (void **)&u->jobs_dev, err)) < 0 ||
	    (rc = d->ops->alloc(d, status_bytes(k), (void **)&u->status_dev, err)) < 0 ||
	    (rc = d->ops->event_create(d, 0, &u->copied, err)) < 0 ||
	    (rc = d->ops->event_create(d, 0, &u->decoded, err)) < 0 ||
	    (rc = d->ops->unpack(d, DEV_Q_DECODE, NULL, NULL, NULL, 0, 0, 0, NULL, NULL, NULL,
				 err)) < 0)
		goto fail;
	/* Status words copied into pageable memory would make each fill wait
	 * for its decode: said by the pager (unpacker_pinned), not fatal.
	 * Pinned, a kernel after the decode stores them (host_view): a memset
	 * before each decode and a device->host copy after it cost the link's
	 * host->device copies ~3% of their rate (bench/gpu_bench --codec
	 * exprans: 95-96% of the ceiling over the link, now 98-99%). */
	struct wspi_err pin_err;
	wspi_err_init(&pin_err);
	u->host_pinned = d->ops->pin(d, u->status_host, status_bytes(k), &pin_err) == 0;
	wspi_err_destroy(&pin_err);
	if (u->host_pinned && d->ops->host_view)
		u->status_view = d->ops->host_view(d, u->status_host);
	/* The tables go up once, synchronously (the copy stream is idle),
	 * and the status words start at zero (status_host is). */
	if ((rc = d->ops->copy_h2d(d, u->jobs_dev, jobs, k * sizeof(*jobs), err)) < 0 ||
	    (rc = d->ops->copy_h2d(d, u->status_dev, u->status_host, status_bytes(k), err)) < 0 ||
	    (rc = d->ops->sync_copy(d, err)) < 0)
		goto fail;
	free(jobs);
	free(pc);
	*out = u;
	return 0;
fail:
	wspi_err_prefix(err, "GPU decode of packed layers");
	free(jobs);
	free(pc);
	unpacker_destroy(u);
	return rc;
}

int unpacker_pinned(const struct unpacker *u)
{
	return u->host_pinned;
}

/* Room in the GPU tier for layer l's `bytes`: 1 when there is (after
 * displacing layers filled less often than l; freed in the order of
 * decode queue dq, after the decodes on either queue that read them), 0
 * when not.  -errno when the queues cannot be ordered. */
static int gpu_tier_room(struct unpacker *u, uint32_t l, uint64_t bytes, int dq,
			 struct wspi_err *err)
{
	struct dev *d = u->dev;
	int ordered = 0, rc;
	if (bytes > u->gpu_budget)
		return 0;
	while (u->gpu_resident + bytes > u->gpu_budget) {
		uint32_t v = UINT32_MAX;
		for (uint32_t k = 0; k < u->n_layers; k++)
			if (u->kept[k] && (v == UINT32_MAX || u->uses[k] < u->uses[v]))
				v = k;
		if (v == UINT32_MAX || u->uses[v] >= u->uses[l])
			return 0;
		/* v's last decode may be on the other queue. */
		for (int k = 0; k < DEV_DECODE_QUEUES && !ordered; k++)
			if (DEV_Q_DECODE + k != dq &&
			    ((rc = d->ops->record(d, u->decoded, DEV_Q_DECODE + k, NULL, err)) < 0 ||
			     (rc = d->ops->wait(d, dq, NULL, u->decoded, err)) < 0))
				return rc;
		ordered = 1;
		d->ops->free_async(d, dq, u->kept[v]);
		u->kept[v] = NULL;
		u->gpu_resident -= u->kept_bytes[v];
	}
	return 1;
}

/* Where layer l's packed bytes go for a fill decoding on queue k: a new
 * GPU-tier buffer when the tier takes it, else the next staging buffer
 * (*stage then says which, else -1). */
static int packed_home(struct unpacker *u, uint32_t l, uint64_t bytes, unsigned k, void **dst,
		       int *stage, struct wspi_err *err)
{
	struct dev *d = u->dev;
	int rc;
	*stage = -1;
	if (u->gpu_budget && (rc = gpu_tier_room(u, l, bytes, DEV_Q_DECODE + (int)k, err)) != 0) {
		if (rc < 0)
			return rc;
		struct wspi_err quiet;
		wspi_err_init(&quiet);
		rc = d->ops->alloc_async(d, DEV_Q_COPY, bytes, dst, &quiet);
		wspi_err_destroy(&quiet);
		if (rc == 0) {   /* else out of device memory: stage it instead */
			u->kept[l] = *dst;
			u->kept_bytes[l] = bytes;
			u->gpu_resident += bytes;
			return 0;
		}
	}
	/* The staging buffer is free once the decode that read it is done. */
	unsigned s = u->next_stage;
	if (u->stage_used[s] && (rc = d->ops->wait(d, DEV_Q_COPY, NULL, u->stage_free[s], err)) < 0)
		return rc;
	u->next_stage = (s + 1) % UNPACK_STAGES;
	*dst = u->stage[s];
	*stage = (int)s;
	return 0;
}

/* On decode queue k, at its current point: layer l's jobs from its packed
 * form at src into slot. */
static int decode(struct unpacker *u, unsigned k, const void *src, void *slot, uint32_t l,
		  struct wspi_err *err)
{
	struct dev *d = u->dev;
	uint64_t j0 = u->job0[l], n = u->job0[l + 1] - j0, row = j0 + k * u->n_jobs;
	return d->ops->unpack(d, DEV_Q_DECODE + (int)k, src, slot, u->jobs_dev + j0, (unsigned)n,
			      u->layouts[l], u->max_out[l], u->status_dev + row, u->status_host + row,
			      u->status_view ? u->status_view + row : NULL, err);
}

/* Decode queue k after the copy queue's current point (the copy, and the
 * waits for the slot's releases that slots_fill put there). */
static int after_copy(struct unpacker *u, unsigned k, struct wspi_err *err)
{
	struct dev *d = u->dev;
	int rc = d->ops->record(d, u->copied, DEV_Q_COPY, NULL, err);
	return rc < 0 ? rc : d->ops->wait(d, DEV_Q_DECODE + (int)k, NULL, u->copied, err);
}

int unpacker_fill(struct unpacker *u, void *slot, const struct hcache_ref *ref,
		  uint64_t *copied, int *queue, struct wspi_err *err)
{
	struct dev *d = u->dev;
	uint32_t l = ref->layer;
	int rc, stage = -1;
	void *src = u->kept[l];
	unsigned k = u->next;
	int dq = DEV_Q_DECODE + (int)k;
	*copied = 0;
	*queue = dq;
	if (ref->bytes > u->stage_bytes || u->job0[l + 1] == u->job0[l])
		return WSP_ERR(err, WSP_ESTATE, "layer %u: packed form of %" PRIu64 " bytes has no "
			       "job table or exceeds the staging buffers (%" PRIu64 ")", l,
			       ref->bytes, u->stage_bytes);
	if (u->gpu_budget && ++u->fills % ((uint64_t)AGE_FILLS * u->n_layers) == 0)
		for (uint32_t i = 0; i < u->n_layers; i++)
			u->uses[i] /= 2;
	u->uses[l]++;
	u->next = (k + 1) % DEV_DECODE_QUEUES;
	if (src) {
		u->hits++;   /* on the GPU already: no copy */
	} else if ((rc = packed_home(u, l, ref->bytes, k, &src, &stage, err)) < 0 ||
		   (rc = copy_ref_pages(d, src, ref, ref->bytes, err)) < 0) {
		return rc;
	} else {
		*copied = ref->bytes;
	}
	if ((rc = after_copy(u, k, err)) < 0 || (rc = decode(u, k, src, slot, l, err)) < 0)
		return rc;
	if (stage >= 0) {
		if ((rc = d->ops->record(d, u->stage_free[stage], dq, NULL, err)) < 0)
			return rc;
		u->stage_used[stage] = 1;
	}
	return 0;
}

int unpacker_fills_from_device(const struct unpacker *u, uint32_t layer)
{
	return u && u->job0[layer + 1] > u->job0[layer];
}

uint64_t unpacker_packed_bytes(const struct unpacker *u, uint32_t layer)
{
	return u->packed_bytes[layer];
}

int unpacker_device_queue(const struct unpacker *u)
{
	return DEV_Q_DECODE + (int)u->next;
}

int unpacker_fill_device(struct unpacker *u, void *slot, uint32_t layer, const void *packed,
			 int *queue, struct wspi_err *err)
{
	unsigned k = u->next;
	*queue = DEV_Q_DECODE + (int)k;
	if (!unpacker_fills_from_device(u, layer))
		return WSP_ERR(err, -ENOTSUP, "layer %u has nothing to decode", layer);
	u->next = (k + 1) % DEV_DECODE_QUEUES;
	return decode(u, k, packed, slot, layer, err);
}

void unpacker_reset_counters(struct unpacker *u)
{
	if (u)
		u->hits = 0;
}

void unpacker_counters(const struct unpacker *u, uint64_t *hits, uint64_t *bytes)
{
	*hits = u ? u->hits : 0;
	*bytes = u ? u->gpu_resident : 0;
}

uint32_t unpacker_check(struct unpacker *u, const struct wsp_pack_s *pk, uint32_t layer,
			int queue, char *msg, size_t len)
{
	const uint32_t *row = u->status_host + (uint64_t)(queue - DEV_Q_DECODE) * u->n_jobs;
	for (uint64_t j = u->job0[layer]; j < u->job0[layer + 1]; j++) {
		uint32_t st = __atomic_load_n(&row[j], __ATOMIC_ACQUIRE);
		if (!st)
			continue;
		snprintf(msg, len, "layer %s, tensor %s, chunk %u: the GPU decoder refused it: %s",
			 pk->layers[layer].name, wspm_str(&pk->m, pk->m.tensors[u->tensor_of[j]].name_off),
			 u->chunk_of[j], exprans_gpu_status_text(st));
		return st;
	}
	return 0;
}
