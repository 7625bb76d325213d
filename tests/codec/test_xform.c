/* Transforms: exact plane layout on known values, and forward + inverse
 * restores every byte for every transform and element size, at odd lengths
 * and for ranges cut anywhere (inside elements too). */
#include "codec_test.h"

static void check_layout(void)
{
	/* bf16 1.0 = 0x3f80, -2.5 = 0xc020 */
	uint16_t v[2] = { 0x3f80, 0xc020 };
	uint8_t out[4];

	xform_forward(WSPM_XFORM_EXP_BF16, 2, v, 4, out);
	CHECK(out[0] == 0x7f && out[1] == 0x80);   /* exponent plane */
	CHECK(out[2] == 0x00 && out[3] == 0xa0);   /* sign|mantissa plane */
	xform_forward(WSPM_XFORM_BYTES, 2, v, 4, out);
	CHECK(out[0] == 0x80 && out[1] == 0x20 && out[2] == 0x3f && out[3] == 0xc0);

	/* f32 -1.5 = 0xbfc00000: exponent 127, sign 1, mantissa 0x400000 */
	uint32_t f = 0xbfc00123u;
	uint8_t o4[4];
	xform_forward(WSPM_XFORM_EXP_F32, 4, &f, 4, o4);
	CHECK(o4[0] == 0x7f && o4[1] == 0xc0 && o4[2] == 0x01 && o4[3] == 0x23);
}

static void check_elem_bytes(void)
{
	CHECK_RC(xform_elem_bytes(WSPM_XFORM_NONE, WSP_DTYPE_U8), 0);
	CHECK_RC(xform_elem_bytes(WSPM_XFORM_BYTES, WSP_DTYPE_F16), 2);
	CHECK_RC(xform_elem_bytes(WSPM_XFORM_BYTES, WSP_DTYPE_I32), 4);
	CHECK_RC(xform_elem_bytes(WSPM_XFORM_BYTES, WSP_DTYPE_F64), 8);
	CHECK_RC(xform_elem_bytes(WSPM_XFORM_BYTES, WSP_DTYPE_U8), WSP_EFORMAT);
	CHECK_RC(xform_elem_bytes(WSPM_XFORM_BYTES, WSP_DTYPE_F4), WSP_EFORMAT);
	CHECK_RC(xform_elem_bytes(WSPM_XFORM_BYTES, -1), WSP_EFORMAT);
	CHECK_RC(xform_elem_bytes(WSPM_XFORM_EXP_BF16, WSP_DTYPE_BF16), 2);
	CHECK_RC(xform_elem_bytes(WSPM_XFORM_EXP_F32, WSP_DTYPE_F32), 4);
	CHECK_RC(xform_elem_bytes((enum wspm_transform)9, WSP_DTYPE_F32), WSP_EFORMAT);
}

int main(void)
{
	static const struct { enum wspm_transform t; unsigned es; } xf[] = {
		{ WSPM_XFORM_NONE, 0 }, { WSPM_XFORM_BYTES, 2 }, { WSPM_XFORM_BYTES, 4 },
		{ WSPM_XFORM_BYTES, 8 }, { WSPM_XFORM_EXP_BF16, 2 }, { WSPM_XFORM_EXP_F32, 4 },
	};
	static const size_t lens[] = { 0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65,
				       255, 1000, 4097, 65536 + 3, 300001 };
	unsigned i, j, r;

	check_layout();
	check_elem_bytes();
	for (i = 0; i < WSP_ARRAY_SIZE(xf); i++) {
		for (j = 0; j < WSP_ARRAY_SIZE(lens); j++) {
			size_t len = lens[j];
			uint8_t *raw = malloc(len + 1), *pl = malloc(len + 1);
			uint8_t *back = malloc(len + 1);
			CHECK(raw && pl && back);
			t_fill(raw, len, WSP_DTYPE_U8, T_RANDOM);
			xform_forward(xf[i].t, xf[i].es, raw, len, pl);
			memset(back, 0, len + 1);
			xform_inverse_range(xf[i].t, xf[i].es, pl, len, 0, len, back);
			CHECK(memcmp(raw, back, len) == 0);
			CHECK(back[len] == 0);
			/* random pieces, boundaries anywhere */
			for (r = 0; r < 50 && len; r++) {
				size_t a = t_rand() % (len + 1), b = t_rand() % (len + 1);
				if (a > b) { size_t x = a; a = b; b = x; }
				memset(back, 0xee, len + 1);
				xform_inverse_range(xf[i].t, xf[i].es, pl, len, a, b - a, back + a);
				CHECK(memcmp(raw + a, back + a, b - a) == 0);
				CHECK(back[b] == 0xee && (a == 0 || back[a - 1] == 0xee));
			}
			free(raw);
			free(pl);
			free(back);
		}
	}
	return 0;
}
