/* The landing ring (src/train/ring.c): gradients copied out in chunks
 * through a few small buffers and widened as each lands give the same
 * bits as widening each tensor whole, whatever the dtype, however the
 * tensors fall across chunks and however often the ring wraps; a copy or
 * a wait that fails is returned, with nothing of the ring left in use, and
 * the ring lands exactly again afterwards.  Calls issued one after the
 * other without waiting land each its own jobs, and a copy refused in a
 * later call fails that call's wait, not an earlier one's.  Then the same through the
 * pager: pushes with chunks far smaller than the tensors sum exactly, as
 * they do with no ring.  Host backend. */
#include <inttypes.h>
#include <string.h>
#include <unistd.h>

#include "../gpu/pager_util.h"
#include "gpu/device.h"
#include "train/ring.h"
#include "train/tofloat.h"

/* A device that is the host, but whose copies (or waits) fail from the
 * n-th on. */
static struct dev_ops failing_ops;
static const struct dev_ops *host_ops;
static int copies_left, syncs_left;

static int failing_copy(struct dev *d, int q, void *dst, const void *src, uint64_t len,
			struct wspi_err *err)
{
	if (copies_left-- <= 0)
		return WSP_ERR(err, -EIO, "copy refused by the test");
	return host_ops->copy_d2h(d, q, dst, src, len, err);
}

static int failing_sync(struct dev *d, struct dev_event *ev, struct wspi_err *err)
{
	if (syncs_left-- <= 0)
		return WSP_ERR(err, -EIO, "wait refused by the test");
	return host_ops->event_sync(d, ev, err);
}

/* Issue, then wait: every job in its accumulator, or the first error with
 * nothing of the ring in use. */
static int ring_land(struct wb_ring *r, const struct ring_job *jobs, uint32_t n_jobs,
		     struct wspi_err *err)
{
	uint64_t end;
	int rc = wb_ring_issue(r, jobs, n_jobs, &end, err);
	struct wspi_err e;
	wspi_err_init(&e);
	int waited = wb_ring_wait(r, end, rc < 0 ? &e : err);
	wspi_err_destroy(&e);
	return rc < 0 ? rc : waited;
}

static const enum wsp_dtype DTYPES[] = { WSP_DTYPE_BF16, WSP_DTYPE_F16, WSP_DTYPE_F32 };

struct batch {
	struct ring_job jobs[100];
	void *src[100];
	float *want[100];
	uint32_t n;
};

/* n jobs of sizes and dtypes drawn from `seed` (some empty, some of one
 * element, some across many chunks), each dst full of a pattern no
 * widening gives; with `add`, jobs that add into dst, full of sums of
 * earlier gradients. */
static void batch_make_as(struct batch *b, uint32_t n, unsigned seed, int add)
{
	uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
	b->n = n;
	for (uint32_t j = 0; j < n; j++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		uint64_t len = x % 5 == 0 ? x % 3 : x % 20011;
		enum wsp_dtype dt = DTYPES[(x >> 11) % 3];
		unsigned esize = wsp_dtype_bits(dt) / 8;
		uint16_t *src = malloc(len * esize + 4);
		CHECK(src != NULL);
		t_fill_grad(src, len * esize / 2, j, seed, 0);
		float *dst = malloc(len * 4 + 4), *want = malloc(len * 4 + 4);
		CHECK(dst && want);
		memset(dst, 0x7f, len * 4);
		if (add) {   /* an earlier gradient's values, then this one added */
			uint16_t *before = malloc(len * 2 + 2);
			CHECK(before != NULL);
			t_fill_grad(before, len, j, seed, 1);
			wb_accumulate(dst, before, WSP_DTYPE_BF16, len, 1);
			free(before);
			memcpy(want, dst, len * 4);
		}
		wb_accumulate(want, src, dt, len, !add);   /* the tensor widened whole */
		b->jobs[j] = (struct ring_job){ dst, src, len, dt, add };
		b->src[j] = src;
		b->want[j] = want;
	}
}

static void batch_make(struct batch *b, uint32_t n, unsigned seed)
{
	batch_make_as(b, n, seed, 0);
}

