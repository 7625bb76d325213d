/*
 * EXPRANS decoder for CUDA (see exprans_gpu.h; the stream is described in
 * exprans.h and wspack(5)); 16-bit values (bf16, f16) and 32-bit (f32).  Thread blocks of 8 warps, a chunk's blocks of
 * 32768 values spread over as many as it needs (grid y): each thread block
 * builds the chunk's 4096-slot decode table in shared memory and checks the
 * header and the lane table, then each warp decodes one block of values,
 * lane j of the warp running rANS lane j of the block.  At step k the warp writes values
 * 32k..32k+31 of the block: the stores and the loads of the raw parts are
 * coalesced, and each lane's 16-bit words come from its own stream, in
 * order.  Every check of the C reference is made; problems become bits of
 * the chunk's status word, and checks that guard later reads end the block
 * before those reads (all threads together: __syncthreads_or).  32-bit
 * values with coded low halves (DECODE_PLANES jobs) take three passes, one
 * a section, the table of each built in place of the last: the upper
 * halves, then bits 15..8 and bits 7..0 stored as bytes into the values;
 * a byte plane of one symbol (compact frequencies, no lanes) is stored
 * as it is, or left as the first pass wrote it when that symbol is 0, and
 * a packed one from its indices.  Each value's bytes are written by one
 * thread in every pass (lane j of the warp of its block), so the passes
 * need no ordering beyond program order.  With the top mantissa bit coded
 * (EXPRANS_TOP_BIT) the first pass writes bits 14..6 of each upper half
 * (and raw low halves) with the sign and bits 5..0 read from their
 * section's packed indices (or its one symbol) as it goes; a section of
 * theirs coded with lanes gets a last pass that ORs them in.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "pack/exprans/exprans_gpu.h"

#define LANES 32u
#define BLOCK 32768u
#define PROB 4096u
#define RANS_L 65536u
#define HEADER (4u + 2u * 256u)
#define MAX_LANE_BYTES (4u + 2u * (BLOCK / LANES))
#define WARPS 8u
#define THREADS (WARPS * 32u)
#define MAX_BLOCKS (EXPRANS_GPU_MAX_VALUES / BLOCK)
#define AHEAD 16u

/* A 16-bit little-endian word at an even address. */
__device__ static inline uint32_t ld16(const uint8_t *p)
{
	return *(const uint16_t *)p;
}

__device__ static inline uint32_t warp_inclusive_sum(uint32_t v, unsigned lane)
{
	for (unsigned d = 1; d < 32; d <<= 1) {
		uint32_t o = __shfl_up_sync(0xffffffffu, v, d);
		if (lane >= d)
			v += o;
	}
	return v;
}

/* COPY and ZERO jobs: this thread block's pieces of 512 KiB of the output
 * (grid y, then every gridDim.y-th), 16 bytes at a time where both ends
 * allow. */
__device__ static void copy_part(const uint8_t *in, uint8_t *out, uint64_t len, int zero)
{
	const uint64_t part = (uint64_t)WARPS * BLOCK * 2;
	for (uint64_t a = (uint64_t)blockIdx.y * part; a < len; a += (uint64_t)gridDim.y * part) {
		uint64_t b = a + part < len ? a + part : len, at = a;
		if (zero || ((uintptr_t)(in + a) | (uintptr_t)(out + a)) % 16 == 0) {
			uint64_t n16 = (b - a) / 16;
			if (zero && (uintptr_t)(out + a) % 16)
				n16 = 0;
			for (uint64_t i = threadIdx.x; i < n16; i += THREADS)
				((uint4 *)(out + a))[i] = zero ? make_uint4(0, 0, 0, 0)
							       : ((const uint4 *)(in + a))[i];
			at = a + n16 * 16;
		}
		for (uint64_t i = at + threadIdx.x; i < b; i += THREADS)
			out[i] = zero ? 0 : in[i];
	}
}

/* What a pass over a block writes: whole values (16-bit, or 32-bit with
 * raw low halves); the upper halves of 32-bit values whose low halves are
 * coded (the low half left zero); one byte of each 32-bit value (byte
 * 1: bits 15..8, byte 0: bits 7..0), the symbol itself; with the top bit
 * coded, the same two first (TOP_*), the sign and bits 5..0 read as they
 * go from a packed or one-symbol section, or ORed in afterwards from one
 * coded by lanes (SIGN_MANT). */
enum pass { VALUES, UPPER, BYTE1, BYTE0, TOP_VALUES, TOP_UPPER, SIGN_MANT };

