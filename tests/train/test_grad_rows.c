/* Pushes of part of a layer and of rows: a layer pushed tensor by tensor
 * (more pushes in flight than the pager has staging buffers, and than it
 * has push slots) sums exactly as whole-layer pushes do; wsp_grad_push_rows
 * of an embedding-shaped gradient (some rows, padding entries, on a zeroed
 * accumulator, on a landed push, under a dense push) gives exactly what a
 * push of the whole gradient gives (bit for bit; rows not listed keep
 * their bits, where a whole push would turn a -0 into +0); bad rows and
 * arguments are clear errors.  Many rows, split over the adding threads,
 * some listed more than once, sum in listing order, bit for bit.  Host
 * backend: the GPU path with host pointers. */
#include <string.h>

#include "../gpu/pager_util.h"
#include "train/grads.h"

/* Layers 1..4 pushed one tensor per push, twice (micro-batches): 2 x 36
 * pushes, all queued before any wait; the second round needs staging. */
static void tensor_by_tensor(wsp_pager *pg, wsp_pack *pk)
{
	enum { FIRST = 1, LAYERS = 4, ROUNDS = 2 };
	uint16_t *g[ROUNDS][LAYERS][16];
	for (unsigned r = 0; r < ROUNDS; r++)
		for (uint32_t l = 0; l < LAYERS; l++) {
			const struct wsp_layer *L = wsp_pack_layer(pk, FIRST + l);
			CHECK(L->n_tensors <= 16);
			for (uint32_t t = 0; t < L->n_tensors; t++) {
				const void *ptr[16] = { 0 };
				uint64_t n = L->tensors[t].bytes / 2;
				g[r][l][t] = malloc(n * 2 + 2);
				t_fill_grad(g[r][l][t], n, 0, 0, 100 * r + 10 * l + t);
				ptr[t] = g[r][l][t];
				CHECK_RC(wsp_grad_push(pg, FIRST + l, ptr, NULL), 0);
			}
		}
	for (uint32_t l = 0; l < LAYERS; l++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, FIRST + l);
		struct wsp_grads gr;
		CHECK_RC(wsp_grad_get(pg, FIRST + l, &gr), 0);
		CHECK(gr.pushes == ROUNDS * L->n_tensors);
		for (uint32_t t = 0; t < L->n_tensors; t++) {
			uint64_t n = L->tensors[t].bytes / 2;
			float *want = malloc(n * 4 + 4);
			for (uint64_t i = 0; i < n; i++)
				want[i] = t_bf16f(g[0][l][t][i]) + t_bf16f(g[1][l][t][i]);
			CHECK(t_same_floats(gr.data[t], want, n, L->tensors[t].name));
			free(want);
			for (unsigned r = 0; r < ROUNDS; r++)
				free(g[r][l][t]);
		}
	}
	CHECK_RC(wsp_grad_zero(pg, WSP_ALL_LAYERS), 0);
}

/* The embedding (layer 0, tensor 0, [vocab, hidden] bf16): a gradient
 * nonzero in a few rows, pushed as rows, against the same gradient pushed
 * whole into a second layer-0 accumulator state. */
