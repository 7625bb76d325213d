/* wsp_grad_push_f32: a tensor's gradient handed over as fp32 adds up with
 * pushes in the tensor's own dtype exactly as their widening would (bit for
 * bit): as a first push (copied straight into the accumulator), after a
 * landed bf16 push, under and over other pushes, twice in a row, after a
 * zeroing that left stale sums; values no bf16 can hold stay as given; the
 * other tensors of a zeroed layer read as zeros.  Errors: a tensor the
 * layer lacks, a NULL gradient, an fp32 gradient that must be staged and
 * does not fit a staging buffer.  Host backend: the GPU path with host
 * pointers. */
#include <string.h>

#include "../gpu/pager_util.h"

/* fp32 values that bf16 cannot hold: g widened, plus a fraction below its
 * last bit. */
static float *fine_f32(const uint16_t *g, uint64_t n)
{
	float *f = malloc(n * 4 + 4);
	for (uint64_t i = 0; i < n; i++)
		f[i] = t_bf16f(g[i]) * (1.0f + (float)(i % 7) / 1024.0f);
	return f;
}

static float *widened(const uint16_t *g, uint64_t n)
{
	float *f = malloc(n * 4 + 4);
	for (uint64_t i = 0; i < n; i++)
		f[i] = t_bf16f(g[i]);
	return f;
}

/* Three micro-batches of every tensor of layers 1..3, tensor t of round r
 * as fp32 when (t + r) % 3 says so: each tensor sees fp32 first, after a
 * bf16 push, and twice running.  The sums must be those of widened
 * bf16 pushes (fp32 pushes of widened values), added in push order. */
static void mixed_rounds(wsp_pager *pg, wsp_pack *pk)
{
	enum { FIRST = 1, LAYERS = 3, ROUNDS = 3 };
	for (uint32_t l = 0; l < LAYERS; l++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, FIRST + l);
		CHECK(L->n_tensors <= 16);
		uint16_t *g[ROUNDS][16];
		float *f[ROUNDS][16];
		for (unsigned r = 0; r < ROUNDS; r++)
			for (uint32_t t = 0; t < L->n_tensors; t++) {
				uint64_t n = L->tensors[t].bytes / 2;
				g[r][t] = malloc(n * 2 + 2);
				t_fill_grad(g[r][t], n, l, t, r);
				f[r][t] = widened(g[r][t], n);
				if ((t + r) % 3 != 0) {
					CHECK_RC(wsp_grad_push_f32(pg, FIRST + l, t, f[r][t], NULL), 0);
				} else {
					const void *ptr[16] = { 0 };
					ptr[t] = g[r][t];
					CHECK_RC(wsp_grad_push(pg, FIRST + l, ptr, NULL), 0);
				}
			}
		struct wsp_grads gr;
		CHECK_RC(wsp_grad_get(pg, FIRST + l, &gr), 0);
		CHECK(gr.pushes == ROUNDS * L->n_tensors);
		for (uint32_t t = 0; t < L->n_tensors; t++) {
			uint64_t n = L->tensors[t].bytes / 2;
			float *want = malloc(n * 4 + 4);
			for (uint64_t i = 0; i < n; i++)
				want[i] = (f[0][t][i] + f[1][t][i]) + f[2][t][i];
			CHECK(t_same_floats(gr.data[t], want, n, L->tensors[t].name));
			free(want);
			for (unsigned r = 0; r < ROUNDS; r++) {
				free(g[r][t]);
				free(f[r][t]);
			}
		}
	}
}

/* After zeroing (the accumulators hold stale sums): one tensor pushed as
 * fp32 values finer than bf16 reads back exactly as given, the others as
 * zeros; a bf16 push on top adds to it. */
