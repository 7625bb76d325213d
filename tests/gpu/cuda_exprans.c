/* The CUDA EXPRANS decoder against the C reference: every kind of bf16,
 * f16 and f32 data (Gaussian, heavy-tailed, one exponent, NaN/Inf/
 * subnormals, random bits; fp32 upcast from bf16 and fp16, whose coded low
 * halves have byte planes of one symbol and packed ones, and the full
 * frequency tables of older packs) at odd sizes (0, 1, 2, a lane +-1, a block +-1,
 * several blocks, a 2 MiB chunk), all in one launch, decodes byte for byte
 * as the CPU does with status 0.  Damaged streams of 16- and 32-bit values
 * (bytes flipped in the header, lane table, lanes and packed indices; an
 * index past a packed plane's symbols; truncated; a wrong value count or
 * width; a misaligned start; a chunk too large) are
 * rejected exactly when the reference rejects them, and decode identically
 * when it accepts them.  The same launch's copy and
 * zero jobs (a packed layer's raw chunks and padding) equal memcpy and
 * memset, aligned or not, larger than the grid or not.  Every launch is
 * made twice more as the pager makes it (the status words stored by a
 * kernel into mapped host memory, the device's words left at zero for the
 * next launch): the same words, the same output.  Skips (77) without a
 * GPU. */
#include <cuda_runtime_api.h>

#include "cuda_check.h"

#include "../codec/codec_test.h"
#include "../codec/exprans_sections.h"
#include "../codec/float_data.h"
#include "pack/exprans/exprans.h"
#include "pack/exprans/exprans_gpu.h"

struct stream {
	uint8_t *enc;       /* host copy of the stored bytes */
	size_t len;
	uint64_t n;         /* values the job claims */
	unsigned w;         /* bytes a value the job claims (2, 4; others refused) */
	unsigned flags;     /* the layout: coded low halves (32-bit), top bit coded */
	uint64_t at;        /* offset in the device input buffer */
	int cpu_rc;
	char cpu_msg[160];   /* the reference's reason, when it refuses */
	uint8_t *cpu;       /* the reference's output (when it accepts) */
};

/* Output bytes of a stream's job (a refused width: as 4). */
static uint64_t out_bytes(const struct stream *s)
{
	return s->n * (s->w == 2 ? 2 : 4);
}

/* Decode every stream on the GPU in one launch: outputs and status back.
 * Then again as the pager does (exprans_gpu_decode_report: status words
 * zero on entry, stored by a kernel into mapped pinned host memory): the
 * same words and output, and the device's words left at zero. */
