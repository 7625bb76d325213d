/* EXPRANS reference decoder (see exprans.h; the stream in wspack(5)), safe
 * on hostile input; its inner loops are in exprans_steps.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "pack/exprans/exprans_gpu.h"
#include "pack/exprans/exprans_int.h"

unsigned exprans_value_bytes(int dtype)
{
	switch (dtype) {
	case WSP_DTYPE_BF16:
	case WSP_DTYPE_F16:
		return 2;
	case WSP_DTYPE_F32:
		return 4;
	default:
		return 0;
	}
}

int exprans_use_simd = 2;

/* slot -> (freq - 1) | (slot - cum) << 12 | symbol << 24, one word. */
static inline uint32_t dec_entry(uint32_t freq, uint32_t bias, uint32_t sym)
{
	return (freq - 1) | bias << 12 | sym << 24;
}

/* A section being decoded: its table, its lane table, and where the next
 * block's lane streams start; or, of one symbol in the compact form, that
 * symbol alone; or, packed, its indices and what each names. */
struct section_dec {
	union {
		uint32_t tab[PROB_SCALE];      /* rANS: slot -> entry */
		uint16_t wide[256][8];         /* packed, 1, 2 or 4 bits: an index byte's values */
	};
	const uint8_t *lens;
	const uint8_t *lane;
	uint64_t blocks;
	int constant;              /* every value's symbol is `symbol`; no lanes */
	unsigned symbol;
	int may_pack;              /* a byte plane of a chunk with coded low halves */
	unsigned limit;            /* the largest symbol the section may code */
	int packed;                /* packed: each value's index in `bits` bits at `index` */
	int some_bad;              /* packed: some indices name no symbol (k < 2^bits) */
	unsigned bits;
	const uint8_t *index, *index_end;
	uint16_t unpack[256];      /* index -> symbol << 7; PACKED_BAD past the k symbols */
	const char *what;          /* in messages: "" or " (bits 15..8)" */
	struct fast_tab fast;      /* rANS: the table in registers, where it fits */
};

#define PACKED_BAD 0xffffu

/* The compact frequencies at p[at, len) (wspack(5)): k symbols, strictly
 * increasing, each with a frequency of at least 1, summing to 4096; of one
 * symbol, the section's only part.  The table is built; *head gets the
 * header's length. */
static int parse_compact(const uint8_t *p, size_t len, uint64_t at, uint64_t n,
			 struct section_dec *s, uint64_t *head, struct wspi_err *err)
{
	unsigned k = rd16(p + at) & ~COMPACT_MARK;
	if (k < 1 || k > 256)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: a compact header of %u symbols",
			       s->what, k);
	if (!n)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: frequencies for an empty chunk", s->what);
	*head = compact_bytes(k);
	if (at + *head > len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: %zu bytes, shorter than the header",
			       s->what, len);
	if (k == 1) {
		s->constant = 1;
		s->symbol = rd16(p + at + 2);
		if (s->symbol > s->limit)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: symbol %u", s->what, s->symbol);
		return 0;
	}
	const uint8_t *sym = p + at + 2, *freq = sym + k + (k & 1);
	uint32_t sum = 0;
	for (unsigned i = 0; i < k; i++) {
		uint32_t f = rd16(freq + 2 * i);
		if (i && sym[i] <= sym[i - 1])
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: compact symbols out of order",
				       s->what);
		if (sym[i] > s->limit)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: symbol %u", s->what, sym[i]);
		if (f < 1 || f > PROB_SCALE - sum)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: compact frequency %u of symbol "
				       "%u (each at least 1, summing to %u)", s->what, f, sym[i],
				       PROB_SCALE);
		for (uint32_t j = 0; j < f; j++)
			s->tab[sum + j] = dec_entry(f, j, sym[i]);
		sum += f;
	}
	if (sum != PROB_SCALE)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: frequencies sum to %u, not %u", s->what,
			       sum, PROB_SCALE);
	return 0;
}

/* The full frequencies at p[at, len): 256 u16 summing to 4096 (all 0 for
 * an empty chunk).  The table is built. */