static void rows(wsp_pager *pg, wsp_pack *pk)
{
	const struct wsp_layer *L = wsp_pack_layer(pk, 0);
	const struct wsp_tensor *T = &L->tensors[0];
	CHECK(T->rank == 2 && T->dtype == WSP_DTYPE_BF16);
	uint64_t V = T->shape[0], H = T->shape[1], n = V * H;
	/* The batch's tokens, sorted, repeats marked -1 as a caller would. */
	const int64_t tokens[] = { 3, 3, 7, 8, 8, 8, 100, 200, 201, (int64_t)V - 1 };
	enum { N = sizeof(tokens) / sizeof(tokens[0]) };
	int64_t list[N];
	for (int k = 0; k < N; k++)
		list[k] = k && tokens[k] == tokens[k - 1] ? -1 : tokens[k];
	uint16_t *dense = calloc(n, 2), *vals = malloc(N * H * 2), *more = malloc(n * 2);
	t_fill_grad(more, n, 0, 0, 7);
	for (int k = 0; k < N; k++) {
		/* a row's values, repeats alike */
		t_fill_grad(vals + k * H, H, 0, 0, 1000 + (unsigned)tokens[k]);
		memcpy(dense + tokens[k] * H, vals + k * H, H * 2);
	}
	float *want = malloc(n * 4);
	struct wsp_grads gr;
	const void *ptr[16] = { 0 };

	/* Rows onto zeroed accumulators: the dense gradient, exactly. */
	CHECK_RC(wsp_grad_push_rows(pg, 0, 0, list, N, vals, NULL), 0);
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
	CHECK(gr.pushes == 1);
	for (uint64_t i = 0; i < n; i++)
		want[i] = t_bf16f(dense[i]);
	CHECK(t_same_floats(gr.data[0], want, n, "rows on zero"));
	/* A dense push after them adds. */
	ptr[0] = more;
	CHECK_RC(wsp_grad_push(pg, 0, ptr, NULL), 0);
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
	for (uint64_t i = 0; i < n; i++)
		want[i] = t_bf16f(dense[i]) + t_bf16f(more[i]);
	CHECK(t_same_floats(gr.data[0], want, n, "dense after rows"));
	/* Rows after a landed (never widened) dense push: added to it. */
	CHECK_RC(wsp_grad_zero(pg, 0), 0);
	CHECK_RC(wsp_grad_push(pg, 0, ptr, NULL), 0);
	CHECK_RC(wsp_grad_push_rows(pg, 0, 0, list, N, vals, NULL), 0);
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
	CHECK(gr.pushes == 2);
	/* Rows not listed are left as they were (a whole push would add +0
	 * to them, which turns only a -0 into +0). */
	uint8_t *listed = calloc(V, 1);
	for (int k = 0; k < N; k++)
		listed[tokens[k]] = 1;
	for (uint64_t i = 0; i < n; i++)
		want[i] = listed[i / H] ? t_bf16f(more[i]) + t_bf16f(dense[i]) : t_bf16f(more[i]);
	CHECK(t_same_floats(gr.data[0], want, n, "rows after a landed push"));
	free(listed);
	/* No rows: a zero gradient (the accumulator reads as zeros). */
	CHECK_RC(wsp_grad_zero(pg, 0), 0);
	CHECK_RC(wsp_grad_push_rows(pg, 0, 0, NULL, 0, NULL, NULL), 0);
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
	for (uint64_t i = 0; i < n; i++)
		want[i] = 0.0f;
	CHECK(t_same_floats(gr.data[0], want, n, "no rows"));

	/* Errors at the call. */
	CHECK_RC(wsp_grad_push_rows(pg, 0, L->n_tensors, list, N, vals, NULL), WSP_ENOTFOUND);
	CHECK(strstr(wsp_errmsg(pg), "no tensor") != NULL);
	CHECK_RC(wsp_grad_push_rows(pg, 0, 0, NULL, N, vals, NULL), -EINVAL);
	CHECK(strstr(wsp_errmsg(pg), "NULL") != NULL);
	CHECK_RC(wsp_grad_push_rows(pg, 99, 0, list, N, vals, NULL), WSP_ENOTFOUND);
	CHECK_RC(wsp_grad_push_rows(pg, 0, 0, list, UINT64_C(1) << 40, vals, NULL), WSP_ETOOBIG);
	CHECK(strstr(wsp_errmsg(pg), "push the whole gradient") != NULL);
	CHECK_RC(wsp_grad_push_rows(NULL, 0, 0, list, N, vals, NULL), -EINVAL);
	/* A row past the end fails the addition: kept and reported. */
	int64_t bad[2] = { 1, (int64_t)V };
	CHECK_RC(wsp_grad_push_rows(pg, 0, 0, bad, 2, vals, NULL), 0);
	CHECK_RC(wsp_grad_wait(pg, 0), -EINVAL);
	CHECK(strstr(wsp_errmsg(pg), "listed, the tensor has") != NULL);
	CHECK_RC(wsp_grad_push(pg, 1, ptr, NULL), -EINVAL);   /* every later call */
	free(dense);
	free(vals);
	free(more);
	free(want);
}

