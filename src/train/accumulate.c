/*
 * Adding pushed gradients into the fp32 accumulators (grads_int.h): dense
 * tensors split over up to WB_ADD_THREADS threads, landed pushes widened
 * when read or added to, rows added into their rows.  Only the worker, or
 * a reader holding the lock with nothing of the layer pending, calls
 * these: accumulators have one writer at a time.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "common/workers.h"
#include "train/grads_int.h"
#include "train/tofloat.h"

/* One pass over some tensors of a layer laid out as a staging buffer is (each at a
 * WB_ALIGN-aligned offset of `src`): which[i] selects tensor i, first[i]
 * assigns instead of adding.  One thread takes the same slice [part/parts]
 * of each (elementwise, so the split never changes a result). */
struct acc_part {
	struct wb *wb;
	uint32_t layer;
	const uint8_t *src, *which, *first;
	unsigned part, parts;
};

static void *accumulate_part(void *arg)
{
	struct acc_part *p = arg;
	const struct wsp_layer *L = &p->wb->pk->layers[p->layer];
	struct wb_layer *wl = &p->wb->layers[p->layer];
	const uint8_t *src = p->src;
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		const struct wsp_tensor *t = &L->tensors[i];
		if (p->which[i]) {   /* a float tensor (wb_dtype_ok) */
			unsigned esize = wsp_dtype_bits(t->dtype) / 8;
			uint64_t n = t->bytes / esize;
			uint64_t per = (n + p->parts - 1) / p->parts;
			uint64_t a = WSP_MIN(n, per * p->part), b = WSP_MIN(n, a + per);
			wb_accumulate(wl->acc[i] + a, src + a * esize, t->dtype, b - a, p->first[i]);
		}
		src += wspi_align_up(t->bytes, WB_ALIGN);
	}
	return NULL;
}

/* Bits, not bytes, per element: F4 and F6 hold less than a byte each (the
 * manifest's check gave every tensor a known dtype and whole bytes). */
uint64_t wb_tensor_elements(const struct wsp_tensor *t)
{
	return t->bytes * 8 / wsp_dtype_bits(t->dtype);
}

float *wb_acc_alloc(uint64_t n)
{
	/* One more element: never a zero-byte allocation. */
	uint64_t bytes = n * 4 + 4;
	if (bytes >= WB_PIN_MIN_BYTES)
		return aligned_alloc(4096, wspi_align_up(bytes, 4096));
	return aligned_alloc(WB_ALIGN, wspi_align_up(bytes, WB_ALIGN));
}

/* Widen or add the selected tensors of `src` into the layer's accumulators,
 * then mark them HAS_SUM.  Large layers are split over up to WB_ADD_THREADS
 * threads.  Only the worker, or a reader holding the lock with nothing of
 * the layer pending, calls it: accumulators have one writer at a time. */
static int accumulate(struct wb *wb, uint32_t layer, const void *src, const uint8_t *which,
		      const uint8_t *first, struct wspi_err *err)
{
	const struct wsp_layer *L = &wb->pk->layers[layer];
	struct wb_layer *wl = &wb->layers[layer];
	uint64_t elements = 0;
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		if (!which[i])
			continue;
		uint64_t n = wb_tensor_elements(&L->tensors[i]);
		elements += n;
		if (!wl->acc[i] && !(wl->acc[i] = wb_acc_alloc(n)))
			return WSP_ERR(err, -ENOMEM, "write-back: out of memory for the fp32 "
				       "gradient of %s (%" PRIu64 " elements)", L->tensors[i].name, n);
	}
	if (!elements)
		return 0;
	unsigned parts = (unsigned)WSP_MIN((uint64_t)wb->add_threads,
					   elements / WB_ADD_MIN_ELEMENTS + 1);
	struct acc_part part[WB_ADD_THREADS];
	for (unsigned k = 0; k < parts; k++)
		part[k] = (struct acc_part){ wb, layer, src, which, first, k, parts };
	wspi_run_parts(accumulate_part, part, sizeof(part[0]), parts);
	for (uint32_t i = 0; i < L->n_tensors; i++)
		if (which[i])
			wl->has[i] = HAS_SUM;
	return 0;
}

/* Widen the landed tensors of a layer into its accumulators; which and
 * first: scratch of max_tensors bytes (the worker's, or the reader's). */
int wb_widen_landed(struct wb *wb, uint32_t layer, uint8_t *which, uint8_t *first,
			struct wspi_err *err)
{
	const struct wsp_layer *L = &wb->pk->layers[layer];
	struct wb_layer *wl = &wb->layers[layer];
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		which[i] = wl->has[i] == HAS_LANDED;
		first[i] = 1;
	}
	return accumulate(wb, layer, wl->land, which, first, err);
}