/* Where a top-bit pass finds each value's 7-bit sign|mantissa symbol:
 * a packed section's indices q (`bits` each, naming k symbols, mapped by
 * top_smap), or one symbol for all (q NULL); with lanes (q NULL, one 0) a
 * pass of their own ORs them in later.  Passed by value: its fields stay
 * in registers through the hot loop. */
struct sign_mant {
	const uint8_t *q;
	uint32_t bits, k, one;
};

/* A packed sign|mantissa section's symbols by index (the top-bit kernel's). */
__shared__ uint8_t top_smap[256];

/* The raw part of value i: its sign|mantissa byte, and for 32-bit values
 * with raw low halves the low half above it (one register, loaded ahead
 * of use); with the top bit coded, the raw low half above the two bytes
 * holding the value's sign|mantissa index; nothing for a byte pass. */
template <unsigned W, int PASS>
__device__ static inline uint32_t raw_part(const uint8_t *sm, const uint8_t *lo, uint64_t i,
					   uint64_t end, const struct sign_mant S)
{
	if (i >= end || (PASS != VALUES && PASS != UPPER && PASS != TOP_VALUES && PASS != TOP_UPPER))
		return 0;
	if (PASS == TOP_VALUES || PASS == TOP_UPPER) {
		/* the raw low half above the bytes holding the value's index */
		uint32_t v = W == 4 && PASS == TOP_VALUES ? ld16(lo + 2 * i) << 16 : 0u;
		if (S.q) {
			/* read-only loads: the kernel never writes its input */
			uint32_t bit = (uint32_t)i * S.bits, w = __ldg(S.q + (bit >> 3));
			if ((bit & 7u) + S.bits > 8u)
				w |= (uint32_t)__ldg(S.q + (bit >> 3) + 1) << 8;
			v |= w;
		}
		return v;
	}
	return W == 4 && PASS == VALUES ? (uint32_t)sm[i] | ld16(lo + 2 * i) << 8 : (uint32_t)sm[i];
}

/* The sign and bits 5..0 of value i's upper half, from its 7-bit symbol
 * (sign << 6 | bits), ORed into what the first pass wrote there. */
template <unsigned W>
__device__ static inline void or_sign_mant(uint8_t *outb, uint64_t i, uint32_t sym)
{
	uint16_t *h = (uint16_t *)(outb + W * i + (W - 2));
	*h |= (uint16_t)((sym & 0x40u) << 9 | (sym & 0x3fu));
}

/* Decode block b of one section of a chunk's values: the calling warp's
 * lane runs rANS lane `lane` from its stream [start, stop) of p, with the
 * section's table (symbols of TOP_* passes stand for base + symbol).
 * Returns status bits. */