/* An embedding of 32768 rows; 12000 rows listed (sorted, some twice and
 * thrice, as a caller that does not mark repeats lists them), enough that
 * the rows are split over the adding threads by row: each row's listings
 * must be assigned, then added, in the order listed.  Copied whole, and
 * in pieces (piece_bytes: the least of a piece), each added once it has
 * landed: the same bits. */
static void many_rows(uint64_t piece_bytes)
{
	wspi_row_piece_bytes = piece_bytes;
	struct t_model m;
	struct wsp_options o;
	char err[512];
	wsp_pager *pg;
	wsp_pack *pk;
	t_model_make_shape(&m, "grad-many-rows", 2, 256, 512, 32768, WSP_DTYPE_BF16);
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	t_host_options(&o, &m, 100, 3);
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	const struct wsp_tensor *T = &wsp_pack_layer(pk, 0)->tensors[0];
	CHECK(T->rank == 2 && T->dtype == WSP_DTYPE_BF16 && T->shape[0] == 32768);
	uint64_t V = T->shape[0], H = T->shape[1];
	enum { N = 12000 };
	int64_t *list = malloc(N * sizeof(*list));
	uint16_t *vals = malloc((uint64_t)N * H * 2);
	CHECK((uint64_t)t_rows_listed(list, N, 12345, 2) < V);
	for (int k = 0; k < N; k++)
		t_fill_grad(vals + (uint64_t)k * H, H, 0, 0, 5000 + (unsigned)k);
	float *want = malloc(V * H * 4);
	uint8_t *seen = calloc(V, 1);
	memset(want, 0, V * H * 4);
	for (int k = 0; k < N; k++) {
		float *w = want + (uint64_t)list[k] * H;
		for (uint64_t i = 0; i < H; i++)
			w[i] = seen[list[k]] ? w[i] + t_bf16f(vals[(uint64_t)k * H + i])
					     : t_bf16f(vals[(uint64_t)k * H + i]);
		seen[list[k]] = 1;
	}
	CHECK_RC(wsp_grad_push_rows(pg, 0, 0, list, N, vals, NULL), 0);
	struct wsp_grads gr;
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
	CHECK(t_same_floats(gr.data[0], want, V * H, "many rows on zero"));
	/* Pushed again: every listing adds. */
	for (int k = 0; k < N; k++) {
		float *w = want + (uint64_t)list[k] * H;
		for (uint64_t i = 0; i < H; i++)
			w[i] += t_bf16f(vals[(uint64_t)k * H + i]);
	}
	CHECK_RC(wsp_grad_push_rows(pg, 0, 0, list, N, vals, NULL), 0);
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
	CHECK(t_same_floats(gr.data[0], want, V * H, "many rows added"));
	free(list);
	free(vals);
	free(want);
	free(seen);
	wsp_close(pg);
	wsp_pack_close(pk);
	t_model_remove(&m);
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	char err[512];
	wsp_pager *pg;
	wsp_pack *pk;

	t_model_make(&m, "grad-rows", 6, 256, 512);
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	t_host_options(&o, &m, 100, 3);
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	tensor_by_tensor(pg, pk);
	rows(pg, pk);
	wsp_close(pg);
	wsp_pack_close(pk);
	t_model_remove(&m);
	many_rows(4u << 20);    /* 6 MB of values: one piece */
	many_rows(1u << 20);    /* 5 pieces of 2400 rows */
	many_rows(64u << 10);   /* the most pieces, 8 of 1500 rows */
	return 0;
}