struct zero_part {
	float *p;
	uint64_t n;
};

static void *zero_part(void *arg)
{
	struct zero_part *z = arg;
	memset(z->p, 0, z->n * 4);
	return NULL;
}

/* Zero n floats, split over up to `threads` threads (a large accumulator
 * is zeroed at memory speed, not one core's). */
void wb_zero_floats(float *p, uint64_t n, unsigned threads)
{
	unsigned parts = (unsigned)WSP_MIN((uint64_t)threads, n / WB_ADD_MIN_ELEMENTS + 1);
	uint64_t per = (n + parts - 1) / parts;
	struct zero_part z[WB_ADD_THREADS];
	for (unsigned k = 0; k < parts; k++) {
		uint64_t a = WSP_MIN(n, per * k);
		z[k] = (struct zero_part){ p + a, WSP_MIN(n - a, per) };
	}
	wspi_run_parts(zero_part, z, sizeof(z[0]), parts);
}

/* Make tensor i's accumulator hold a sum, so that rows can be added into
 * it: a landed push is widened, a stale or never-made accumulator zeroed
 * (unless the worker cleared it ahead).  Returns 1 when it holds zeros
 * from here on (nothing was pushed since zeroing), 0 when it already held
 * a sum. */
static int as_sum(struct wb *wb, uint32_t layer, uint32_t i, struct wspi_err *err)
{
	struct wb_layer *wl = &wb->layers[layer];
	const struct wsp_tensor *t = &wb->pk->layers[layer].tensors[i];
	uint8_t *which = wb->scratch, *first = wb->scratch + wb->max_tensors;
	if (wl->has[i] == HAS_SUM)
		return 0;
	if (wl->has[i] == HAS_LANDED)
		return wb_widen_landed(wb, layer, which, first, err);
	if (wl->has[i] == HAS_CLEARED) {
		wl->has[i] = HAS_SUM;
		return 1;
	}
	uint64_t n = wb_tensor_elements(t);
	if (!wl->acc[i] && !(wl->acc[i] = wb_acc_alloc(n)))
		return WSP_ERR(err, -ENOMEM, "write-back: out of memory for the fp32 gradient of %s "
			       "(%" PRIu64 " elements)", t->name, n);
	wb_zero_floats(wl->acc[i], n, wb->add_threads);
	wl->has[i] = HAS_SUM;
	return 1;
}

/* One thread's share of a push of rows: the listed rows of its groups of
 * 8 (group g is part g % parts's), in the order listed; so each thread owns
 * its bytes of `seen`.  The values land in pieces (piece 0, the first
 * piece_rows listings, is in): a thread waits for the piece of a row it
 * adds, so that a list sorted by row, as an embedding's is, is added while
 * its later pieces still land.  Groups dealt out in turn, not ranges of
 * rows: every piece of a sorted list is shared by all the threads, and the
 * last to land is added by all of them at once. */
struct rows_part {
	float *acc;
	const int64_t *rows;
	const uint8_t *values;
	uint64_t n_rows, row_elems;
	enum wsp_dtype dt;
	uint8_t *seen;             /* first listings since zeroing; NULL: all add */
	unsigned part, parts;
	const struct wb_push_s *push;   /* its pieces' events */
	struct dev *dev;
	int rc;                    /* a failed wait for a piece */
};

static void *rows_part(void *arg)
{
	struct rows_part *p = arg;
	unsigned esize = wsp_dtype_bits(p->dt) / 8;
	uint64_t landed = 0;   /* pieces up to here are in */
	for (uint64_t k = 0; k < p->n_rows; k++) {
		int64_t r = p->rows[k];
		if (r < 0 || (uint64_t)r / 8 % p->parts != p->part)   /* padding, or another's */
			continue;
		uint64_t piece = k / p->push->piece_rows;
		if (piece > landed) {
			if ((p->rc = p->dev->ops->event_sync(p->dev, wb_piece_event(p->push, piece),
							     NULL)) < 0)
				return NULL;
			landed = piece;
		}
		int first = p->seen && !(p->seen[r / 8] >> (r % 8) & 1);
		if (p->seen)
			p->seen[r / 8] |= (uint8_t)(1u << (r % 8));
		wb_accumulate(p->acc + (uint64_t)r * p->row_elems,
			      p->values + k * p->row_elems * esize, p->dt, p->row_elems, first);
	}
	return NULL;
}

/* The worker's part of a push of rows: each listed row added into the
 * tensor's accumulator (a row listed twice is added twice, as index_add
 * would); negative entries are padding.  Into a fresh accumulator a row's
 * first listing is assigned, as a first dense push is, so that the two
 * give the same bits (-0 included).  The rows are checked first, so that
 * a bad one changes nothing; then split by row over the adding threads
 * (each row's listings stay in order on one thread: the same bits). */