static int batch_check(const struct batch *b, const char *what)
{
	for (uint32_t j = 0; j < b->n; j++)
		if (!t_same_floats(b->jobs[j].dst, b->want[j], b->jobs[j].n, what))
			return 0;
	return 1;
}

static void batch_free(struct batch *b)
{
	for (uint32_t j = 0; j < b->n; j++) {
		free(b->jobs[j].dst);
		free(b->src[j]);
		free(b->want[j]);
	}
}

/* The host device, and in *fake the same whose copies and waits fail
 * once copies_left / syncs_left run out (neither does until set). */
static struct dev *host_and_failing(struct dev *fake)
{
	struct dev *d;
	struct wspi_err e;
	wspi_err_init(&e);
	CHECK_RC(dev_host_open(&d, &e), 0);
	wspi_err_destroy(&e);
	host_ops = d->ops;
	failing_ops = *d->ops;
	failing_ops.copy_d2h = failing_copy;
	failing_ops.event_sync = failing_sync;
	*fake = *d;
	fake->ops = &failing_ops;
	copies_left = syncs_left = 1 << 30;
	return d;
}

static void ring_alone(void)
{
	struct dev fake;
	struct dev *d = host_and_failing(&fake);
	struct wspi_err e;
	wspi_err_init(&e);

	/* Chunks of 320 bytes: 160 bf16, 80 fp32; the ring wraps every 32. */
	wspi_ring_chunk_bytes = 320;
	for (unsigned threads = 1; threads <= 5; threads += 4) {
		struct wb_ring *r;
		CHECK_RC(wb_ring_create(d, threads, &r, &e), 0);
		for (unsigned round = 0; round < 12; round++) {
			struct batch b;
			batch_make_as(&b, round % 3 ? 7 + round : 100, round * 10 + threads,
				      round % 2);
			CHECK_RC(ring_land(r, b.jobs, b.n, &e), 0);
			CHECK(batch_check(&b, round % 2 ? "ring, adding" : "ring"));
			batch_free(&b);
		}
		CHECK_RC(ring_land(r, NULL, 0, &e), 0);
		wb_ring_destroy(r);
	}

	/* Failures: a copy refused after some chunks, a wait refused; each
	 * returns its error, and the same ring then lands exactly. */
	struct wb_ring *r;
	CHECK_RC(wb_ring_create(&fake, 3, &r, &e), 0);
	for (int which = 0; which < 2; which++) {
		struct batch b;
		batch_make(&b, 40, 500 + which);
		copies_left = which == 0 ? 45 : 1 << 30;
		syncs_left = which == 1 ? 70 : 1 << 30;
		wspi_err_init(&e);
		int rc = ring_land(r, b.jobs, b.n, &e);
		CHECK(rc == -EIO);
		CHECK(strstr(e.msg, which == 0 ? "copy refused" : "wait refused") != NULL);
		wspi_err_destroy(&e);
		batch_free(&b);
		copies_left = syncs_left = 1 << 30;
		batch_make(&b, 30, 600 + which);
		wspi_err_init(&e);
		CHECK_RC(ring_land(r, b.jobs, b.n, &e), 0);
		CHECK(batch_check(&b, "ring after a failure"));
		batch_free(&b);
	}
	wb_ring_destroy(r);
	dev_close(d);
	wspi_err_destroy(&e);
}

/* Calls issued back to back, waited for later: each lands its own jobs; a
 * refused copy in the second fails its wait (and the third call, issued
 * before the failure was returned), not the first's; the ring then lands
 * again. */
