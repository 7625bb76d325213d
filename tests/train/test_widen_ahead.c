/* Landed gradients are widened ahead of their reader: a layer's first push
 * after zeroing lands in its own dtype, and the write-back's thread widens
 * it into fp32 while nothing else is queued, without waiting for
 * wsp_grad_get: the fp32 accumulators, which exist only once something is
 * widened into them, fill the process's memory with no read at all.
 * Reads, zeroing and more pushes that meet that work give the values they
 * always give: a thread zeroing, pushing and reading layers in turn while
 * the widening goes on sees every gradient exactly.  Host backend. */
#include <inttypes.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../gpu/pager_util.h"

#define LAYERS 4
#define ROUNDS 40

/* Resident bytes of this process (/proc/self/statm), 0 where unknown. */
static uint64_t resident_bytes(void)
{
	unsigned long long size = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");
	if (!f)
		return 0;
	if (fscanf(f, "%llu %llu", &size, &resident) != 2)
		resident = 0;
	fclose(f);
	return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* Every tensor of `layer` reads as push k, widened; or as k0 + k1 when
 * k1 >= 0 (a second push added). */
static int check_layer(wsp_pager *pg, wsp_pack *pk, uint32_t layer, unsigned k0, int k1,
		       uint16_t *scratch)
{
	const struct wsp_layer *L = wsp_pack_layer(pk, layer);
	struct wsp_grads gr;
	CHECK_RC(wsp_grad_get(pg, layer, &gr), 0);
	CHECK(gr.pushes == (k1 >= 0 ? 2u : 1u));
	for (uint32_t t = 0; t < L->n_tensors; t++) {
		uint64_t n = L->tensors[t].bytes / 2;
		uint16_t *b = scratch + n;
		t_fill_grad(scratch, n, layer, t, k0);
		if (k1 >= 0)
			t_fill_grad(b, n, layer, t, (unsigned)k1);
		for (uint64_t i = 0; i < n; i++) {
			float want = t_bf16f(scratch[i]);
			if (k1 >= 0)
				want += t_bf16f(b[i]);
			if (memcmp(&want, &gr.data[t][i], 4) != 0) {
				fprintf(stderr, "layer %u tensor %u element %" PRIu64 ": %a, want %a\n",
					layer, t, i, gr.data[t][i], want);
				return 1;
			}
		}
	}
	return 0;
}

/* Push gradient k of every tensor of `layer`. */
static int push_layer(wsp_pager *pg, wsp_pack *pk, uint32_t layer, unsigned k, uint16_t **bufs)
{
	const struct wsp_layer *L = wsp_pack_layer(pk, layer);
	const void *ptr[64];
	CHECK(L->n_tensors <= 64);
	for (uint32_t t = 0; t < L->n_tensors; t++) {
		t_fill_grad(bufs[t], L->tensors[t].bytes / 2, layer, t, k);
		ptr[t] = bufs[t];
	}
	CHECK_RC(wsp_grad_push(pg, layer, ptr, NULL), 0);
	return 0;
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	char err[512];
	wsp_pager *pg;
	wsp_pack *pk;

	if (!resident_bytes()) {
		printf("SKIP: no /proc/self/statm to see the accumulators in memory\n");
		return 77;
	}
	t_model_make(&m, "widen", 6, 512, 2048);
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	t_host_options(&o, &m, 100, 3);
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	uint64_t max_bytes = 0;
	uint32_t max_tensors = 0;
	const struct wsp_layer *L;
	for (uint32_t l = 0; (L = wsp_pack_layer(pk, l)) != NULL; l++) {
		max_tensors = L->n_tensors > max_tensors ? L->n_tensors : max_tensors;
		for (uint32_t t = 0; t < L->n_tensors; t++)
			max_bytes = L->tensors[t].bytes > max_bytes ? L->tensors[t].bytes : max_bytes;
	}
	/* One buffer a tensor of each layer: a push's memory stays unchanged
	 * until wsp_grad_query says it is accumulated. */
	uint16_t *bufs[LAYERS + 1][64];   /* [0]: the first push's */
	for (uint32_t l = 0; l <= LAYERS; l++)
		for (uint32_t t = 0; t < max_tensors; t++) {
			CHECK((bufs[l][t] = malloc(max_bytes)) != NULL);
			memset(bufs[l][t], 0, max_bytes);   /* in memory before it is measured */
		}
	uint16_t *scratch = malloc(2 * max_bytes);
	CHECK(scratch != NULL);
	memset(scratch, 0, 2 * max_bytes);
	/* The write-back's own memory made first (push slots, the worker),
	 * on a layer not used below. */
	CHECK(push_layer(pg, pk, LAYERS + 1, 0, bufs[0]) == 0);
	CHECK(check_layer(pg, pk, LAYERS + 1, 0, -1, scratch) == 0);

	/* Landed pushes, then no read: each layer's landing buffer (2 bytes an
	 * element) and, widened ahead, its fp32 accumulators (4 more, made when
	 * first widened into) come into memory; without the widening only a
	 * third of that would. */
	uint64_t acc_bytes = 0, before = resident_bytes(), grown = 0;
	for (uint32_t l = 1; l <= LAYERS; l++) {
		CHECK(push_layer(pg, pk, l, 0, bufs[l]) == 0);
		for (uint32_t t = 0; t < wsp_pack_layer(pk, l)->n_tensors; t++)
			acc_bytes += wsp_pack_layer(pk, l)->tensors[t].bytes * 3;
	}
	for (int tries = 0; tries < 4000 && grown < acc_bytes * 9 / 10; tries++) {
		nanosleep(&(struct timespec){ 0, 5000000 }, NULL);   /* up to 20 s */
		uint64_t now = resident_bytes();
		grown = now > before ? now - before : 0;
	}
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	printf("before any read: %" PRIu64 " of %" PRIu64 " landing and accumulator bytes in "
	       "memory, %.1f ms adding\n", grown, acc_bytes, st.grad_add_ns / 1e6);
	CHECK(grown >= acc_bytes * 9 / 10);
	for (uint32_t l = 1; l <= LAYERS; l++)
		CHECK(check_layer(pg, pk, l, 0, -1, scratch) == 0);

	/* Zeroing, pushing and reading in turn while the widening goes on. */
	for (unsigned r = 1; r <= ROUNDS; r++) {
		uint32_t l = 1 + r % LAYERS, other = 1 + (r + 1) % LAYERS;
		CHECK_RC(wsp_grad_zero(pg, l), 0);
		CHECK(push_layer(pg, pk, l, r, bufs[l]) == 0);
		if (r % 3 == 0) {   /* a second micro-batch meets a landed push */
			CHECK_RC(wsp_grad_wait(pg, l), 0);
			CHECK(push_layer(pg, pk, l, r + 1000, bufs[l]) == 0);
			CHECK(check_layer(pg, pk, l, r, (int)(r + 1000), scratch) == 0);
		} else if (r % 3 == 1) {   /* zeroed again before a read: zeros */
			CHECK_RC(wsp_grad_wait(pg, l), 0);
			CHECK_RC(wsp_grad_zero(pg, l), 0);
			struct wsp_grads gr;
			CHECK_RC(wsp_grad_get(pg, l, &gr), 0);
			CHECK(gr.pushes == 0 && gr.data[0] && gr.data[0][0] == 0.0f);
			CHECK(push_layer(pg, pk, l, r, bufs[l]) == 0);
			CHECK(check_layer(pg, pk, l, r, -1, scratch) == 0);
		}
		/* another layer, read while this one may be widening */
		struct wsp_grads gr;
		CHECK_RC(wsp_grad_get(pg, other, &gr), 0);
		CHECK(gr.pushes >= 1);
	}
	CHECK_RC(wsp_grad_wait(pg, WSP_ALL_LAYERS), 0);
	for (unsigned r = ROUNDS - LAYERS + 1; r <= ROUNDS; r++) {
		uint32_t l = 1 + r % LAYERS;
		if (r % 3 == 0)
			CHECK(check_layer(pg, pk, l, r, (int)(r + 1000), scratch) == 0);
		else
			CHECK(check_layer(pg, pk, l, r, -1, scratch) == 0);
	}
	wsp_close(pg);
	wsp_pack_close(pk);
	t_model_remove(&m);
	for (uint32_t l = 0; l <= LAYERS; l++)
		for (uint32_t t = 0; t < max_tensors; t++)
			free(bufs[l][t]);
	free(scratch);
	return 0;
}