static int parse_full(const uint8_t *p, size_t len, uint64_t at, uint64_t n,
		      struct section_dec *s, struct wspi_err *err)
{
	if (at + 2 * 256 > len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: %zu bytes, shorter than the header",
			       s->what, len);
	uint32_t sum = 0;
	for (unsigned k = 0; k < 256; k++) {
		uint32_t f = rd16(p + at + 2 * k);
		if (f > PROB_SCALE - sum)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: frequencies sum above %u", s->what,
				       PROB_SCALE);
		if (f && k > s->limit)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: symbol %u", s->what, k);
		for (uint32_t i = 0; i < f; i++)
			s->tab[sum + i] = dec_entry(f, i, k);
		sum += f;
	}
	if (n && sum != PROB_SCALE)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: frequencies sum to %u, not %u", s->what,
			       sum, PROB_SCALE);
	if (!n && sum)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: frequencies for an empty chunk", s->what);
	return 0;
}

/* The packed plane at p[at, len) (wspack(5)): k symbols, 2 to 256,
 * strictly increasing, then n indices of ceil(log2 k) bits, the bits past
 * the last zero.  *head gets the whole section's length. */
static int parse_packed(const uint8_t *p, size_t len, uint64_t at, uint64_t n,
			struct section_dec *s, uint64_t *head, struct wspi_err *err)
{
	unsigned k = rd16(p + at) & ~PACKED_MARK;
	if (!s->may_pack)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: a packed plane where the format has "
			       "none", s->what);
	if (k < 2 || k > 256)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: a packed plane of %u symbols",
			       s->what, k);
	if (!n)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: a packed plane for an empty chunk",
			       s->what);
	*head = packed_bytes(k, n);
	if (at + *head > len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: a packed plane of %llu bytes beyond "
			       "the stream", s->what, (unsigned long long)*head);
	const uint8_t *sym = p + at + 2;
	for (unsigned i = 0; i < 256; i++)
		s->unpack[i] = i < k ? (uint16_t)(sym[i] << 7) : PACKED_BAD;
	for (unsigned i = 1; i < k; i++)
		if (sym[i] <= sym[i - 1])
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: packed symbols out of order",
				       s->what);
	if (sym[k - 1] > s->limit)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: symbol %u", s->what, sym[k - 1]);
	s->packed = 1;
	s->bits = index_bits(k);
	s->some_bad = k < 1u << s->bits;
	s->index = sym + k + (k & 1);
	unsigned mask = (1u << s->bits) - 1;
	if (8 % s->bits == 0 && s->bits < 8)   /* the values of each index byte */
		for (unsigned byte = 0; byte < 256; byte++)
			for (unsigned t = 0; t < 8 / s->bits; t++)
				s->wide[byte][t] = s->unpack[(byte >> (t * s->bits)) & mask];
	/* the bits after the last index, to the end of the (even) bytes */
	uint64_t used = n * s->bits, bytes = packed_index_bytes(k, n);
	s->index_end = s->index + bytes;
	unsigned spare = (used & 7) ? s->index[used >> 3] >> (used & 7) : 0;
	for (uint64_t i = (used + 7) >> 3; i < bytes; i++)
		spare |= s->index[i];
	if (spare)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: bits set past a packed plane's last "
			       "index", s->what);
	return 0;
}

/* Value i's index in a packed plane of `bits` bits an index: the widths
 * that divide a byte never straddle two. */
static inline unsigned packed_index(const uint8_t *q, uint64_t i, unsigned bits)
{
	uint64_t bit = i * bits;
	unsigned w = q[bit >> 3];
	if ((bit & 7) + bits > 8)
		w |= (unsigned)q[(bit >> 3) + 1] << 8;
	return (w >> (bit & 7)) & ((1u << bits) - 1);
}

/* Values [first, end) of a packed plane into out, as symbol << 7 (as a
 * coded byte plane comes out of decode_block); first is a block's start.
 * Widths that divide a byte: an index byte's values at a time, from
 * `wide` (2.5x one value at a time). */
