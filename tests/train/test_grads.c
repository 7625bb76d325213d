/* wsp_grad_*: gradients pushed for a layer reach its fp32 accumulators
 * exactly (the first push is the gradient itself, later ones add in push
 * order), tensors never given one stay NULL, zeroing starts over, pushes
 * from several threads to different layers all arrive, the counters say
 * so, and bad arguments are clear errors.  Host backend: the same code
 * path as on a GPU, with host pointers and memcpy for the copies. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "../gpu/pager_util.h"

#define PUSHES 3
#define THREADS 4

struct job {
	wsp_pager *pg;
	wsp_pack *pk;
	uint32_t layer;
	int rc;
};

/* Push PUSHES gradients of every tensor but the last, check the sums. */
static void *push_and_check(void *arg)
{
	struct job *j = arg;
	const struct wsp_layer *L = wsp_pack_layer(j->pk, j->layer);
	uint16_t *g[PUSHES][64];
	const void *ptr[64];
	j->rc = 1;
	if (L->n_tensors > 64 || L->n_tensors < 2)
		return NULL;
	for (unsigned k = 0; k < PUSHES; k++) {
		for (uint32_t t = 0; t < L->n_tensors; t++) {
			uint64_t n = L->tensors[t].bytes / 2;
			g[k][t] = malloc(n * 2 + 2);
			t_fill_grad(g[k][t], n, j->layer, t, k);
			ptr[t] = t + 1 < L->n_tensors ? g[k][t] : NULL;
		}
		if (wsp_grad_push(j->pg, j->layer, ptr, NULL) != 0)
			return NULL;
	}
	struct wsp_grads gr;
	if (wsp_grad_get(j->pg, j->layer, &gr) != 0 || gr.pushes != PUSHES ||
	    gr.n_tensors != L->n_tensors || gr.data[L->n_tensors - 1] != NULL)
		return NULL;
	for (uint32_t t = 0; t + 1 < L->n_tensors; t++) {
		uint64_t n = L->tensors[t].bytes / 2;
		for (uint64_t i = 0; i < n; i++) {
			float want = t_bf16f(g[0][t][i]);
			for (unsigned k = 1; k < PUSHES; k++)
				want += t_bf16f(g[k][t][i]);
			if (memcmp(&want, &gr.data[t][i], 4) != 0) {
				fprintf(stderr, "layer %u tensor %u element %" PRIu64 ": %a, want %a\n",
					j->layer, t, i, gr.data[t][i], want);
				return NULL;
			}
		}
	}
	for (unsigned k = 0; k < PUSHES; k++)
		for (uint32_t t = 0; t < L->n_tensors; t++)
			free(g[k][t]);
	j->rc = 0;
	return NULL;
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	char err[512];
	wsp_pager *pg;
	wsp_pack *pk;

	/* blocks of ~4 M elements: a push is added by several threads */
	t_model_make(&m, "grads", 6, 512, 2048);
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	t_host_options(&o, &m, 100, 3);
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);

	/* Before any push: nothing pending, nothing to zero. */
	CHECK_RC(wsp_grad_query(pg, WSP_ALL_LAYERS), 1);
	CHECK_RC(wsp_grad_wait(pg, WSP_ALL_LAYERS), 0);
	CHECK_RC(wsp_grad_zero(pg, WSP_ALL_LAYERS), 0);

	/* Blocks (layers 1..4) from four threads at once. */
	pthread_t th[THREADS];
	struct job jobs[THREADS];
	for (int i = 0; i < THREADS; i++) {
		jobs[i] = (struct job){ pg, pk, (uint32_t)(1 + i), 1 };
		CHECK(pthread_create(&th[i], NULL, push_and_check, &jobs[i]) == 0);
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		CHECK(jobs[i].rc == 0);
	}
	CHECK_RC(wsp_grad_query(pg, WSP_ALL_LAYERS), 1);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	uint64_t want_bytes = 0;
	for (int i = 0; i < THREADS; i++) {
		const struct wsp_layer *L = wsp_pack_layer(pk, 1 + i);
		for (uint32_t t = 0; t + 1 < L->n_tensors; t++)
			want_bytes += PUSHES * L->tensors[t].bytes;
	}
	printf("pushes %" PRIu64 ", bytes out %" PRIu64 "\n", st.grad_pushes, st.bytes_d2h);
	CHECK(st.grad_pushes == THREADS * PUSHES);
	CHECK(st.bytes_d2h == want_bytes);

	/* Zeroing starts over: zeros, no pushes; the next push is the value. */
	CHECK_RC(wsp_grad_zero(pg, 2), 0);
	struct wsp_grads gr;
	CHECK_RC(wsp_grad_get(pg, 2, &gr), 0);
	CHECK(gr.pushes == 0 && gr.data[0] != NULL && gr.data[0][5] == 0.0f);
	const struct wsp_layer *L2 = wsp_pack_layer(pk, 2);
	uint64_t n0 = L2->tensors[0].bytes / 2;
	uint16_t *g = malloc(n0 * 2);
	t_fill_grad(g, n0, 2, 0, 9);
	const void *ptr[64] = { g };
	CHECK_RC(wsp_grad_push(pg, 2, ptr, NULL), 0);
	CHECK_RC(wsp_grad_get(pg, 2, &gr), 0);
	CHECK(gr.pushes == 1);
	for (uint64_t i = 0; i < n0; i++)
		CHECK(memcmp(&gr.data[0][i], &(float){ t_bf16f(g[i]) }, 4) == 0);   /* -0 too */
	/* Zeroed, then one tensor pushed before any read: that tensor is the
	 * pushed value, the others read as zeros (zeroing is lazy). */
	CHECK_RC(wsp_grad_zero(pg, 3), 0);
	const struct wsp_layer *L3 = wsp_pack_layer(pk, 3);
	uint64_t n3 = L3->tensors[0].bytes / 2;
	uint16_t *g3 = malloc(n3 * 2);
	t_fill_grad(g3, n3, 3, 0, 5);
	const void *ptr3[64] = { g3 };
	CHECK_RC(wsp_grad_push(pg, 3, ptr3, NULL), 0);
	CHECK_RC(wsp_grad_get(pg, 3, &gr), 0);
	CHECK(gr.pushes == 1);
	for (uint64_t i = 0; i < n3; i++)
		CHECK(memcmp(&gr.data[0][i], &(float){ t_bf16f(g3[i]) }, 4) == 0);
	for (uint32_t t = 1; t + 1 < L3->n_tensors; t++)
		for (uint64_t i = 0; i < L3->tensors[t].bytes / 2; i++)
			CHECK(gr.data[t][i] == 0.0f && !signbit(gr.data[t][i]));
	/* A push landed and zeroed before any read: zeros, not NULL. */
	CHECK_RC(wsp_grad_zero(pg, 4), 0);
	CHECK_RC(wsp_grad_push(pg, 4, ptr3, NULL), 0);   /* lands, never widened */
	CHECK_RC(wsp_grad_zero(pg, 4), 0);
	CHECK_RC(wsp_grad_get(pg, 4, &gr), 0);
	CHECK(gr.pushes == 0 && gr.data[0] != NULL && gr.data[0][0] == 0.0f);
	free(g3);
	free(g);
	/* a layer never pushed: accumulators NULL */
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
	CHECK(gr.pushes == 0 && gr.n_tensors > 0 && gr.data[0] == NULL);

	/* Errors. */
	CHECK_RC(wsp_grad_push(pg, 99, ptr, NULL), WSP_ENOTFOUND);
	CHECK(strstr(wsp_errmsg(pg), "no layer 99") != NULL);
	CHECK_RC(wsp_grad_push(pg, 1, NULL, NULL), -EINVAL);
	CHECK(strstr(wsp_errmsg(pg), "grads is NULL") != NULL);
	CHECK_RC(wsp_grad_get(pg, WSP_ALL_LAYERS, &gr), WSP_ENOTFOUND);
	CHECK_RC(wsp_grad_get(pg, 1, NULL), -EINVAL);
	CHECK_RC(wsp_grad_push(NULL, 1, ptr, NULL), -EINVAL);
	CHECK_RC(wsp_grad_query(pg, 77), WSP_ENOTFOUND);

	wsp_reset_stats(pg);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.grad_pushes == 0 && st.bytes_d2h == 0);
	wsp_close(pg);
	wsp_pack_close(pk);
	t_model_remove(&m);
	return 0;
}