static void ring_across_calls(void)
{
	struct dev fake;
	struct dev *d = host_and_failing(&fake);
	struct wspi_err e;
	wspi_err_init(&e);
	wspi_ring_chunk_bytes = 320;
	struct wb_ring *r;
	CHECK_RC(wb_ring_create(&fake, 3, &r, &e), 0);

	struct batch b[3];
	uint64_t end[3];
	for (int k = 0; k < 3; k++) {
		batch_make(&b[k], 12 + k, 700 + k);
		CHECK_RC(wb_ring_issue(r, b[k].jobs, b[k].n, &end[k], &e), 0);
		CHECK(k == 0 || end[k] >= end[k - 1]);
	}
	CHECK(wb_ring_progress(r, 0) <= end[2]);
	CHECK_RC(wb_ring_wait(r, end[0], &e), 0);
	CHECK(batch_check(&b[0], "the first of three calls"));
	CHECK_RC(wb_ring_wait(r, end[2], &e), 0);
	CHECK(batch_check(&b[1], "the second of three calls"));
	CHECK(batch_check(&b[2], "the third of three calls"));
	CHECK(wb_ring_progress(r, 1) == end[2]);   /* nothing in flight: at once */
	for (int k = 0; k < 3; k++)
		batch_free(&b[k]);

	/* The second call's copies refused from its first (the first call's
	 * last chunks still in flight) and from its 26th. */
	for (int left = 0; left <= 25; left += 25) {
		for (int k = 0; k < 3; k++)
			batch_make(&b[k], 20, 800 + k + left);
		CHECK_RC(wb_ring_issue(r, b[0].jobs, b[0].n, &end[0], &e), 0);
		copies_left = left;
		wspi_err_destroy(&e);
		wspi_err_init(&e);
		CHECK(wb_ring_issue(r, b[1].jobs, b[1].n, &end[1], &e) == -EIO);
		CHECK(strstr(e.msg, "copy refused") != NULL);
		copies_left = 1 << 30;
		wspi_err_destroy(&e);
		wspi_err_init(&e);
		CHECK(wb_ring_issue(r, b[2].jobs, b[2].n, &end[2], &e) == -EIO);
		CHECK(end[2] == end[1]);
		wspi_err_destroy(&e);
		wspi_err_init(&e);
		CHECK_RC(wb_ring_wait(r, end[0], &e), 0);
		CHECK(batch_check(&b[0], "a call before a failed one"));
		CHECK(wb_ring_wait(r, end[1], &e) == -EIO);
		CHECK(strstr(e.msg, "copy refused") != NULL);
		for (int k = 0; k < 3; k++)
			batch_free(&b[k]);
	}
	batch_make(&b[0], 30, 900);
	wspi_err_destroy(&e);
	wspi_err_init(&e);
	CHECK_RC(ring_land(r, b[0].jobs, b[0].n, &e), 0);
	CHECK(batch_check(&b[0], "after a failed call"));
	batch_free(&b[0]);
	wb_ring_destroy(r);
	dev_close(d);
	wspi_err_destroy(&e);
}

/* "Done up to n" means every chunk below n is in its accumulator, though
 * threads finish chunks out of order: a call's jobs read back as soon as
 * wb_ring_progress passes its end are whole while the next call's chunks
 * still widen (a caller then adds into them). */
static uint64_t held_chunk = UINT64_MAX;

static void hold_back(uint64_t chunk)
{
	if (chunk == held_chunk)
		usleep(20000);   /* every later chunk is widened meanwhile */
}

static void ring_done_in_order(void)
{
	struct dev *d;
	struct wspi_err e;
	wspi_err_init(&e);
	CHECK_RC(dev_host_open(&d, &e), 0);
	wspi_ring_chunk_bytes = 320;
	struct wb_ring *r;
	CHECK_RC(wb_ring_create(d, 6, &r, &e), 0);
	wspi_ring_part_hook = hold_back;
	uint64_t issued = 0;
	for (unsigned round = 0; round < 20; round++) {
		struct batch b[2];
		uint64_t end[2];
		/* Calls of a few chunks each (the ring never waits for a buffer
		 * here): a chunk of the first (one of its last two) held back
		 * before its widening */
		for (int k = 0; k < 2; k++) {
			batch_make(&b[k], 2, 1000 + 2 * round + k);
			for (uint32_t j = 0; j < b[k].n; j++)
				b[k].jobs[j].n %= 240;
		}
		uint64_t chunks = 0, later = 0;
		for (int k = 0; k < 2; k++)
			for (uint32_t j = 0; j < b[k].n; j++) {
				uint64_t per = 320 / (wsp_dtype_bits(b[k].jobs[j].dt) / 8);
				*(k ? &later : &chunks) += (b[k].jobs[j].n + per - 1) / per;
			}
		CHECK(chunks + later <= WB_RING_SLOTS);
		held_chunk = chunks ? issued + chunks - 1 - round % 2 * (chunks > 1) : UINT64_MAX;
		for (int k = 0; k < 2; k++)
			CHECK_RC(wb_ring_issue(r, b[k].jobs, b[k].n, &end[k], &e), 0);
		CHECK(end[0] == issued + chunks && end[1] == end[0] + later);
		issued = end[1];
		while (wb_ring_progress(r, 1) < end[0])
			;
		CHECK(batch_check(&b[0], "a call read back once done, the next still landing"));
		CHECK_RC(wb_ring_wait(r, end[1], &e), 0);
		CHECK(batch_check(&b[1], "the call after it"));
		for (int k = 0; k < 2; k++)
			batch_free(&b[k]);
	}
	wspi_ring_part_hook = NULL;
	wb_ring_destroy(r);
	dev_close(d);
	wspi_err_destroy(&e);
}

