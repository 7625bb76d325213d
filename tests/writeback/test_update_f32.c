/* wsp_update_f32: fp32 values narrowed in the copy.  A BF16 layer gets
 * each value rounded to nearest even (ties both ways, carries into the
 * exponent, infinities, signed zeros, subnormals, NaN to 0x7fc0), checked
 * against a reference written differently (compare the dropped half);
 * an F32 layer gets its values as given; both served to acquires with the
 * new checksums; NULL keeps a tensor.  An F16 tensor is refused (-EINVAL)
 * naming it, and nothing changes.  Host backend. */
#include <math.h>

#include "../gpu/pager_util.h"

/* bf16 of fp32 bits u, by comparing the half dropped with one half-unit. */
static uint16_t ref_bf16(uint32_t u)
{
	if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x7fffffu))
		return 0x7fc0;
	uint32_t hi = u >> 16, lo = u & 0xffffu;
	if (lo > 0x8000u || (lo == 0x8000u && (hi & 1u)))
		hi++;
	return (uint16_t)hi;
}

static uint32_t special(uint64_t k, uint64_t *x)
{
	static const uint32_t v[] = {
		0x3f808000u, 0x3f818000u,   /* ties: stays even, rounds up to even */
		0x3f80ffffu, 0x7f7fffffu,   /* carries (the last into infinity) */
		0x7f800000u, 0xff800000u,   /* infinities */
		0x00000000u, 0x80000000u,   /* zeros */
		0x00000001u, 0x00018000u,   /* subnormals */
		0x7fc00001u, 0xffa00000u,   /* NaNs */
	};
	if (k % 3 == 0)
		return v[(k / 3) % (sizeof(v) / sizeof(v[0]))];
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return (uint32_t)*x;
}

/* Update every tensor of layer `l` from fp32 values (tensor 1 kept) and
 * check what an acquire sees. */
static void update_and_check(wsp_pager *pg, wsp_pack *pk, uint32_t l, enum wsp_dtype dt)
{
	const struct wsp_layer *L = wsp_pack_layer(pk, l), *V;
	float *vals[64] = { 0 };
	uint8_t *before = NULL;
	uint64_t x = 0x9E3779B97F4A7C15ull + l;
	CHECK(L->n_tensors <= 64);
	CHECK_RC(wsp_acquire(pg, l, NULL, &V), 0);   /* tensor 1's current bytes */
	if (L->n_tensors > 1) {
		before = malloc(V->tensors[1].bytes);
		memcpy(before, V->tensors[1].data, V->tensors[1].bytes);
	}
	CHECK_RC(wsp_release(pg, l, NULL), 0);
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		if (i == 1)
			continue;
		uint64_t n = L->tensors[i].bytes / (wsp_dtype_bits(dt) / 8);
		vals[i] = malloc(n * 4 + 4);
		for (uint64_t k = 0; k < n; k++) {
			uint32_t u = special(k, &x);
			memcpy(&vals[i][k], &u, 4);
		}
	}
	CHECK_RC(wsp_update_f32(pg, l, (const float *const *)vals), 0);
	CHECK_RC(wsp_acquire(pg, l, NULL, &V), 0);
	CHECK(t_view_bad(V) == 0);   /* the view's checksums are the new bytes' */
	for (uint32_t i = 0; i < L->n_tensors; i++) {
		const struct wsp_tensor *t = &V->tensors[i];
		if (i == 1) {
			CHECK(memcmp(t->data, before, t->bytes) == 0);
			continue;
		}
		uint64_t n = t->bytes / (wsp_dtype_bits(dt) / 8), bad = 0;
		for (uint64_t k = 0; k < n; k++) {
			uint32_t u;
			memcpy(&u, &vals[i][k], 4);
			if (dt == WSP_DTYPE_BF16)
				bad += ((const uint16_t *)t->data)[k] != ref_bf16(u);
			else
				bad += ((const uint32_t *)t->data)[k] != u;
		}
		if (bad)
			printf("layer %u tensor %s: %llu of %llu values wrong\n", l, t->name,
			       (unsigned long long)bad, (unsigned long long)n);
		CHECK(bad == 0);
	}
	CHECK_RC(wsp_release(pg, l, NULL), 0);
	for (uint32_t i = 0; i < L->n_tensors; i++)
		free(vals[i]);
	free(before);
}

int main(void)
{
	static const enum wsp_dtype dts[] = { WSP_DTYPE_BF16, WSP_DTYPE_F32, WSP_DTYPE_F16 };
	for (unsigned d = 0; d < 3; d++) {
		struct t_model m;
		struct wsp_options o;
		char err[512];
		wsp_pager *pg;
		wsp_pack *pk;
		t_model_make_dtype(&m, "update-f32", 3, 512, 1024, dts[d]);
		CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
		t_host_options(&o, &m, 100, 3);
		CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
		if (dts[d] != WSP_DTYPE_F16) {
			for (uint32_t l = 0; l < m.sum.n_layers; l++)
				update_and_check(pg, pk, l, dts[d]);
			printf("%s: %u layers updated from fp32, as rounded by the reference\n",
			       wsp_dtype_name(dts[d]), m.sum.n_layers);
		} else {
			const struct wsp_layer *L = wsp_pack_layer(pk, 1);
			float *vals[64] = { 0 };
			vals[0] = calloc(L->tensors[0].bytes / 2, 4);
			CHECK_RC(wsp_update_f32(pg, 1, (const float *const *)vals), -EINVAL);
			printf("%s\n", wsp_errmsg(pg));
			CHECK(strstr(wsp_errmsg(pg), L->tensors[0].name) && strstr(wsp_errmsg(pg), "F16"));
			struct wsp_stats st;
			CHECK_RC(wsp_get_stats(pg, &st), 0);
			CHECK(st.updated_layers == 0);
			free(vals[0]);
		}
		wsp_close(pg);
		wsp_pack_close(pk);
		t_model_remove(&m);
	}
	return 0;
}
