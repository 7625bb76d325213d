/* An accumulator that takes rows (an embedding's) is cleared ahead: once
 * rows were pushed into it, zeroing its layer has the write-back's thread
 * zero it while nothing else is queued, without waiting for the next push
 * of rows (which comes at the very end of a backward) or a read.  What the
 * caller sees does not change: rows pushed after a zeroing read as the
 * dense gradient of those rows alone, bit for bit (a -0 kept, rows of the
 * earlier round gone), whether the clearing finished before the push,
 * runs beside it, or never began; so do a dense push, an fp32 push
 * straight into the accumulator, and a read with no push.  Host backend. */
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "../gpu/pager_util.h"

struct emb {
	uint64_t V, H, n;
	uint16_t *vals;   /* N rows of values */
	float *want;      /* the dense gradient of the rows, widened */
};

/* Round k's tokens: N distinct sorted rows (k shifts them, so that rounds
 * share some rows and not others); the values' first element of each row
 * is -0 (t_fill_grad), which only an assignment keeps. */
enum { N = 12 };
static void round_rows(struct emb *e, unsigned k, int64_t *rows)
{
	for (unsigned j = 0; j < N; j++)
		rows[j] = (int64_t)((j * 37 + k * 5) % e->V);
	for (unsigned a = 1; a < N; a++)   /* sorted, as a caller sends them */
		for (unsigned b = a; b > 0 && rows[b - 1] > rows[b]; b--) {
			int64_t t = rows[b];
			rows[b] = rows[b - 1];
			rows[b - 1] = t;
		}
	for (unsigned j = 1; j < N; j++)
		if (rows[j] == rows[j - 1])
			rows[j] = -1;
	memset(e->want, 0, e->n * 4);
	for (unsigned j = 0; j < N; j++) {
		t_fill_grad(e->vals + j * e->H, e->H, 0, j, k);
		if (rows[j] >= 0)
			for (uint64_t i = 0; i < e->H; i++)
				e->want[(uint64_t)rows[j] * e->H + i] = t_bf16f(e->vals[j * e->H + i]);
	}
}

static uint64_t add_ns(wsp_pager *pg)
{
	struct wsp_stats st;
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	return st.grad_add_ns;
}

/* Whether the write-back's thread clears the accumulator at `acc` (from an
 * earlier read) by itself, nothing else being queued: its adding time
 * moves past `before` within ten seconds, with no gradient call made, and
 * the accumulator then holds zeros.  (The time is counted under the lock
 * the clearing releases when done: once it moved, reading the memory is
 * no race.) */