static void gpu_decode(struct stream *s, unsigned k, unsigned misalign_last, uint8_t **out,
		       uint32_t *status)
{
	uint64_t in_total = 0, out_total = 0, max_out = 0;
	unsigned layouts = 0;
	for (unsigned i = 0; i < k; i++) {
		layouts |= s[i].flags;
		if (s[i].n <= EXPRANS_GPU_MAX_VALUES && out_bytes(&s[i]) > max_out)
			max_out = out_bytes(&s[i]);   /* a larger one fails before decoding */
		s[i].at = in_total + (i == k - 1 ? misalign_last : 0);
		in_total = (s[i].at + s[i].len + 15) & ~15ull;
		out_total += (out_bytes(&s[i]) + 15) & ~15ull;
	}
	uint8_t *din, *dout;
	uint32_t *dstatus;
	struct exprans_gpu_job *jobs = calloc(k, sizeof(*jobs)), *djobs;
	CHECK(jobs);
	CU(cudaMalloc((void **)&din, in_total + 16));
	CU(cudaMalloc((void **)&dout, out_total + 16));
	CU(cudaMalloc((void **)&dstatus, k * sizeof(uint32_t)));
	CU(cudaMalloc((void **)&djobs, k * sizeof(*jobs)));
	CU(cudaMemset(dout, 0xee, out_total + 16));
	CU(cudaMemset(dstatus, 0xff, k * sizeof(uint32_t)));   /* the decoder sets them */
	uint64_t o = 0;
	for (unsigned i = 0; i < k; i++) {
		CU(cudaMemcpy(din + s[i].at, s[i].enc, s[i].len, cudaMemcpyHostToDevice));
		jobs[i] = (struct exprans_gpu_job){ .in_off = s[i].at, .out_off = o, .in_bytes = s[i].len,
						    .n = s[i].n, .kind = EXPRANS_GPU_DECODE,
						    .width = s[i].w, .flags = s[i].flags };
		o += (out_bytes(&s[i]) + 15) & ~15ull;
	}
	CU(cudaMemcpy(djobs, jobs, k * sizeof(*jobs), cudaMemcpyHostToDevice));
	CHECK_RC(exprans_gpu_decode(din, dout, djobs, k, layouts, max_out, dstatus, NULL), 0);
	CU(cudaDeviceSynchronize());
	CU(cudaMemcpy(status, dstatus, k * sizeof(uint32_t), cudaMemcpyDeviceToHost));
	for (unsigned i = 0; i < k; i++) {
		out[i] = malloc(out_bytes(&s[i]) + 4);
		CHECK(out[i]);
		CU(cudaMemcpy(out[i], dout + jobs[i].out_off, out_bytes(&s[i]), cudaMemcpyDeviceToHost));
	}

	uint32_t *report, *view, *left = malloc(k * sizeof(uint32_t) + 4);
	uint8_t *again = malloc(max_out + 4);
	CHECK(left && again);
	CU(cudaHostAlloc((void **)&report, k * sizeof(uint32_t) + 4, cudaHostAllocMapped));
	CU(cudaHostGetDevicePointer((void **)&view, report, 0));
	memset(report, 0xff, k * sizeof(uint32_t));   /* the kernel stores every word */
	CU(cudaMemset(dout, 0xee, out_total + 16));
	CU(cudaMemset(dstatus, 0, k * sizeof(uint32_t)));
	for (int round = 0; round < 2; round++) {   /* the second on the words the first left */
		CHECK_RC(exprans_gpu_decode_report(din, dout, djobs, k, layouts, max_out, dstatus, view,
						   NULL), 0);
		CU(cudaDeviceSynchronize());
		CU(cudaMemcpy(left, dstatus, k * sizeof(uint32_t), cudaMemcpyDeviceToHost));
		for (unsigned i = 0; i < k; i++) {
			CHECK(report[i] == status[i]);
			CHECK(left[i] == 0);
		}
	}
	for (unsigned i = 0; i < k; i++) {
		if (status[i])
			continue;   /* refused: no output to compare (and it may exceed max_out) */
		CU(cudaMemcpy(again, dout + jobs[i].out_off, out_bytes(&s[i]), cudaMemcpyDeviceToHost));
		CHECK(memcmp(again, out[i], out_bytes(&s[i])) == 0);
	}
	CU(cudaFreeHost(report));
	free(left);
	free(again);
	cudaFree(din);
	cudaFree(dout);
	cudaFree(dstatus);
	cudaFree(djobs);
	free(jobs);
}

static void reference(struct stream *s)
{
	struct wspi_err err;
	wspi_err_init(&err);
	s->cpu = malloc(out_bytes(s) + 4);
	CHECK(s->cpu);
	s->cpu_rc = exprans_decode(s->enc, s->len, s->cpu, s->n, s->w, s->flags, &err);
	/* the reason's start is enough to show beside the GPU's */
	snprintf(s->cpu_msg, sizeof(s->cpu_msg), "%.*s", (int)sizeof(s->cpu_msg) - 1,
		 s->cpu_rc ? err.msg : "");
	wspi_err_destroy(&err);
}

/* n values of a kind coded with `flags`; without the top bit where it
 * does not fit them. */
static struct stream encode(uint64_t n, enum kind kind, int dtype, unsigned flags)
{
	struct stream s = { 0 };
	unsigned w = exprans_value_bytes(dtype);
	uint8_t *v = malloc(n * w + 4);
	size_t cap = exprans_bound(n, w, flags);
	s.enc = malloc(cap);
	CHECK(v && s.enc);
	fill_values(v, n, dtype, kind);
	if (!exprans_top_bit_fits(v, n, w))
		flags &= ~EXPRANS_TOP_BIT;
	int64_t len = exprans_encode(v, n, w, flags, s.enc, cap);
	CHECK(len > 0);
	s.len = (size_t)len;
	s.n = n;
	s.w = w;
	s.flags = flags;
	free(v);
	return s;
}