static int unpack_range(const struct section_dec *s, uint64_t first, uint64_t end,
			uint16_t *out, struct wspi_err *err)
{
	const uint8_t *q = s->index;
	unsigned bits = s->bits, per = 8 % bits == 0 && bits < 8 ? 8 / bits : 0;
	uint64_t count = end - first, i = 0;
	if (bits == 8) {
		for (; i < count; i++)
			out[i] = s->unpack[q[first + i]];
	} else if (per) {
		const uint8_t *b = q + first / per;
		uint16_t *o = out;
		for (uint64_t m = 0; m < count / per; m++, o += per)
			memcpy(o, s->wide[b[m]], per * sizeof(*out));
		i = count / per * per;
	} else {
		/* 3, 5, 6 or 7 bits: eight values in `bits` bytes at a time */
		const uint8_t *b = q + first / 8 * bits;
		unsigned mask = (1u << bits) - 1;
		for (; i + 8 <= count; i += 8, b += bits) {
			uint64_t w = 0;
			for (unsigned j = 0; j < bits; j++)
				w |= (uint64_t)b[j] << (8 * j);
			for (unsigned t = 0; t < 8; t++)
				out[i + t] = s->unpack[(w >> (t * bits)) & mask];
		}
	}
	for (; i < count; i++)   /* the last values */
		out[i] = s->unpack[packed_index(q, first + i, bits)];
	/* every index names a symbol unless k is short of 2^bits */
	unsigned bad = 0;
	for (i = 0; s->some_bad && i < count; i++)
		bad |= out[i] == PACKED_BAD;
	for (i = 0; bad && i < count; i++)
		if (out[i] == PACKED_BAD)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: value %llu holds an index past "
				       "the packed plane's symbols", s->what,
				       (unsigned long long)(first + i));
	return 0;
}

/* Parse the section at p[*at, len): frequencies (building the table) and
 * lane table, checked; *at moves past its lane streams.  compact: the
 * compact header may be used (chunks with coded low halves or the top
 * mantissa bit coded). */
static int parse_section(const uint8_t *p, size_t len, uint64_t *at, uint64_t n, int compact,
			 struct section_dec *s, struct wspi_err *err)
{
	uint64_t head = 2 * 256;
	s->constant = 0;
	s->symbol = 0;
	s->packed = 0;
	if (*at + 2 > len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: %zu bytes, shorter than the header",
			       s->what, len);
	if ((rd16(p + *at) & (COMPACT_MARK | PACKED_MARK)) == PACKED_MARK) {
		int rc = parse_packed(p, len, *at, n, s, &head, err);
		*at += head;
		return rc;
	}
	if (rd16(p + *at) & COMPACT_MARK) {
		if (!compact)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: a compact header in a chunk "
				       "without coded low halves or top bit", s->what);
		int rc = parse_compact(p, len, *at, n, s, &head, err);
		if (rc || s->constant) {
			*at += head;
			return rc;
		}
	} else {
		WSP_TRY(parse_full(p, len, *at, n, s, err));
	}
	uint64_t nb = n_blocks(n);
	uint64_t lens_at = *at + head, streams_at = lens_at + nb * EXPRANS_LANES * 2;
	if (streams_at > len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: lane table beyond the stream", s->what);
	uint64_t total = 0;
	for (uint64_t i = 0; i < nb * EXPRANS_LANES; i++) {
		uint32_t l = rd16(p + lens_at + 2 * i);
		if (l < 4 || (l & 1) || l > MAX_LANE_BYTES)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: lane %llu has a length of %u bytes",
				       s->what, (unsigned long long)i, l);
		total += l;
	}
	if (streams_at + total > len)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: lane streams beyond the stream", s->what);
	s->fast.ok = 0;
	if (nb)    /* an empty chunk's table is never filled */
		exprans_fast_build(s->tab, &s->fast);
	s->lens = p + lens_at;
	s->lane = p + streams_at;
	s->blocks = nb;
	*at = streams_at + total;
	return 0;
}

/* The bytes of block b's lane streams. */
static uint64_t lane_bytes(const struct section_dec *s, uint64_t b)
{
	uint64_t sum = 0;
	for (unsigned j = 0; j < EXPRANS_LANES; j++)
		sum += rd16(s->lens + 2 * (b * EXPRANS_LANES + j));
	return sum;
}