static int cleared_without_a_call(wsp_pager *pg, const float *acc, uint64_t n, uint64_t before)
{
	struct timespec t0, now, nap = { 0, 1000000 };
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (add_ns(pg) == before) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec > 10) {
			fprintf(stderr, "nothing was cleared within 10 s\n");
			return 0;
		}
		nanosleep(&nap, NULL);
	}
	for (uint64_t i = 0; i < n; i++)
		if (acc[i] != 0.0f || signbit(acc[i])) {
			fprintf(stderr, "element %" PRIu64 " is %a after clearing\n", i, acc[i]);
			return 0;
		}
	return 1;
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	char err[512];
	wsp_pager *pg;
	wsp_pack *pk;
	struct wsp_grads gr;

	t_model_make(&m, "clear-ahead", 3, 256, 512);
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	t_host_options(&o, &m, 100, 3);
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	const struct wsp_tensor *T = &wsp_pack_layer(pk, 0)->tensors[0];
	CHECK(T->rank == 2 && T->dtype == WSP_DTYPE_BF16);
	struct emb e = { T->shape[0], T->shape[1], T->shape[0] * T->shape[1], NULL, NULL };
	e.vals = malloc(N * e.H * 2);
	e.want = malloc(e.n * 4);
	float *f32 = malloc(e.n * 4);
	int64_t rows[N];

	/* Rows once: from then on the accumulator is one to clear ahead. */
	round_rows(&e, 0, rows);
	CHECK_RC(wsp_grad_push_rows(pg, 0, 0, rows, N, e.vals, NULL), 0);
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
	CHECK(t_same_floats(gr.data[0], e.want, e.n, "first rows"));
	const float *acc = gr.data[0];

	/* Zeroed, it turns to zeros by itself; then rows go in as into a
	 * fresh accumulator. */
	uint64_t before = add_ns(pg);
	CHECK_RC(wsp_grad_zero(pg, 0), 0);
	CHECK(cleared_without_a_call(pg, acc, e.n, before));
	round_rows(&e, 1, rows);
	CHECK_RC(wsp_grad_push_rows(pg, 0, 0, rows, N, e.vals, NULL), 0);
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
	CHECK(gr.pushes == 1);
	CHECK(t_same_floats(gr.data[0], e.want, e.n, "rows after clearing ahead"));

	/* Zeroing and rows at once, many times: the push meets the clearing
	 * queued, running or done. */
	for (unsigned k = 2; k < 60; k++) {
		CHECK_RC(wsp_grad_zero(pg, k % 2 ? 0 : WSP_ALL_LAYERS), 0);
		round_rows(&e, k, rows);
		CHECK_RC(wsp_grad_push_rows(pg, 0, 0, rows, N, e.vals, NULL), 0);
		CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
		CHECK(t_same_floats(gr.data[0], e.want, e.n, "rows beside clearing"));
	}

	/* A read with no push after clearing: zeros; then a zeroing finds the
	 * accumulator read, not cleared, and rows still go in exactly. */
	before = add_ns(pg);   /* nothing since the loop's last read */
	CHECK_RC(wsp_grad_zero(pg, 0), 0);
	CHECK(cleared_without_a_call(pg, acc, e.n, before));
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
	CHECK(gr.pushes == 0);
	memset(e.want, 0, e.n * 4);
	CHECK(t_same_floats(gr.data[0], e.want, e.n, "read after clearing"));
	CHECK_RC(wsp_grad_zero(pg, 0), 0);
	round_rows(&e, 70, rows);
	CHECK_RC(wsp_grad_push_rows(pg, 0, 0, rows, N, e.vals, NULL), 0);
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
	CHECK(t_same_floats(gr.data[0], e.want, e.n, "rows after a read"));

	/* Dense pushes into a cleared (or clearing) accumulator replace it:
	 * whole bf16, and fp32 copied straight in; alternated with rows so
	 * that each zeroing has something to clear. */
	uint16_t *dense = malloc(e.n * 2);
	for (unsigned k = 0; k < 20; k++) {
		CHECK_RC(wsp_grad_zero(pg, 0), 0);
		round_rows(&e, 100 + k, rows);
		CHECK_RC(wsp_grad_push_rows(pg, 0, 0, rows, N, e.vals, NULL), 0);
		CHECK_RC(wsp_grad_zero(pg, 0), 0);
		t_fill_grad(dense, e.n, 0, 0, 200 + k);
		for (uint64_t i = 0; i < e.n; i++)
			e.want[i] = f32[i] = t_bf16f(dense[i]);
		if (k % 2) {
			CHECK_RC(wsp_grad_push_f32(pg, 0, 0, f32, NULL), 0);
		} else {
			const void *ptr[16] = { dense };
			CHECK(wsp_pack_layer(pk, 0)->n_tensors <= 16);
			CHECK_RC(wsp_grad_push(pg, 0, ptr, NULL), 0);
		}
		CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
		CHECK(gr.pushes == 1);
		CHECK(t_same_floats(gr.data[0], e.want, e.n, k % 2 ? "fp32 after rows"
								    : "dense after rows"));
	}
	free(dense);
	free(f32);
	free(e.vals);
	free(e.want);
	wsp_close(pg);
	wsp_pack_close(pk);
	t_model_remove(&m);
	return 0;
}