static void after_zero(wsp_pager *pg, wsp_pack *pk)
{
	const uint32_t l = 1, t = 1;
	const struct wsp_layer *L = wsp_pack_layer(pk, l);
	uint64_t n = L->tensors[t].bytes / 2;
	uint16_t *g = malloc(n * 2 + 2), *h = malloc(n * 2 + 2);
	t_fill_grad(g, n, l, t, 40);
	t_fill_grad(h, n, l, t, 41);
	float *f = fine_f32(g, n);
	struct wsp_grads gr;
	CHECK_RC(wsp_grad_zero(pg, l), 0);
	CHECK_RC(wsp_grad_push_f32(pg, l, t, f, NULL), 0);
	CHECK_RC(wsp_grad_get(pg, l, &gr), 0);
	CHECK(gr.pushes == 1);
	CHECK(t_same_floats(gr.data[t], f, n, "fp32 after zeroing"));
	for (uint32_t u = 0; u < L->n_tensors; u++) {
		if (u == t || !gr.data[u])
			continue;
		uint64_t m = L->tensors[u].bytes / 2;
		float *zero = calloc(m + 1, 4);
		CHECK(t_same_floats(gr.data[u], zero, m, "an unpushed tensor after zeroing"));
		free(zero);
	}
	const void *ptr[16] = { 0 };
	ptr[t] = h;
	CHECK_RC(wsp_grad_push(pg, l, ptr, NULL), 0);
	CHECK_RC(wsp_grad_get(pg, l, &gr), 0);
	float *want = malloc(n * 4 + 4);
	for (uint64_t i = 0; i < n; i++)
		want[i] = f[i] + t_bf16f(h[i]);
	CHECK(t_same_floats(gr.data[t], want, n, "bf16 onto fp32"));
	free(want);
	free(f);
	free(g);
	free(h);
}

/* The embedding (layer 0, the largest layer here): its fp32 gradient is
 * twice a staging buffer's worth, so it may be a first push (straight into
 * its accumulator) but not one added to an earlier push. */
static void errors(wsp_pager *pg, wsp_pack *pk)
{
	const struct wsp_layer *L = wsp_pack_layer(pk, 0);
	uint64_t n = L->tensors[0].bytes / 2;
	uint16_t *g = malloc(n * 2 + 2);
	t_fill_grad(g, n, 0, 0, 50);
	float *f = widened(g, n);
	struct wsp_grads gr;
	CHECK_RC(wsp_grad_zero(pg, 0), 0);
	CHECK_RC(wsp_grad_push_f32(pg, 0, 0, f, NULL), 0);
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
	CHECK(t_same_floats(gr.data[0], f, n, "a first fp32 push larger than staging"));
	CHECK_RC(wsp_grad_push_f32(pg, 0, 0, f, NULL), WSP_ETOOBIG);
	CHECK(strstr(wsp_errmsg(pg), "push it in the tensor's dtype") != NULL);
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);   /* the refused push changed nothing */
	CHECK(gr.pushes == 1);
	CHECK(t_same_floats(gr.data[0], f, n, "after a refused push"));
	CHECK_RC(wsp_grad_push_f32(pg, 0, L->n_tensors, f, NULL), WSP_ENOTFOUND);
	CHECK(strstr(wsp_errmsg(pg), "no tensor") != NULL);
	CHECK_RC(wsp_grad_push_f32(pg, 0, 0, NULL, NULL), -EINVAL);
	CHECK(strstr(wsp_errmsg(pg), "NULL") != NULL);
	CHECK_RC(wsp_grad_push_f32(pg, 99, 0, f, NULL), WSP_ENOTFOUND);
	CHECK_RC(wsp_grad_push_f32(NULL, 0, 0, f, NULL), -EINVAL);
	free(f);
	free(g);
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	char err[512];
	wsp_pager *pg;
	wsp_pack *pk;

	/* A wide embedding (8192 x 64: 1 MiB of bf16) over small blocks. */
	t_model_make_shape(&m, "grad-f32", 4, 64, 128, 8192, WSP_DTYPE_BF16);
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	CHECK(wsp_pack_layer(pk, 0)->raw_bytes == m.sum.max_layer_raw_bytes);
	t_host_options(&o, &m, 100, 3);
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	mixed_rounds(pg, pk);
	after_zero(pg, pk);
	errors(pg, pk);
	wsp_close(pg);
	wsp_pack_close(pk);
	t_model_remove(&m);
	return 0;
}