template <unsigned W, int PASS>
__device__ static uint32_t decode_block(const uint8_t *p, uint8_t *outb, const uint8_t *sm,
					const uint8_t *lo, const uint32_t *tab, uint32_t start,
					uint32_t stop, uint64_t first, uint64_t end, unsigned lane,
					uint32_t base, const struct sign_mant S)
{
	uint32_t my = 0, off = start + 4;
	/* a section of one symbol has no lanes (start == stop): its table
	 * gives every slot that symbol at frequency 4096, so the state stays */
	uint32_t x = start == stop ? RANS_L : ld16(p + start) | ld16(p + start + 2) << 16;
	if (start == stop)
		off = stop;
	uint32_t steps = (uint32_t)((end - first + LANES - 1) / LANES);
	if (first + lane < end && x < RANS_L)
		my |= EXPRANS_GPU_BAD_START;
	/* The raw parts of the next AHEAD steps are loaded while these AHEAD
	 * are decoded: the loads' latency is hidden even with few warps on the
	 * SM (a small layer). */
	uint32_t cur[AHEAD], nxt[AHEAD];
#pragma unroll
	for (unsigned s = 0; s < AHEAD; s++)
		cur[s] = raw_part<W, PASS>(sm, lo, first + (uint64_t)s * LANES + lane, end, S);
	for (uint32_t k0 = 0; k0 < steps; k0 += AHEAD) {
#pragma unroll
		for (unsigned s = 0; s < AHEAD; s++)
			nxt[s] = raw_part<W, PASS>(sm, lo, first + (uint64_t)(k0 + AHEAD + s) * LANES + lane,
						   end, S);
#pragma unroll
		for (unsigned s = 0; s < AHEAD; s++) {
			uint64_t i = first + (uint64_t)(k0 + s) * LANES + lane;
			if (i >= end)
				break;
			uint32_t e = tab[x & (PROB - 1)];
			uint32_t y = ((e & 0xfffu) + 1) * (x >> 12) + ((e >> 12) & 0xfffu);
			if (y < RANS_L) {
				if (off < stop) {
					y = y << 16 | ld16(p + off);
					off += 2;
				} else {
					my |= EXPRANS_GPU_OVERRUN;
					y <<= 16;
				}
			}
			x = y;
			uint32_t v = cur[s];
			uint32_t hi = (v & 0x80u) << 8 | (e >> 24) << 7 | (v & 0x7fu);
			if (PASS == TOP_VALUES || PASS == TOP_UPPER) {
				uint32_t s7 = S.one;
				if (S.q) {
					uint32_t bit = (uint32_t)i * S.bits;
					uint32_t ix = ((v & 0xffffu) >> (bit & 7u)) & ((1u << S.bits) - 1u);
					if (ix >= S.k)
						my |= EXPRANS_GPU_BAD_PACKED;
					s7 = top_smap[ix & 0xffu];
				}
				hi = ((e >> 24) + base) << 6 | (s7 & 0x40u) << 9 | (s7 & 0x3fu);
			}
			if (PASS == BYTE1 || PASS == BYTE0)
				outb[4 * i + (PASS == BYTE1)] = (uint8_t)(e >> 24);
			else if (PASS == SIGN_MANT)
				or_sign_mant<W>(outb, i, e >> 24);
			else if (W == 4)
				((uint32_t *)outb)[i] = hi << 16 | (PASS == VALUES ? v >> 8
								    : PASS == TOP_VALUES ? v >> 16 : 0u);
			else
				((uint16_t *)outb)[i] = (uint16_t)hi;
		}
#pragma unroll
		for (unsigned s = 0; s < AHEAD; s++)
			cur[s] = nxt[s];
	}
	if (off != stop || x != RANS_L)
		my |= EXPRANS_GPU_BAD_END;
	return my;
}

/* A section's frequencies at f -> cum[0..256], by warp 0, eight symbols a
 * lane; BAD_FREQ unless they sum to 4096 (0 for no values) and every
 * symbol present is at most `limit`.  The full form
 * is 256 u16; the compact one (0x8000 | k, checked by the caller to be 1 to
 * 256) lists the symbols present, spread here through `scratch` (256
 * words no one else uses meanwhile): symbols strictly increasing, each
 * frequency at least 1.  One symbol: frequency 4096. */
__device__ static uint32_t running_sums(const uint8_t *f, uint32_t *scratch, uint32_t *cum,
					uint64_t n, uint32_t limit, unsigned warp, unsigned lane)
{
	uint32_t my = 0;
	if (warp == 0) {
		uint32_t v[8], s = 0, h = ld16(f);
		if (h & 0x8000u) {
			uint32_t k = h & 0x7fffu;
			for (unsigned i = 0; i < 8; i++)
				scratch[lane * 8 + i] = 0;
			__syncwarp();
			const uint8_t *sym = f + 2, *fr = f + 2 + k + (k & 1u);
			if (k == 1 && lane == 0)
				scratch[ld16(f + 2) & 0xffu] = PROB;
			for (uint32_t j = lane; k > 1 && j < k; j += 32) {
				uint32_t q = ld16(fr + 2 * j);
				if (q == 0 || (j && sym[j - 1] >= sym[j]))
					my |= EXPRANS_GPU_BAD_FREQ;
				scratch[sym[j]] = q;
			}
			__syncwarp();
			for (unsigned i = 0; i < 8; i++)
				v[i] = scratch[lane * 8 + i];
			__syncwarp();   /* read before the table overwrites scratch */
		} else {
			for (unsigned i = 0; i < 8; i++)
				v[i] = ld16(f + 2 * (lane * 8 + i));
		}
		for (unsigned i = 0; i < 8; i++) {
			s += v[i];
			if (v[i] && lane * 8 + i > limit)
				my |= EXPRANS_GPU_BAD_FREQ;
		}
		uint32_t incl = warp_inclusive_sum(s, lane), c = incl - s;
		for (unsigned i = 0; i < 8; i++) {
			cum[lane * 8 + i] = c;
			c += v[i];
		}
		if (lane == 31) {
			cum[256] = incl;
			if (incl != (n ? PROB : 0u))
				my |= EXPRANS_GPU_BAD_FREQ;
		}
	}
	return my;
}