static int add_rows(struct wb *wb, struct wb_push_s *p, struct wspi_err *err)
{
	const struct wsp_tensor *t = &wb->pk->layers[p->layer].tensors[p->rows_tensor];
	uint64_t row_elems = wb_tensor_elements(t) / t->shape[0];
	const int64_t *rows = p->buf->mem;
	const uint8_t *values = (const uint8_t *)p->buf->mem + wspi_align_up(p->n_rows * 8, WB_ALIGN);
	for (uint64_t k = 0; k < p->n_rows; k++)
		if (rows[k] >= 0 && (uint64_t)rows[k] >= t->shape[0])
			return WSP_ERR(err, -EINVAL, "gradient rows of %s: row %" PRId64 " listed, "
				       "the tensor has %" PRIu64, t->name, rows[k], t->shape[0]);
	int fresh = as_sum(wb, p->layer, p->rows_tensor, err);
	if (fresh < 0)
		return fresh;
	uint8_t *seen = fresh ? calloc(t->shape[0] / 8 + 1, 1) : NULL;
	if (fresh && !seen)
		return WSP_ERR(err, -ENOMEM, "write-back: out of memory");
	unsigned parts = (unsigned)WSP_MIN((uint64_t)wb->add_threads,
					   p->n_rows * row_elems / WB_ADD_MIN_ELEMENTS + 1);
	struct rows_part part[WB_ADD_THREADS];
	for (unsigned k = 0; k < parts; k++)
		part[k] = (struct rows_part){ wb->layers[p->layer].acc[p->rows_tensor], rows, values,
					      p->n_rows, row_elems, t->dtype, seen, k, parts, p,
					      wb->dev, 0 };
	wspi_run_parts(rows_part, part, sizeof(part[0]), parts);
	free(seen);
	for (unsigned k = 0; k < parts; k++)
		if (part[k].rc < 0)
			return WSP_ERR(err, part[k].rc, "write-back: gradient rows of %s: waiting "
				       "for their copy out of the device failed", t->name);
	return 0;
}

/* add_rows, and every piece in before the staging buffer is reused,
 * whatever happened (a piece of padding alone is waited for by no
 * thread). */
static int apply_rows(struct wb *wb, struct wb_push_s *p, struct wspi_err *err)
{
	int rc = add_rows(wb, p, err);
	int landed = wb->dev->ops->event_sync(wb->dev, p->copied, rc < 0 ? NULL : err);
	return rc < 0 ? rc : landed;
}

/* One slice of an fp32 gradient added into (or assigned to) its accumulator. */
struct f32_part {
	float *acc;
	const float *src;
	uint64_t n;
	int first;
};

static void *f32_part(void *arg)
{
	struct f32_part *f = arg;
	wb_accumulate(f->acc, f->src, WSP_DTYPE_F32, f->n, f->first);
	return NULL;
}

/* The worker's part of a push of one fp32 gradient (wb_push_f32): nothing
 * when it was copied straight into the accumulator; else it is added from
 * the staging buffer (a landed push of the tensor widened first), or
 * assigned where the accumulator holds no sum. */
static int apply_f32(struct wb *wb, struct wb_push_s *p, struct wspi_err *err)
{
	struct wb_layer *wl = &wb->layers[p->layer];
	uint32_t i = p->f32_tensor;
	int rc = 0;
	if (!p->direct) {
		uint64_t n = wb_tensor_elements(&wb->pk->layers[p->layer].tensors[i]);
		if (wl->has[i] == HAS_LANDED)
			rc = wb_widen_landed(wb, p->layer, wb->scratch, wb->scratch + wb->max_tensors,
					     err);
		if (rc == 0 && !wl->acc[i] && !(wl->acc[i] = wb_acc_alloc(n)))
			rc = WSP_ERR(err, -ENOMEM, "write-back: out of memory for the fp32 gradient "
				     "of %s (%" PRIu64 " elements)",
				     wb->pk->layers[p->layer].tensors[i].name, n);
		if (rc < 0)
			return rc;
		unsigned parts = (unsigned)WSP_MIN((uint64_t)wb->add_threads,
						   n / WB_ADD_MIN_ELEMENTS + 1);
		uint64_t per = (n + parts - 1) / parts;
		struct f32_part f[WB_ADD_THREADS];
		for (unsigned k = 0; k < parts; k++) {
			uint64_t a = WSP_MIN(n, per * k);
			f[k] = (struct f32_part){ wl->acc[i] + a, (const float *)p->buf->mem + a,
						  WSP_MIN(n - a, per), wl->has[i] != HAS_SUM };
		}
		wspi_run_parts(f32_part, f, sizeof(f[0]), parts);
	}
	wl->has[i] = HAS_SUM;
	return 0;
}