/* Through the pager: per layer a push of every tensor, then a second push
 * added to it, then after zeroing a push tensor by tensor; the sums
 * checked against the widened values each time.  chunk 0: no ring. */
static void through_pager(uint64_t chunk)
{
	struct t_model m;
	struct wsp_options o;
	char err[512];
	wsp_pager *pg;
	wsp_pack *pk;
	struct wsp_grads gr;
	wspi_ring_chunk_bytes = chunk;
	t_model_make(&m, "ring", 3, 256, 512);
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	t_host_options(&o, &m, 100, 3);
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	uint32_t n_layers = m.sum.n_layers;
	for (uint32_t l = 0; l < n_layers; l++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, l);
		CHECK(L->n_tensors <= 64);
		uint16_t *g[3][64];
		float *want[64];
		const void *ptr[64];
		for (uint32_t t = 0; t < L->n_tensors; t++) {
			uint64_t n = L->tensors[t].bytes / 2;
			CHECK(L->tensors[t].dtype == WSP_DTYPE_BF16);
			want[t] = malloc(n * 4 + 4);
			for (unsigned k = 0; k < 3; k++) {
				g[k][t] = malloc(n * 2 + 2);
				t_fill_grad(g[k][t], n, l, t, k);
			}
		}
		for (unsigned k = 0; k < 2; k++) {
			for (uint32_t t = 0; t < L->n_tensors; t++)
				ptr[t] = g[k][t];
			CHECK_RC(wsp_grad_push(pg, l, ptr, NULL), 0);
		}
		CHECK_RC(wsp_grad_get(pg, l, &gr), 0);
		CHECK(gr.pushes == 2);
		for (uint32_t t = 0; t < L->n_tensors; t++) {
			for (uint64_t i = 0; i < L->tensors[t].bytes / 2; i++)
				want[t][i] = t_bf16f(g[0][t][i]) + t_bf16f(g[1][t][i]);
			CHECK(t_same_floats(gr.data[t], want[t], L->tensors[t].bytes / 2, "two pushes"));
		}
		CHECK_RC(wsp_grad_zero(pg, l), 0);
		for (uint32_t t = 0; t < L->n_tensors; t++) {
			memset(ptr, 0, sizeof(ptr));
			ptr[t] = g[2][t];
			CHECK_RC(wsp_grad_push(pg, l, ptr, NULL), 0);
		}
		CHECK_RC(wsp_grad_get(pg, l, &gr), 0);
		CHECK(gr.pushes == L->n_tensors);
		for (uint32_t t = 0; t < L->n_tensors; t++) {
			for (uint64_t i = 0; i < L->tensors[t].bytes / 2; i++)
				want[t][i] = t_bf16f(g[2][t][i]);
			CHECK(t_same_floats(gr.data[t], want[t], L->tensors[t].bytes / 2,
					    "tensor by tensor"));
			free(want[t]);
			for (unsigned k = 0; k < 3; k++)
				free(g[k][t]);
		}
	}
	wsp_close(pg);
	wsp_pack_close(pk);
	t_model_remove(&m);
}

int main(void)
{
	ring_alone();
	ring_across_calls();
	ring_done_in_order();
	through_pager(4096 + 64);
	through_pager(0);
	return 0;
}