/* A section's lane lengths (u16 [nb][32] at lens), checked, each block's
 * sum into blk[]: all warps. */
__device__ static uint32_t lane_sums(const uint8_t *lens, uint64_t nb, uint32_t *blk,
				     unsigned warp, unsigned lane)
{
	uint32_t my = 0;
	for (uint64_t k = warp; k < nb; k += WARPS) {
		uint32_t l = ld16(lens + 2 * (k * LANES + lane));
		if (l < 4 || (l & 1u) || l > MAX_LANE_BYTES)
			my |= EXPRANS_GPU_BAD_LANES;
		uint32_t s = __reduce_add_sync(0xffffffffu, l);
		if (lane == 0)
			blk[k] = s;
	}
	return my;
}

/* Block sums -> block starts, by warp 0; returns the section's total. */
__device__ static uint32_t block_starts(uint32_t *blk, uint64_t nb, unsigned lane)
{
	uint32_t carry = 0;
	for (uint64_t b0 = 0; b0 < nb; b0 += 32) {
		uint32_t v = b0 + lane < nb ? blk[b0 + lane] : 0;
		uint32_t incl = warp_inclusive_sum(v, lane);
		if (b0 + lane < nb)
			blk[b0 + lane] = carry + incl - v;
		carry += __shfl_sync(0xffffffffu, incl, 31);
	}
	return carry;
}

/* The table: slot -> (freq - 1) | (slot - cum) << 12 | symbol << 24, the
 * symbol found by binary search (the largest with cum <= slot). */
__device__ static void build_table(const uint32_t *cum, uint32_t *tab, unsigned t)
{
	for (unsigned slot = t; slot < PROB; slot += THREADS) {
		unsigned lo = 0, hi = 256;
		while (hi - lo > 1) {
			unsigned mid = (lo + hi) / 2;
			if (cum[mid] <= slot)
				lo = mid;
			else
				hi = mid;
		}
		tab[slot] = (cum[lo + 1] - cum[lo] - 1) | (slot - cum[lo]) << 12 | lo << 24;
	}
}

/* How a section's symbols are stored (wspack(5)): rANS lanes; one symbol
 * (compact, no lanes); or packed indices (a byte plane, no lanes). */
enum form { LANES_FORM, ONE_FORM, PACKED_FORM };

/* Bits a packed plane of k symbols gives a value's index. */
__device__ static inline uint32_t index_bits(uint32_t k)
{
	return 32u - __clz(k - 1u);
}

/* A packed plane's index bytes: n * bits, rounded up to even. */
__device__ static inline uint64_t packed_index_bytes(uint32_t k, uint64_t n)
{
	uint64_t bytes = (n * index_bits(k) + 7) / 8;
	return bytes + (bytes & 1u);
}

/* A section's header: its bytes (512 frequencies, a compact form's, or a
 * packed plane's symbols), or 0 when malformed; *form set.  compact: the
 * compact and packed forms allowed (chunks with coded low halves or the
 * top bit); packed only in a byte plane (any section but the first); a
 * section of one symbol's symbol at most `limit`. */
__device__ static inline uint64_t freq_bytes(const uint8_t *p, uint64_t at, uint64_t len,
					     uint64_t n, int compact, int byte_plane, uint32_t limit,
					     int *form)
{
	*form = LANES_FORM;
	if (at + 2 > len)
		return 0;
	uint32_t h = ld16(p + at);
	if ((h & 0xc000u) == 0x4000u) {
		uint32_t k = h & 0x3fffu;
		*form = PACKED_FORM;
		if (!compact || !byte_plane || !n || k < 2 || k > 256)
			return 0;
		return 2 + k + (k & 1u);
	}
	if (!(h & 0x8000u))
		return 2u * 256u;
	uint32_t k = h & 0x7fffu;
	if (!compact || !n || k < 1 || k > 256)
		return 0;
	if (k == 1) {
		*form = ONE_FORM;
		return at + 4 <= len && ld16(p + at + 2) <= limit ? 4 : 0;
	}
	return 2 + k + (k & 1u) + 2 * k;
}

/* A packed plane's header (k symbols at sym, strictly increasing, the
 * last at most `limit`) and the bits past its last index (zero), by warp
 * 0. */