/* The tensors of pushes ps[0..n) that land through the ring, their
 * accumulators made and their chunks issued into it (*end: the ring's
 * wb_ring_wait argument; 0 where none was issued): added to a sum there,
 * else assigned (the first push since zeroing; a tensor landed whole is
 * widened first).  The pushes' events have been seen: the gradients are
 * ready; no earlier push still lands into these accumulators, so their
 * states are final. */
static int issue_rings(struct wb *wb, struct wb_push_s *const *ps, uint32_t n, uint64_t *end,
		       struct wspi_err *err)
{
	struct ring_job jobs[64];
	uint32_t n_jobs = 0;
	int rc = 0;
	*end = 0;
	for (uint32_t k = 0; rc == 0 && k < n; k++) {
		const struct wb_push_s *p = ps[k];
		const struct wsp_layer *L = &wb->pk->layers[p->layer];
		struct wb_layer *wl = &wb->layers[p->layer];
		for (uint32_t i = 0; rc == 0 && i < L->n_tensors; i++) {
			if (p->landed[i] != LAND_RING)
				continue;
			if (n_jobs == 64) {
				rc = wb_ring_issue(wb->ring, jobs, n_jobs, end, err);
				n_jobs = 0;
			}
			const struct wsp_tensor *t = &L->tensors[i];
			uint64_t elements = wb_tensor_elements(t);
			if (rc == 0 && !wl->acc[i] && !(wl->acc[i] = wb_acc_alloc(elements)))
				rc = WSP_ERR(err, -ENOMEM, "write-back: out of memory for the fp32 "
					     "gradient of %s (%" PRIu64 " elements)", t->name, elements);
			if (rc == 0 && wl->has[i] == HAS_LANDED)
				rc = wb_widen_landed(wb, p->layer, wb->scratch,
						     wb->scratch + wb->max_tensors, err);
			if (rc == 0)
				jobs[n_jobs++] = (struct ring_job){ wl->acc[i], p->ring_src[i],
								    elements, t->dtype,
								    wl->has[i] == HAS_SUM };
		}
	}
	if (rc == 0 && n_jobs)
		rc = wb_ring_issue(wb->ring, jobs, n_jobs, end, err);
	return rc;
}

void wb_rings_landed(struct wb *wb, struct wb_push_s *const *ps, uint32_t n)
{
	for (uint32_t k = 0; k < n; k++)
		for (uint32_t i = 0; i < wb->pk->layers[ps[k]->layer].n_tensors; i++)
			if (ps[k]->landed[i] == LAND_RING)
				wb->layers[ps[k]->layer].has[i] = HAS_SUM;
}

/* The worker's part of one push, but for its tensors that land through
 * the ring. */
static int apply_push(struct wb *wb, struct wb_push_s *p, struct wspi_err *err)
{
	const struct wsp_layer *L = &wb->pk->layers[p->layer];
	struct wb_layer *wl = &wb->layers[p->layer];
	uint8_t *which = wb->scratch, *first = wb->scratch + wb->max_tensors;
	int rc = 0;
	int widen = 0;
	if (p->rows_tensor != NO_ROWS)
		return apply_rows(wb, p, err);
	if (p->f32_tensor != NO_ROWS)
		return apply_f32(wb, p, err);
	for (uint32_t i = 0; i < L->n_tensors; i++)
		widen |= p->present[i] && !p->landed[i] && wl->has[i] == HAS_LANDED;
	if (widen)   /* a second push adds to a landed one: widen that first */
		rc = wb_widen_landed(wb, p->layer, which, first, err);
	/* Only this push's tensors' states are read: a push of another of the
	 * layer's tensors straight into its accumulator may be making it. */
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		which[i] = p->present[i] && !p->landed[i];
		first[i] = which[i] && wl->has[i] != HAS_SUM;
	}
	if (rc == 0 && p->buf)
		rc = accumulate(wb, p->layer, p->buf->mem, which, first, err);
	for (uint32_t i = 0; rc == 0 && i < L->n_tensors; i++)
		if (p->present[i] && p->landed[i] == LAND_BUFFER)
			wl->has[i] = HAS_LANDED;
	return rc;
}

/* The ring's tensors of all the pushes issued first, in one stream
 * through the ring, then each push's own part while they land: they are
 * distinct tensors (wb_apply_pushes' callers see to it). */
int wb_apply_pushes(struct wb *wb, struct wb_push_s *const *ps, uint32_t n, uint64_t *end,
		    struct wspi_err *err)
{
	int rc = issue_rings(wb, ps, n, end, err);
	for (uint32_t k = 0; rc == 0 && k < n; k++)
		rc = apply_push(wb, ps[k], err);
	return rc;
}