/* Hint the cache to fetch [p, p + n): locality 3 keeps the lines in L1,
 * 2 in L2. */
static void prefetch(const uint8_t *p, uint64_t n, int locality)
{
	for (uint64_t q = 0; q < n; q += 64)
		if (locality == 3)
			__builtin_prefetch(p + q, 0, 3);
		else
			__builtin_prefetch(p + q, 0, 2);
}

/* Block b's values [first, end) of section s into out (sm: the raw
 * sign|mantissa bytes, or zeros for a byte-plane section, whose symbols
 * then come out as symbol << 7; with sp.top, the exponent section and
 * each value's 7-bit sign|mantissa symbol, joined by upper_top).  Checks
 * the lanes' start and end. */
static int decode_block(struct section_dec *s, const uint8_t *p, uint64_t len, uint64_t b,
			uint64_t first, uint64_t end, const uint8_t *sm, uint16_t *out, int simd,
			struct split sp, struct wspi_err *err)
{
	int32_t off[EXPRANS_LANES], stop[EXPRANS_LANES];
	uint32_t x[EXPRANS_LANES];
	if (s->constant) {
		for (uint64_t i = 0; i < end - first; i++)
			out[i] = sp.top ? upper_top(s->symbol, sm[i], sp.base)
					: (uint16_t)((sm[i] & 0x80) << 8 | s->symbol << 7 | (sm[i] & 0x7f));
		return 0;
	}
	/* A block's 32 lane streams lie back to back, each read 2 bytes at a
	 * time: too slowly and in too many places for the hardware to see
	 * streams.  The next block's are fetched while this one decodes (the
	 * first block's, now); 2.0 -> 2.3 GB/s a thread on 64 MiB. */
	uint64_t here = lane_bytes(s, b);
	if (b == 0)
		prefetch(s->lane, here, 3);
	if (b + 1 < s->blocks)
		prefetch(s->lane + here, lane_bytes(s, b + 1), 2);
	for (unsigned j = 0; j < EXPRANS_LANES; j++) {
		uint32_t l = rd16(s->lens + 2 * (b * EXPRANS_LANES + j));
		x[j] = rd32(s->lane);
		off[j] = (int32_t)(s->lane + 4 - p);
		stop[j] = (int32_t)(s->lane + l - p);
		s->lane += l;
		if (x[j] < RANS_L && first + j < end)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: block %llu lane %u starts in "
				       "state %u", s->what, (unsigned long long)b, j, x[j]);
	}
	/* All 32 lanes at each step (the GPU's order, and independent work for
	 * the CPU to overlap), without branches: a lane that needs a word past
	 * its stream reads at its end instead (in bounds: sm[] or another
	 * section follows with enough bytes) and the block fails. */
	uint64_t full = (end - first) / EXPRANS_LANES, done = 0;
	unsigned overrun = 0;
#if WSP_EXPRANS_AVX2
	if (simd == 2 && s->fast.ok) {
		overrun |= exprans_steps_avx512(&s->fast, x, off, stop, p, len, sm, out, 0, full, sp);
		done = full;
	} else if (simd) {
		overrun |= exprans_steps_avx2(s->tab, x, off, stop, p, len, sm, out, 0, full, sp);
		done = full;
	}
#else
	(void)simd;
	(void)full;
	(void)len;
#endif
	overrun |= exprans_steps_scalar(s->tab, x, off, stop, p, sm, out, done * EXPRANS_LANES, end - first,
				sp);
	if (overrun)
		return WSP_ERR(err, WSP_EFORMAT, "exprans%s: block %llu reads past a lane's stream",
			       s->what, (unsigned long long)b);
	for (unsigned j = 0; j < EXPRANS_LANES; j++)
		if (off[j] != stop[j] || x[j] != RANS_L)
			return WSP_ERR(err, WSP_EFORMAT, "exprans%s: block %llu lane %u does not end "
				       "where it should (corrupt stream)", s->what,
				       (unsigned long long)b, j);
	return 0;
}