__device__ static uint32_t packed_check(const uint8_t *sym, uint32_t k, uint64_t n,
					uint32_t limit, unsigned warp, unsigned lane)
{
	uint32_t my = 0;
	if (warp != 0)
		return 0;
	if (sym[k - 1] > limit)
		my |= EXPRANS_GPU_BAD_PACKED;
	for (uint32_t j = 1 + lane; j < k; j += 32)
		if (sym[j - 1] >= sym[j])
			my |= EXPRANS_GPU_BAD_PACKED;
	if (lane == 0) {
		const uint8_t *q = sym + k + (k & 1u);
		uint64_t used = n * index_bits(k), bytes = packed_index_bytes(k, n);
		uint32_t spare = (used & 7) ? q[used >> 3] >> (used & 7) : 0;
		for (uint64_t i = (used + 7) >> 3; i < bytes; i++)
			spare |= q[i];
		if (spare)
			my |= EXPRANS_GPU_BAD_PACKED;
	}
	return my;
}

/* Values [first, end) of a packed plane: each value's byte (byte 1 or 0 of
 * the 32-bit value, PASS BYTE1 or BYTE0) is the symbol its index names.  (A
 * packed sign|mantissa section is read by the first pass: raw_part.) */
template <int PASS>
__device__ static uint32_t unpack_block(const uint8_t *sym, uint32_t k, uint8_t *out,
					uint64_t first, uint64_t end, unsigned lane)
{
	const uint8_t *q = sym + k + (k & 1u);
	uint32_t bits = index_bits(k), mask = (1u << bits) - 1, my = 0;
	for (uint64_t i = first + lane; i < end; i += LANES) {
		uint64_t bit = i * bits;
		uint32_t w = q[bit >> 3];
		if ((bit & 7) + bits > 8)
			w |= (uint32_t)q[(bit >> 3) + 1] << 8;
		uint32_t x = (w >> (bit & 7)) & mask;
		if (x >= k)
			my |= EXPRANS_GPU_BAD_PACKED;
		else
			out[4 * i + (PASS == BYTE1)] = sym[x];
	}
	return my;
}

/* Block b's values of the section in its `role` (a pass), rANS-coded;
 * TOP: the roles of the top bit's layouts, the others' otherwise. */
template <unsigned W, bool TOP>
__device__ static uint32_t decode_role(int role, const uint8_t *p, uint8_t *out, const uint8_t *sm,
				       const uint8_t *lo, const uint32_t *tab, uint32_t start,
				       uint32_t stop, uint64_t first, uint64_t end, unsigned lane,
				       uint32_t base, const struct sign_mant S)
{
	if (TOP && role == TOP_VALUES)
		return decode_block<W, TOP_VALUES>(p, out, sm, lo, tab, start, stop, first, end, lane,
						   base, S);
	if (TOP && role == SIGN_MANT)
		return decode_block<W, SIGN_MANT>(p, out, sm, lo, tab, start, stop, first, end, lane, 0, S);
	if (!TOP && role == VALUES)
		return decode_block<W, VALUES>(p, out, sm, lo, tab, start, stop, first, end, lane, 0, S);
	if (W == 2)   /* the rest are 32-bit values with coded low halves */
		return EXPRANS_GPU_BAD_HEADER;
	if (TOP && role == TOP_UPPER)
		return decode_block<4, TOP_UPPER>(p, out, sm, lo, tab, start, stop, first, end, lane,
						  base, S);
	if (!TOP && role == UPPER)
		return decode_block<4, UPPER>(p, out, sm, lo, tab, start, stop, first, end, lane, 0, S);
	switch (role) {
	case BYTE1:
		return decode_block<4, BYTE1>(p, out, sm, lo, tab, start, stop, first, end, lane, 0, S);
	default:
		return decode_block<4, BYTE0>(p, out, sm, lo, tab, start, stop, first, end, lane, 0, S);
	}
}

/* TOP: the kernel for jobs with the top bit coded, which the other skips
 * when `layouts` says this one runs too.  Two kernels: in one, the top
 * bit's code took every layout to 76 registers, and bf16 GPU decode fell
 * from 690 to 561 GB/s.  Both are held to 64 registers (4 thread blocks an
 * SM): the top-bit one decodes bf16 at 380 GB/s so, 280 with 80 registers
 * (bench/exprans_bench, H200). */