/* A top-bit stream whose sign|mantissa section takes `form` (0 one
 * symbol, 1 packed at 4 bits, 2 lanes; exprans_sections.h): layout 0
 * bf16, 1 f32 with raw low halves, 2 f32 upcast with coded low halves. */
static struct stream encode_shaped(uint64_t n, int form, unsigned layout)
{
	struct stream s = { 0 };
	unsigned w = layout ? 4 : 2, flags = EXPRANS_TOP_BIT | (layout == 2 ? EXPRANS_LOW_PLANES : 0);
	uint16_t *h = malloc(n * 2 + 2);
	uint32_t *v = malloc(n * 4 + 4);
	size_t cap = exprans_bound(n, w, flags);
	s.enc = malloc(cap);
	CHECK(h && v && s.enc);
	fill(h, n, GAUSS);
	for (uint64_t i = 0; i < n; i++) {
		h[i] = exprans_shape_sign_mant(h[i], form, t_rand);
		v[i] = (uint32_t)h[i] << 16 | (layout == 1 ? (uint32_t)(t_rand() & 0xffff) : 0);
	}
	int64_t len = exprans_encode(w == 2 ? (const void *)h : (const void *)v, n, w, flags,
				     s.enc, cap);
	CHECK(len > 0);
	CHECK(n < 1000 || exprans_sign_mant_form(s.enc, n, flags) == form);
	s.len = (size_t)len;
	s.n = n;
	s.w = w;
	s.flags = flags;
	free(h), free(v);
	return s;
}