/* A block of 32-bit values from its decoded upper halves and byte planes
 * (each symbol << 7, or a section's one symbol): loops without branches,
 * which the compiler vectorises. */
static void join_planes(uint32_t *d32, const uint16_t *buf, const struct section_dec *sec,
			uint64_t count)
{
	const uint16_t *b1 = buf + EXPRANS_BLOCK, *b0 = buf + 2 * EXPRANS_BLOCK;
	uint32_t c1 = sec[1].symbol << 8, c0 = sec[2].symbol;
	if (sec[1].constant && sec[2].constant)
		for (uint64_t i = 0; i < count; i++)
			d32[i] = (uint32_t)buf[i] << 16 | c1 | c0;
	else if (sec[1].constant)
		for (uint64_t i = 0; i < count; i++)
			d32[i] = (uint32_t)buf[i] << 16 | c1 | (uint32_t)(b0[i] >> 7);
	else if (sec[2].constant)
		for (uint64_t i = 0; i < count; i++)
			d32[i] = (uint32_t)buf[i] << 16 | (uint32_t)(b1[i] >> 7) << 8 | c0;
	else
		for (uint64_t i = 0; i < count; i++)
			d32[i] = (uint32_t)buf[i] << 16 | (uint32_t)(b1[i] >> 7) << 8 |
				 (uint32_t)(b0[i] >> 7);
}

/* Eight 7-bit fields (bits 7t..7t+6 of w) spread to the low 7 bits of
 * eight bytes: halves, then quarters, then bytes apart. */
static inline uint64_t spread7(uint64_t w)
{
	w = (w & 0x000000000fffffffull) | ((w << 4) & 0x0fffffff00000000ull);
	w = (w & 0x00003fff00003fffull) | ((w << 2) & 0x3fff00003fff0000ull);
	return (w & 0x007f007f007f007full) | ((w << 1) & 0x7f007f007f007f00ull);
}

/* Values [first, end) of a packed plane of 7-bit indices naming every
 * one of its symbols (128, the sign|mantissa symbols of most weights) as
 * bytes: eight values from seven bytes at a time.  Every index names a
 * symbol (not some_bad), so there are 128 symbols, strictly increasing and
 * at most 0x7f (parse_packed): symbol i is i, and a value's byte is its
 * index (a lookup a value cost as much as the exponents' decode). */
static void unpack7_bytes(const struct section_dec *s, uint64_t first, uint64_t end,
			  uint8_t *out)
{
	const uint8_t *q = s->index + first / 8 * 7;   /* first is a block's start */
	uint64_t count = end - first, i = 0;
	uint64_t w, v;
	/* 8 bytes where the indices go on (7 copied would stall the load
	 * that follows the copy); 7 for a last group at the plane's end */
	for (; i + 8 <= count && q + 8 <= s->index_end; i += 8, q += 7) {
		memcpy(&w, q, 8);
		v = spread7(w);
		memcpy(out + i, &v, 8);
	}
	if (i + 8 <= count) {
		w = 0;
		memcpy(&w, q, 7);
		v = spread7(w);
		memcpy(out + i, &v, 8);
		i += 8;
	}
	for (; i < count; i++)
		out[i] = (uint8_t)packed_index(s->index, first + i, 7);
}

/* A block's 7-bit sign|mantissa symbols as bytes, from its section:
 * decoded or unpacked as symbol << 7 into dec, or of one symbol. */
static void sign_mant_bytes(uint8_t *sm7, const uint16_t *dec, const struct section_dec *s,
			    uint64_t count)
{
	if (s->constant)
		memset(sm7, (int)s->symbol, count);
	else
		for (uint64_t i = 0; i < count; i++)
			sm7[i] = (uint8_t)(dec[i] >> 7);
}

/* The sign|mantissa bytes of a byte-plane section: none. */
static const uint8_t no_raw_bytes[EXPRANS_BLOCK];

int exprans_decode(const void *in, size_t len, void *dst, uint64_t n, unsigned width,
		   unsigned flags, struct wspi_err *err)
{
	return exprans_decode_hashed(in, len, dst, n, width, flags, NULL, err);
}