template <bool TOP>
__global__ void __launch_bounds__(THREADS, 4)
exprans_decode_kernel(const uint8_t *in, uint8_t *outb, const struct exprans_gpu_job *jobs,
		      unsigned layouts, uint32_t *status)
{
	__shared__ uint32_t tab[PROB];
	__shared__ uint32_t cum[257];
	/* per section and block: its lanes' first byte, from the section's streams */
	__shared__ uint32_t blk[4][MAX_BLOCKS];
	__shared__ uint64_t sec_at[4];    /* each section's start */
	__shared__ uint32_t sec_head[4];  /* its frequencies' bytes */
	__shared__ int sec_form[4];       /* enum form */
	__shared__ uint64_t raw_at;       /* lo[] (raw low halves), then sm[], where present */
	__shared__ uint32_t bad;
	const struct exprans_gpu_job J = jobs[blockIdx.x];
	if (TOP && (J.kind != EXPRANS_GPU_DECODE || !(J.flags & EXPRANS_TOP_BIT)))
		return;   /* uniform: the other kernel's job */
	if (!TOP && J.kind == EXPRANS_GPU_DECODE && (J.flags & EXPRANS_TOP_BIT) &&
	    J.flags <= (EXPRANS_LOW_PLANES | EXPRANS_TOP_BIT)) {
		if (!(layouts & EXPRANS_TOP_BIT) && threadIdx.x == 0 && blockIdx.y == 0)
			atomicOr(&status[blockIdx.x], EXPRANS_GPU_BAD_HEADER);   /* not launched */
		return;
	}
	if (J.kind != EXPRANS_GPU_DECODE) {   /* uniform */
		if (J.kind == EXPRANS_GPU_COPY || J.kind == EXPRANS_GPU_ZERO)
			copy_part(in + J.in_off, outb + J.out_off, J.in_bytes, J.kind == EXPRANS_GPU_ZERO);
		else if (threadIdx.x == 0 && blockIdx.y == 0)
			atomicOr(&status[blockIdx.x], EXPRANS_GPU_BAD_HEADER);
		return;
	}
	uint8_t *out = outb + J.out_off;
	const unsigned t = threadIdx.x, lane = t & 31u, warp = t >> 5;
	const uint8_t *p = in + J.in_off;
	const uint64_t n = J.n, len = J.in_bytes, w = J.width;
	/* the layout (wspack(5)): the sections are the symbols, then bits 15..8
	 * and 7..0 (coded low halves), then the sign and bits 5..0 (top bit) */
	const unsigned planes = J.flags & EXPRANS_LOW_PLANES, top = TOP;
	const unsigned n_sec = 1 + 2 * !!planes + top, compact = planes || top;
	const uint64_t raw_bytes = (w == 4 && !planes ? 2 * n : 0) + (top ? 0 : n);
	const uint64_t nb = (n + BLOCK - 1) / BLOCK;
	const uint64_t b = (uint64_t)blockIdx.y * WARPS + warp;   /* this warp's block */
	uint32_t my = 0, base = 0;
	struct sign_mant S = { NULL, 0, 0, 0 };   /* set once the sections are known */
	unsigned fused = 0;

	if (t == 0) {
		bad = 0;
		sec_at[0] = 4 + 2 * top;
		if ((w != 2 && w != 4) || J.flags > (EXPRANS_LOW_PLANES | EXPRANS_TOP_BIT) ||
		    (planes && w != 4) || len < (compact ? 4 + 2 * top + 4 : HEADER) ||
		    ((uintptr_t)p & 1u) || ((uintptr_t)out & (w - 1)) ||
		    (ld16(p) | ld16(p + 2) << 16) != n || (top && ld16(p + 4) > 0x1ffu))
			my |= EXPRANS_GPU_BAD_HEADER;
		else if (nb > MAX_BLOCKS)
			my |= EXPRANS_GPU_TOO_BIG;
	}
	if (__syncthreads_or(my))
		goto out;
	if (top)
		base = ld16(p + 4);
	/* Where every section starts, each found from the one before's lane
	 * table: sections one after another, then lo[] (raw low halves) and
	 * sm[] where the layout has them. */
	for (unsigned k = 0; k < n_sec; k++) {
		uint64_t at = sec_at[k];
		const uint32_t limit = k == 0 ? (top ? 0x1ffu - base : 0xffu)
				     : top && k == n_sec - 1 ? 0x7fu : 0xffu;
		int form;
		uint64_t head = freq_bytes(p, at, len, n, compact, k > 0, limit, &form);
		/* a packed plane's symbol count (its header is in the stream) */
		uint32_t k_packed = form == PACKED_FORM ? ld16(p + at) & 0x3fffu : 0;
		/* the lane table, or a packed plane's indices */
		uint64_t table = form == LANES_FORM ? nb * LANES * 2
			       : form == PACKED_FORM && head ? packed_index_bytes(k_packed, n)
			       : 0;
		if (head == 0) {
			my |= at + 2 > len ? EXPRANS_GPU_BAD_LANES
			      : form == PACKED_FORM ? EXPRANS_GPU_BAD_PACKED : EXPRANS_GPU_BAD_FREQ;
		} else if (at + head + table > len) {
			my |= form == PACKED_FORM ? EXPRANS_GPU_BAD_PACKED : EXPRANS_GPU_BAD_LANES;
		} else if (form == PACKED_FORM) {
			my |= packed_check(p + at + 2, k_packed, n, limit, warp, lane);
		} else {
			if (k == 0)
				my |= running_sums(p + at, tab, cum, n, limit, warp, lane);
			if (form == LANES_FORM)
				my |= lane_sums(p + at + head, nb, blk[k], warp, lane);
		}
		if (__syncthreads_or(my))
			goto out;
		if (warp == 0) {
			uint32_t total = form == LANES_FORM ? block_starts(blk[k], nb, lane) : 0;
			if (lane == 0) {
				uint64_t next = at + head + table + total;
				sec_head[k] = (uint32_t)head;
				sec_form[k] = form;
				if (k + 1 < n_sec)
					sec_at[k + 1] = next;
				else
					raw_at = next;
				if (k + 1 == n_sec && next + raw_bytes != len)
					my |= EXPRANS_GPU_BAD_LANES;
			}
		}
		if (__syncthreads_or(my))
			goto out;
	}
	if (n)
		build_table(cum, tab, t);
	/* With the top bit, a sign|mantissa section packed or of one symbol is
	 * read by the first pass as it writes each value (as sm[] is): no pass
	 * of its own, no second write of every value. */
	fused = top && (sec_form[n_sec - 1] == PACKED_FORM || sec_form[n_sec - 1] == ONE_FORM);
	if (top && sec_form[n_sec - 1] == PACKED_FORM) {
		const uint8_t *sym = p + sec_at[n_sec - 1] + 2;
		S.k = ld16(p + sec_at[n_sec - 1]) & 0x3fffu;
		S.bits = index_bits(S.k);
		S.q = sym + S.k + (S.k & 1u);
		for (unsigned j = t; j < 256; j += THREADS)
			top_smap[j] = j < S.k ? sym[j] : 0;
	} else if (top && sec_form[n_sec - 1] == ONE_FORM) {
		S.one = ld16(p + sec_at[n_sec - 1] + 2);
	}
	__syncthreads();

	/* The sections in turn: the values (or the upper halves), then each
	 * byte plane, its table built in place of the last one's, then a
	 * sign|mantissa section coded by lanes (any other form is read above). */
	for (unsigned k = 0; k < n_sec - fused; k++) {
		const int one = sec_form[k] == ONE_FORM;
		const int role = k == 0 ? (planes ? (top ? TOP_UPPER : UPPER) : top ? TOP_VALUES : VALUES)
			       : top && k == n_sec - 1 ? SIGN_MANT : k == 1 ? BYTE1 : BYTE0;
		const uint64_t first = b * BLOCK, end = n < first + BLOCK ? n : first + BLOCK;
		if (sec_form[k] == PACKED_FORM) {   /* each value's byte from its index */
			uint32_t k_packed = ld16(p + sec_at[k]) & 0x3fffu;
			const uint8_t *sym = p + sec_at[k] + 2;
			if (b < nb)
				my |= role == BYTE1
				      ? unpack_block<BYTE1>(sym, k_packed, out, first, end, lane)
				      : unpack_block<BYTE0>(sym, k_packed, out, first, end, lane);
			continue;
		}
		if (k > 0 && one) {
			/* a byte plane of one symbol: stored as it is, each value's
			 * byte by the thread that wrote the value in the first pass;
			 * the upper halves' pass left it zero */
			uint32_t sym = ld16(p + sec_at[k] + 2);
			for (uint64_t i = first + lane; b < nb && sym && i < end; i += LANES)
				out[4 * i + (role == BYTE1)] = (uint8_t)sym;
			continue;
		}
		if (k > 0) {
			__syncthreads();   /* every warp done with the last table */
			my |= running_sums(p + sec_at[k], tab, cum, n, role == SIGN_MANT ? 0x7fu : 0xffu,
					   warp, lane);
			if (__syncthreads_or(my))   /* bad frequencies, or the last pass failed */
				goto out;
			if (n)
				build_table(cum, tab, t);
			__syncthreads();
		}
		if (b < nb) {
			const uint64_t lens = sec_at[k] + sec_head[k];
			const uint64_t streams = lens + nb * LANES * 2;
			const uint8_t *lo = p + raw_at;                        /* raw low halves */
			const uint8_t *sm = lo + (w == 4 && !planes ? 2 * n : 0);
			uint32_t l = one ? 0 : ld16(p + lens + 2 * (b * LANES + lane));
			uint32_t start = one ? 0 : (uint32_t)streams + blk[k][b] +
							warp_inclusive_sum(l, lane) - l;
			uint32_t stop = start + l;
			my |= w == 4 ? decode_role<4, TOP>(role, p, out, sm, lo, tab, start, stop, first,
							   end, lane, base, S)
				     : decode_role<2, TOP>(role, p, out, sm, lo, tab, start, stop, first,
							   end, lane, base, S);
		}
	}
out:
	if (my)
		atomicOr(&bad, my);
	__syncthreads();
	if (t == 0 && bad)
		atomicOr(&status[blockIdx.x], bad);
}

