/* A layer that also holds a sub-byte tensor (F4: two values a byte, as a
 * quantised model stores weights) trains like any other: a gradient
 * pushed for its bf16 tensor accumulates, one for the F4 tensor is a
 * clear error, and wsp_update of both writes their bytes with the right
 * checksums.  Element sizes were once taken as bits / 8, zero for F4. */
#include <stdlib.h>
#include <string.h>

#include "pack/writer.h"
#include "testlib.h"
#include "wspager.h"

int main(void)
{
	struct wsp_convert_options copt;
	struct pack_writer *pw;
	struct wspi_err err;
	char dir[600], msg[512];
	uint16_t w[64];
	uint8_t q[3] = { 0x12, 0x34, 0x56 };
	float b[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	const uint64_t sw[1] = { 64 }, sq[1] = { 6 }, sb[1] = { 8 };

	for (int i = 0; i < 64; i++)
		w[i] = (uint16_t)(0x3f80 + i);
	wspi_err_init(&err);
	wsp_convert_options_init(&copt);
	snprintf(dir, sizeof(dir), "%s/p", t_scratch("subbyte"));
	CHECK_RC(pack_writer_create(dir, &copt, &pw, &err), 0);
	CHECK_RC(pack_writer_add_tensor(pw, "model.layers.0.w", NULL, WSP_DTYPE_BF16, 1, sw, w,
					sizeof(w), 0, 0, 0), 0);
	CHECK_RC(pack_writer_add_tensor(pw, "model.layers.0.q", NULL, WSP_DTYPE_F4, 1, sq, q,
					sizeof(q), 0, 0, 0), 0);
	CHECK_RC(pack_writer_add_tensor(pw, "model.layers.0.b", NULL, WSP_DTYPE_F32, 1, sb, b,
					sizeof(b), 0, 0, 0), 0);
	CHECK_RC(pack_writer_finish(pw), 0);
	pack_writer_free(pw);

	struct wsp_options o;
	wsp_options_init(&o);
	o.device = WSP_DEVICE_HOST;
	o.host_cache_bytes = 4 << 20;
	wsp_pager *pg;
	CHECK_RC(wsp_open(dir, &o, &pg, msg, sizeof(msg)), 0);
	const struct wsp_layer *L;
	CHECK_RC(wsp_acquire(pg, 0, NULL, &L), 0);
	CHECK(L->n_tensors == 3);
	int iw = -1, iq = -1, ib = -1;
	for (uint32_t t = 0; t < L->n_tensors; t++) {
		const char *s = L->tensors[t].short_name;
		if (!strcmp(s, "w"))
			iw = (int)t;
		else if (!strcmp(s, "q"))
			iq = (int)t;
		else if (!strcmp(s, "b"))
			ib = (int)t;
	}
	CHECK(iw >= 0 && iq >= 0 && ib >= 0);
	CHECK_RC(wsp_release(pg, 0, NULL), 0);

	/* gradients: the bf16 tensor's twice (added), the F4 one refused */
	uint16_t g[64];
	for (int i = 0; i < 64; i++)
		g[i] = (uint16_t)(0x3c00 + i);
	const void *grads[3] = { NULL, NULL, NULL };
	grads[iw] = g;
	CHECK_RC(wsp_grad_push(pg, 0, grads, NULL), 0);
	CHECK_RC(wsp_grad_push(pg, 0, grads, NULL), 0);
	CHECK_RC(wsp_grad_wait(pg, 0), 0);
	struct wsp_grads gr;
	CHECK_RC(wsp_grad_get(pg, 0, &gr), 0);
	CHECK(gr.data[iw] && !gr.data[iq] && !gr.data[ib]);
	for (int i = 0; i < 64; i++)
		CHECK(gr.data[iw][i] == t_bf16f(g[i]) + t_bf16f(g[i]));
	const void *bad[3] = { NULL, NULL, NULL };
	bad[iq] = q;
	CHECK_RC(wsp_grad_push(pg, 0, bad, NULL), WSP_EDTYPE);

	/* new values for the F4 and bf16 tensors: bytes and checksums */
	uint8_t q2[3] = { 0xab, 0xcd, 0xef };
	uint16_t w2[64];
	for (int i = 0; i < 64; i++)
		w2[i] = (uint16_t)(0x4000 + 3 * i);
	const void *vals[3] = { NULL, NULL, NULL };
	vals[iq] = q2;
	vals[iw] = w2;
	CHECK_RC(wsp_update(pg, 0, vals), 0);
	CHECK_RC(wsp_acquire(pg, 0, NULL, &L), 0);
	CHECK(!memcmp(L->tensors[iq].data, q2, 3) && !memcmp(L->tensors[iw].data, w2, sizeof(w2)));
	CHECK(!memcmp(L->tensors[ib].data, b, sizeof(b)));
	for (uint32_t t = 0; t < L->n_tensors; t++)
		CHECK(wsp_checksum64(L->tensors[t].data, L->tensors[t].bytes) ==
		      L->tensors[t].checksum);
	CHECK_RC(wsp_release(pg, 0, NULL), 0);
	wsp_close(pg);
	wspi_err_destroy(&err);
	*strrchr(dir, '/') = '\0';
	t_rmrf(dir);
	return 0;
}