int exprans_decode_hashed(const void *in, size_t len, void *dst, uint64_t n, unsigned width,
			  unsigned flags, XXH3_state_t *hash, struct wspi_err *err)
{
	const uint8_t *p = in;
	unsigned planes = flags & EXPRANS_LOW_PLANES, top = !!(flags & EXPRANS_TOP_BIT);
	if ((width != 2 && width != 4) || (planes && width != 4) ||
	    (flags & ~(EXPRANS_LOW_PLANES | EXPRANS_TOP_BIT)))
		return WSP_ERR(err, -EINVAL, "exprans: values of %u bytes with flags %#x (2 or 4; "
			       "coded low halves: 4)", width, flags);
	/* the count (and base), then a compact header at least */
	int compact = planes || top;
	if (len < (compact ? 4u + 2u * top + 4u : EXPRANS_HEADER))
		return WSP_ERR(err, WSP_EFORMAT, "exprans: %zu bytes, shorter than the header", len);
	if (rd32(p) != n)
		return WSP_ERR(err, WSP_EFORMAT, "exprans: stream of %u values where %llu are expected",
			       rd32(p), (unsigned long long)n);
	unsigned base = top ? rd16(p + 4) : 0;
	if (base > 0x1ff)
		return WSP_ERR(err, WSP_EFORMAT, "exprans: symbols start at pair %u (at most 511)",
			       base);
	/* The lanes read a word at their end even where they take none (the
	 * SIMD loop 4 bytes), into the next section or what follows the last
	 * (sm[], lo[]), which must hold 4 bytes.  Where it holds fewer (one
	 * value; a top-bit stream, which may end with a section) the stream
	 * is decoded from a copy with zeros after it: on the stack when small. */
	uint64_t tail = (width == 4 && !planes ? 2 * n : 0) + (top ? 0 : n);
	uint8_t small[4 + 2 + 4 * (2 * 256 + EXPRANS_LANES * (2 + 6)) + 3 + 8];
	uint8_t *padded = NULL;
	if (tail < 4 && len + 8 <= sizeof(small)) {
		memset(small, 0, sizeof(small));
		memcpy(small, in, len);
		p = small;
	} else if (tail < 4) {
		if (!(padded = malloc(len + 8)))
			return WSP_ERR(err, -ENOMEM, "exprans: out of memory");
		memcpy(padded, in, len);
		memset(padded + len, 0, 8);
		p = padded;
	}
	/* On the stack (about 66 KiB): decoders run per chunk on every
	 * worker, and an allocation each would churn the heap. */
	unsigned n_sec = 1 + 2 * !!planes + top, k_sm = n_sec - 1;
	struct section_dec sec[4];
	uint16_t *buf = NULL;
	static const char *const what[4] = { "", " (bits 15..8)", " (bits 7..0)",
					     " (sign and mantissa)" };
	uint64_t at = 4 + 2 * top;
	int rc = 0;
	for (unsigned k = 0; k < n_sec && rc == 0; k++) {
		int is_sm = top && k == k_sm;
		sec[k].what = what[is_sm ? 3 : k];
		sec[k].may_pack = k > 0;
		sec[k].limit = k == 0 ? (top ? 0x1ffu - base : 0xffu) : is_sm ? 0x7fu : 0xffu;
		rc = parse_section(p, len, &at, n, compact, &sec[k], err);
	}
	uint64_t raw_after = (width == 4 && !planes ? 2 * n : 0) + (top ? 0 : n);
	if (rc == 0 && at + raw_after != len)
		rc = WSP_ERR(err, WSP_EFORMAT, "exprans: %zu bytes where the lanes and values need "
			     "%llu", len, (unsigned long long)(at + raw_after));
	const uint8_t *lo = p + at;                              /* 32-bit values' low halves */
	const uint8_t *sm = top ? no_raw_bytes : p + at + raw_after - n;
	/* 32-bit values, and any with the top bit coded: a block's symbols
	 * (and the other sections) are decoded here, then joined. */
	if (rc == 0 && (width == 4 || top) && n &&
	    !(buf = malloc(n_sec * EXPRANS_BLOCK * sizeof(*buf))))
		rc = WSP_ERR(err, -ENOMEM, "exprans: out of memory");
	/* SIMD reads 4 bytes at a lane's position: 4 must follow any lane end. */
	int simd = !exprans_use_simd || n < 4 || len >= (1u << 30) || !exprans_cpu_has_avx2() ? 0 :
		   exprans_use_simd >= 2 && exprans_cpu_has_avx512() ? 2 : 1;
	struct split sp = { .top = (int)top, .base = base }, plain = { 0 };
	/* with the top bit: a block's sign|mantissa symbols, joined as the
	 * exponents are decoded (32 bytes of slack for a SIMD load) */
	uint8_t *sm7 = rc == 0 && top && n ? malloc(EXPRANS_BLOCK + 32) : NULL;
	if (rc == 0 && top && n && !sm7)
		rc = WSP_ERR(err, -ENOMEM, "exprans: out of memory");
	for (uint64_t b = 0; rc == 0 && b < n_blocks(n); b++) {
		uint64_t first = b * EXPRANS_BLOCK, end = WSP_MIN(n, first + EXPRANS_BLOCK);
		/* the other sections first (their symbols << 7 into buf; the
		 * sign|mantissa symbols as bytes into sm7) */
		for (unsigned k = 1; k < n_sec && rc == 0; k++)
			if (top && k == k_sm && sec[k].packed && sec[k].bits == 7 && !sec[k].some_bad)
				unpack7_bytes(&sec[k], first, end, sm7);
			else if (sec[k].packed)
				rc = unpack_range(&sec[k], first, end, buf + k * EXPRANS_BLOCK, err);
			else if (!sec[k].constant)   /* joined below as it is */
				rc = decode_block(&sec[k], p, len, b, first, end, no_raw_bytes,
						  buf + k * EXPRANS_BLOCK, simd, plain, err);
		if (rc == 0 && top && !(sec[k_sm].packed && sec[k_sm].bits == 7 && !sec[k_sm].some_bad))
			sign_mant_bytes(sm7, buf + k_sm * EXPRANS_BLOCK, &sec[k_sm], end - first);
		/* then the upper halves: 16-bit values straight into dst */
		uint16_t *out = width == 2 ? (uint16_t *)dst + first : buf;
		if (rc == 0)
			rc = decode_block(&sec[0], p, len, b, first, end, top ? sm7 : sm + first, out,
					  simd, sp, err);
		uint32_t *d32 = (uint32_t *)dst + first;
		if (rc == 0 && width == 4 && planes)
			join_planes(d32, buf, sec, end - first);
		else if (rc == 0 && width == 4)
			for (uint64_t i = 0; i < end - first; i++)
				d32[i] = (uint32_t)buf[i] << 16 | rd16(lo + 2 * (first + i));
		if (rc == 0 && hash)
			wspi_xxh3_update(hash, (uint8_t *)dst + first * width, (end - first) * width);
	}
	free(sm7);
	free(buf);
	free(padded);
	return rc;
}

/* The GPU decoder's status words (exprans_gpu.h), here so that messages
 * need no CUDA. */
const char *exprans_gpu_status_text(uint32_t s)
{
	if (s & EXPRANS_GPU_BAD_HEADER)
		return "header: too short, misaligned, or another number of values";
	if (s & EXPRANS_GPU_TOO_BIG)
		return "more values than the GPU decoder takes in one chunk";
	if (s & EXPRANS_GPU_BAD_FREQ)
		return "frequencies malformed or not summing to 4096";
	if (s & EXPRANS_GPU_BAD_LANES)
		return "lane lengths do not fit the stream";
	if (s & EXPRANS_GPU_BAD_START)
		return "a lane starts below 2^16";
	if (s & EXPRANS_GPU_OVERRUN)
		return "a lane reads past its stream";
	if (s & EXPRANS_GPU_BAD_END)
		return "a lane does not end where it should (corrupt stream)";
	if (s & EXPRANS_GPU_BAD_PACKED)
		return "a packed byte plane malformed, or an index past its symbols";
	return s ? "unknown status" : "ok";
}