/* Job i's status word moved to report[i] (memory the device can write:
 * mapped pinned host memory) and cleared for the next launch.  Plain
 * stores from one thread block: a device->host copy of the words and a
 * memset before each decode, beside a stream of host->device copies, cost
 * those copies ~3% of their rate (bench/gpu_bench --codec exprans). */
__global__ void exprans_report_kernel(uint32_t *status, uint32_t *report, unsigned n)
{
	for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
		report[i] = status[i];
		status[i] = 0;
	}
	__threadfence_system();
}

static cudaError_t launch(const uint8_t *in, uint8_t *out, const struct exprans_gpu_job *jobs,
			  unsigned n_jobs, unsigned layouts, uint64_t max_out, uint32_t *status,
			  cudaStream_t stream)
{
	/* A thread block per 8 blocks of values (512 KiB of output). */
	uint64_t parts = (max_out + (uint64_t)WARPS * BLOCK * 2 - 1) / ((uint64_t)WARPS * BLOCK * 2);
	if (parts > MAX_BLOCKS / WARPS)   /* larger decode jobs fail TOO_BIG */
		parts = MAX_BLOCKS / WARPS;
	dim3 grid(n_jobs, (unsigned)parts + (parts == 0));
	exprans_decode_kernel<false><<<grid, THREADS, 0, stream>>>(in, out, jobs, layouts, status);
	if (layouts & EXPRANS_TOP_BIT)
		exprans_decode_kernel<true><<<grid, THREADS, 0, stream>>>(in, out, jobs, layouts, status);
	return cudaGetLastError();
}