int main(void)
{
	t_need_gpu();

	/* Good streams: every kind, odd sizes. */
	static const uint64_t sizes[] = { 0, 1, 2, 3, 31, 32, 33, 1000, 32767, 32768, 32769,
					  65541, 300000, 1u << 20 };
	/* layouts: plain; f32 with coded low halves; the same with the full
	 * frequency tables of packs written before the compact form; the top
	 * bit coded (where the values' pairs fit), with and without coded low
	 * halves.  The upcast kinds (fp32 only) make byte planes of one
	 * symbol and packed ones. */
	static const struct { int dtype; unsigned flags; int compact; } layout[] = {
		{ WSP_DTYPE_BF16, 0, 1 }, { WSP_DTYPE_F16, 0, 1 }, { WSP_DTYPE_F32, 0, 1 },
		{ WSP_DTYPE_F32, EXPRANS_LOW_PLANES, 1 }, { WSP_DTYPE_F32, EXPRANS_LOW_PLANES, 0 },
		{ WSP_DTYPE_BF16, EXPRANS_TOP_BIT, 1 }, { WSP_DTYPE_F16, EXPRANS_TOP_BIT, 1 },
		{ WSP_DTYPE_F32, EXPRANS_TOP_BIT, 1 },
		{ WSP_DTYPE_F32, EXPRANS_LOW_PLANES | EXPRANS_TOP_BIT, 1 },
	};
	enum { KINDS = LAST_KIND + 1, NS = sizeof(sizes) / sizeof(sizes[0]),
	       NT = sizeof(layout) / sizeof(layout[0]) };
	static struct stream good[NT * KINDS * NS + 3 * 3 * NS];
	unsigned k = 0, top = 0;
	/* the top bit's last section in each form, each layout */
	for (int form = 0; form < 3; form++)
		for (unsigned lay = 0; lay < 3; lay++)
			for (unsigned i = 0; i < NS; i++) {
				good[k] = encode_shaped(sizes[i], form, lay);
				reference(&good[k]);
				CHECK_RC(good[k].cpu_rc, 0);
				top++;
				k++;
			}
	for (int d = 0; d < NT; d++)
		for (int kind = 0; kind < KINDS; kind++)
			for (unsigned i = 0; i < NS; i++) {
				if (layout[d].dtype != WSP_DTYPE_F32 && kind > BITS)
					continue;   /* upcasts are fp32 */
				exprans_compact = layout[d].compact;
				good[k] = encode(sizes[i], (enum kind)kind, layout[d].dtype,
						 layout[d].flags);
				exprans_compact = 1;
				top += !!(good[k].flags & EXPRANS_TOP_BIT);
				reference(&good[k]);
				CHECK_RC(good[k].cpu_rc, 0);
				k++;
			}
	static uint8_t *out[NT * KINDS * NS + 3 * 3 * NS];
	static uint32_t status[NT * KINDS * NS + 3 * 3 * NS];
	gpu_decode(good, k, 0, out, status);
	uint64_t values = 0;
	for (unsigned i = 0; i < k; i++) {
		if (status[i])
			fprintf(stderr, "stream %u (%llu values): %s\n", i,
				(unsigned long long)good[i].n, exprans_gpu_status_text(status[i]));
		CHECK(status[i] == 0);
		CHECK(memcmp(out[i], good[i].cpu, out_bytes(&good[i])) == 0);
		values += good[i].n;
		free(out[i]);
	}
	CHECK(top > 200);
	printf("%u good streams (%u with the top bit coded), %llu values: the GPU decodes each "
	       "as the CPU does\n", k, top, (unsigned long long)values);

	/* COPY and ZERO jobs (a packed layer's raw chunks and padding):
	 * aligned and not, and one larger than the grid (40 MiB). */
	{
		enum { NJ = 5 };
		uint64_t big = 40ull << 20, cap = big + (2u << 20);
		struct exprans_gpu_job cj[NJ] = {
			{ .in_off = 0, .out_off = 0, .in_bytes = (1u << 20) + 16, .kind = EXPRANS_GPU_COPY },
			{ .in_off = 3, .out_off = (1u << 20) + 37, .in_bytes = 70001, .kind = EXPRANS_GPU_COPY },
			{ .out_off = (1u << 20) + 80000, .in_bytes = 777, .kind = EXPRANS_GPU_ZERO },
			{ .out_off = (1u << 20) + 81920, .in_bytes = 4096, .kind = EXPRANS_GPU_ZERO },
			{ .in_off = 2u << 20, .out_off = 2u << 20, .in_bytes = big, .kind = EXPRANS_GPU_COPY },
		};
		uint8_t *hin = malloc(cap), *hout = malloc(cap), *want = malloc(cap);
		uint8_t *din, *dout;
		struct exprans_gpu_job *dj;
		uint32_t *dst, st[NJ];
		CHECK(hin && hout && want);
		for (uint64_t i = 0; i < cap; i++)
			hin[i] = (uint8_t)t_rand();
		memset(want, 0xee, cap);
		for (int i = 0; i < NJ; i++)
			if (cj[i].kind == EXPRANS_GPU_COPY)
				memcpy(want + cj[i].out_off, hin + cj[i].in_off, cj[i].in_bytes);
			else
				memset(want + cj[i].out_off, 0, cj[i].in_bytes);
		CU(cudaMalloc((void **)&din, cap));
		CU(cudaMalloc((void **)&dout, cap));
		CU(cudaMalloc((void **)&dj, sizeof(cj)));
		CU(cudaMalloc((void **)&dst, sizeof(st)));
		CU(cudaMemcpy(din, hin, cap, cudaMemcpyHostToDevice));
		CU(cudaMemset(dout, 0xee, cap));
		CU(cudaMemcpy(dj, cj, sizeof(cj), cudaMemcpyHostToDevice));
		CHECK_RC(exprans_gpu_decode(din, dout, dj, NJ, 0, big, dst, NULL), 0);
		CU(cudaMemcpy(hout, dout, cap, cudaMemcpyDeviceToHost));
		CU(cudaMemcpy(st, dst, sizeof(st), cudaMemcpyDeviceToHost));
		for (int i = 0; i < NJ; i++)
			CHECK(st[i] == 0);
		CHECK(memcmp(hout, want, cap) == 0);
		printf("copy and zero jobs (aligned, unaligned, 40 MiB): as memcpy and memset\n");
		cudaFree(din);
		cudaFree(dout);
		cudaFree(dj);
		cudaFree(dst);
		free(hin);
		free(hout);
		free(want);
	}

	/* Damaged copies of three-block Gaussian streams, bf16, f32 and f32
	 * with coded low halves. */
	enum { TRIALS = 4400, EXTRA = 10 };
	struct stream base16 = encode(70001, GAUSS, WSP_DTYPE_BF16, 0);
	struct stream base32 = encode(70001, GAUSS, WSP_DTYPE_F32, 0);
	struct stream base32p = encode(70001, GAUSS, WSP_DTYPE_F32, 1);
	/* compact frequencies: both planes of one symbol; one plane of 8 (packed
	 * at 3 bits); packed planes of 255 and 2 symbols; one of 16 (4 bits) */
	struct stream base32c = encode(70001, LOW_CONST, WSP_DTYPE_F32, 1);
	struct stream base32h = encode(70001, UPCAST_F16, WSP_DTYPE_F32, 1);
	struct stream base32k = encode(70001, UPCAST_BYTE1, WSP_DTYPE_F32, 1);
	struct stream base32n = encode(70001, UPCAST_NOISY, WSP_DTYPE_F32, 1);
	/* the top bit coded: bf16, f32, and f32 with coded low halves */
	struct stream base16t = encode(70001, GAUSS, WSP_DTYPE_BF16, EXPRANS_TOP_BIT);
	struct stream base32t = encode(70001, GAUSS, WSP_DTYPE_F32, EXPRANS_TOP_BIT);
	struct stream base32pt = encode(70001, UPCAST_NOISY, WSP_DTYPE_F32,
					EXPRANS_LOW_PLANES | EXPRANS_TOP_BIT);
	CHECK(base16t.flags && base32t.flags == EXPRANS_TOP_BIT && base32pt.flags == 3);
	/* and with a sign|mantissa section coded by lanes */
	struct stream base16l = encode_shaped(70001, 2, 0), base32l = encode_shaped(70001, 2, 2);
	struct stream *bad = calloc(TRIALS + EXTRA, sizeof(*bad));
	CHECK(bad);
	for (unsigned t = 0; t < TRIALS; t++) {
		struct stream *s = &bad[t];
		struct stream *const bases[13] = { &base32, &base32p, &base32c, &base32h, &base32k,
						   &base32n, &base16, &base16, &base16t, &base32t,
						   &base32pt, &base16l, &base32l };
		struct stream *base = bases[t % 13];
		/* header, sections: not the raw parts (low halves, sign|mantissa) */
		unsigned planes = base->flags & EXPRANS_LOW_PLANES, topb = base->flags & EXPRANS_TOP_BIT;
		uint64_t body = base->len - (base->w == 4 && !planes ? 2 * base->n : 0) -
				(topb ? 0 : base->n);
		*s = *base;
		s->enc = malloc(base->len);
		CHECK(s->enc);
		memcpy(s->enc, base->enc, base->len);
		if (t % 10 == 9) {
			s->len = t_rand() % base->len;                  /* truncated */
		} else {
			unsigned flips = 1 + t_rand() % 3;
			for (unsigned f = 0; f < flips; f++)
				s->enc[t_rand() % body] ^= (uint8_t)(1u << (t_rand() % 8));
		}
	}
	/* Whole and right, but claimed as another count or width; too many
	 * values; a width of 3; at an odd address. */
	bad[TRIALS] = base16;
	bad[TRIALS].n = base16.n + 1;
	bad[TRIALS + 1] = base16;
	bad[TRIALS + 1].w = 4;
	bad[TRIALS + 2] = base32;
	bad[TRIALS + 2].w = 3;
	uint8_t huge[EXPRANS_HEADER + 64] = { 0 };
	uint64_t too_many = EXPRANS_GPU_MAX_VALUES + 1;
	memcpy(huge, &too_many, 4);
	bad[TRIALS + 3] = (struct stream){ .enc = huge, .len = sizeof(huge), .n = too_many, .w = 2 };
	bad[TRIALS + 4] = base32p;   /* coded low halves, claimed raw */
	bad[TRIALS + 4].flags = 0;
	bad[TRIALS + 5] = base32;    /* and the other way */
	bad[TRIALS + 5].flags = EXPRANS_LOW_PLANES;
	/* a packed plane's index naming a symbol it lacks (255 of 256) */
	bad[TRIALS + 6] = base32k;
	bad[TRIALS + 6].enc = malloc(base32k.len);
	CHECK(bad[TRIALS + 6].enc);
	memcpy(bad[TRIALS + 6].enc, base32k.enc, base32k.len);
	uint64_t packed = 4 + exprans_section_len(base32k.enc, 4, base32k.n);
	CHECK(base32k.enc[packed] == 0xff && base32k.enc[packed + 1] == 0x40 &&
	      packed + 2 + 256 + 100 < base32k.len);
	bad[TRIALS + 6].enc[packed + 2 + 256 + 100] = 0xff;
	bad[TRIALS + 7] = base16t;   /* the top bit coded, claimed not */
	bad[TRIALS + 7].flags = 0;
	bad[TRIALS + 8] = base16;    /* and the other way */
	bad[TRIALS + 8].flags = EXPRANS_TOP_BIT;
	bad[TRIALS + 9] = base16;    /* placed at an odd address (the last) */
	unsigned nbad = TRIALS + EXTRA;
	for (unsigned t = 0; t < nbad; t++)
		if (t != TRIALS + 3)
			reference(&bad[t]);
	bad[TRIALS + 3].cpu_rc = -1;
	bad[TRIALS + 3].cpu = NULL;
	uint8_t **bout = calloc(nbad, sizeof(*bout));
	uint32_t *bstatus = calloc(nbad, sizeof(*bstatus));
	CHECK(bout && bstatus);
	gpu_decode(bad, nbad, 1, bout, bstatus);
	unsigned rejected = 0, accepted = 0;
	for (unsigned t = 0; t < nbad; t++) {
		if (t == TRIALS + 3 || t == nbad - 1)
			continue;   /* no reference (too big), or at an odd address */
		int cpu_ok = bad[t].cpu_rc == 0, gpu_ok = bstatus[t] == 0;
		if (cpu_ok != gpu_ok)
			fprintf(stderr, "trial %u (%zu bytes, %s): CPU %d (%s), GPU %s\n", t, bad[t].len,
				bad[t].flags & EXPRANS_LOW_PLANES ? "coded low halves" : "values", bad[t].cpu_rc,
				bad[t].cpu_msg, exprans_gpu_status_text(bstatus[t]));
		CHECK(cpu_ok == gpu_ok);
		if (cpu_ok)
			CHECK(memcmp(bout[t], bad[t].cpu, out_bytes(&bad[t])) == 0);
		rejected += !gpu_ok;
		accepted += gpu_ok;
	}
	CHECK(bstatus[TRIALS] & EXPRANS_GPU_BAD_HEADER);
	CHECK(bstatus[TRIALS + 1] & EXPRANS_GPU_BAD_LANES);
	CHECK(bstatus[TRIALS + 2] & EXPRANS_GPU_BAD_HEADER);
	CHECK(bstatus[TRIALS + 3] & EXPRANS_GPU_TOO_BIG);
	CHECK(bstatus[TRIALS + 4] != 0 && bstatus[TRIALS + 5] != 0);   /* layout claimed wrong */
	CHECK(bstatus[TRIALS + 6] & EXPRANS_GPU_BAD_PACKED);
	CHECK(bad[TRIALS + 6].cpu_rc == WSP_EFORMAT);
	CHECK(bstatus[TRIALS + 7] != 0 && bstatus[TRIALS + 8] != 0);   /* layout claimed wrong */
	CHECK(bstatus[TRIALS + 9] & EXPRANS_GPU_BAD_HEADER);
	CHECK(rejected > TRIALS / 2);
	printf("%u damaged streams (bf16, f32, f32 with coded low halves: full, compact, "
	       "packed; the top bit coded): %u rejected, %u accepted (as by the CPU, same "
	       "output)\n", nbad - 2, rejected, accepted);
	for (unsigned t = 0; t < nbad; t++) {
		free(bout[t]);
		free(bad[t].cpu);
		if (t < TRIALS || t == TRIALS + 6)
			free(bad[t].enc);   /* the rest share their base's */
	}
	free(bout);
	free(bstatus);
	free(bad);
	free(base16.enc);
	free(base16.cpu);
	free(base32.enc);
	free(base32.cpu);
	free(base32p.enc);
	free(base32p.cpu);
	free(base32c.enc);
	free(base32c.cpu);
	free(base32h.enc);
	free(base32h.cpu);
	free(base16t.enc);
	free(base16t.cpu);
	free(base32t.enc);
	free(base32t.cpu);
	free(base32pt.enc);
	free(base32pt.cpu);
	free(base16l.enc);
	free(base32l.enc);
	free(base32k.enc);
	free(base32n.enc);
	for (unsigned i = 0; i < k; i++) {
		free(good[i].enc);
		free(good[i].cpu);
	}
	return 0;
}