extern "C" int exprans_gpu_decode(const uint8_t *in, uint8_t *out,
				  const struct exprans_gpu_job *jobs, unsigned n_jobs, unsigned layouts,
				  uint64_t max_out, uint32_t *status, void *stream)
{
	if (n_jobs == 0) {
		/* Load the kernels now: with CUDA's lazy loading a first launch
		 * would load them then, which can wait for work already running
		 * on the device (a user's kernel) and stall every caller. */
		struct cudaFuncAttributes attr;
		cudaError_t rc = cudaFuncGetAttributes(&attr, exprans_decode_kernel<false>);
		if (rc == cudaSuccess)
			rc = cudaFuncGetAttributes(&attr, exprans_decode_kernel<true>);
		return (int)(rc == cudaSuccess ? cudaFuncGetAttributes(&attr, exprans_report_kernel) : rc);
	}
	cudaError_t rc = cudaMemsetAsync(status, 0, n_jobs * sizeof(*status), (cudaStream_t)stream);
	if (rc != cudaSuccess)
		return (int)rc;
	return (int)launch(in, out, jobs, n_jobs, layouts, max_out, status, (cudaStream_t)stream);
}

extern "C" int exprans_gpu_decode_report(const uint8_t *in, uint8_t *out,
					 const struct exprans_gpu_job *jobs, unsigned n_jobs,
					 unsigned layouts, uint64_t max_out, uint32_t *status,
					 uint32_t *report, void *stream)
{
	if (n_jobs == 0)
		return exprans_gpu_decode(in, out, jobs, 0, 0, 0, status, stream);
	cudaError_t rc = launch(in, out, jobs, n_jobs, layouts, max_out, status,
				(cudaStream_t)stream);
	if (rc != cudaSuccess)
		return (int)rc;
	exprans_report_kernel<<<1, 256, 0, (cudaStream_t)stream>>>(status, report, n_jobs);
	return (int)cudaGetLastError();
}
