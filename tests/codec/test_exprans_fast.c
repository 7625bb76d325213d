/*
 * The exprans section tables the AVX-512 decoder keeps in registers
 * (struct fast_tab, exprans_fast_build): for every slot of many frequency
 * tables (Gaussian-like, flat, one symbol, the limits of 32 symbols and of
 * one crowded bucket, random), looked up the way the decoder does (a
 * bucket's entry, its starts counted by carries into bit 7 of its bytes,
 * the symbol's entry), the same frequency, start and symbol as the
 * decoder's table; tables that do not fit refused.  Then values whose
 * exponents crowd a bucket in the middle of the slots, decoded by every
 * decoder alike.
 */
#include "codec_test.h"
#include "pack/exprans/exprans.h"
#include "pack/exprans/exprans_int.h"

/* A section's table, as the decoder builds it: slot -> (freq - 1) |
 * (slot - cum) << 12 | symbol << 24. */
static void table_of(const uint16_t *freq, uint32_t *tab)
{
	uint32_t at = 0;
	for (unsigned s = 0; s < 256; s++)
		for (uint32_t j = 0; j < freq[s]; j++, at++)
			tab[at] = (freq[s] - 1u) | j << 12 | s << 24;
	CHECK(at == PROB_SCALE);
}

/* The symbol entry of `slot` the decoder's way (lanes_symbol). */
static uint32_t fast_lookup(const struct fast_tab *ft, uint32_t slot)
{
	uint32_t b = slot >> 7, e = ft->bucket[b], low = slot & 127;
	if (b == ft->crowded) {
		e = ft->fine[(slot >> 2) & 31];
		low = slot & 3;
	}
	uint32_t starts = (uint32_t)__builtin_popcount((low * 0x010101u + e) & 0x808080u);
	uint32_t index = (e >> 24) + starts;
	CHECK(index < 32);
	return ft->sym[index & 31];
}

/* Builds the fast table of `freq`; where it fits, every slot's lookup
 * agrees with the table.  Returns whether it fit. */
static int fits(const uint16_t *freq)
{
	static uint32_t tab[PROB_SCALE];
	struct fast_tab ft;
	table_of(freq, tab);
	exprans_fast_build(tab, &ft);
	if (!ft.ok)
		return 0;
	for (uint32_t slot = 0; slot < PROB_SCALE; slot++) {
		uint32_t want = tab[slot], got = fast_lookup(&ft, slot);
		uint32_t cum = slot - (want >> 12 & 0xfff);
		if ((got & 0xfff) != (want & 0xfff) || (got >> 12 & 0xfff) != cum ||
		    got >> 24 != want >> 24) {
			fprintf(stderr, "slot %u: entry %08x, fast %08x\n", slot, want, got);
			CHECK(0);
			return 1;
		}
	}
	return 1;
}

/* k symbols from `first`, the given frequencies. */
static void freqs(uint16_t *freq, unsigned first, const uint16_t *f, unsigned k)
{
	memset(freq, 0, 256 * sizeof(*freq));
	for (unsigned i = 0; i < k; i++)
		freq[first + i] = f[i];
}

static void tables(void)
{
	uint16_t freq[256], f[64];
	/* Gaussian bf16 weights' exponents in one block: the rare ones crowd
	 * the first bucket */
	static const uint16_t gauss[] = { 1, 1, 1, 1, 1, 2, 5, 8, 21, 39, 84, 151, 315, 617, 1086,
					  1296, 460, 7 };
	freqs(freq, 100, gauss, 18);
	CHECK(fits(freq));
	/* 32 symbols, each starting a bucket: none crowded; 33: too many */
	for (unsigned i = 0; i < 33; i++)
		f[i] = 128;
	freqs(freq, 0, f, 32);
	CHECK(fits(freq));
	f[0] = 64, f[1] = 64;
	freqs(freq, 0, f, 33);
	CHECK(!fits(freq));
	/* one symbol */
	f[0] = PROB_SCALE;
	freqs(freq, 255, f, 1);
	CHECK(fits(freq));
	/* a bucket with 3 starts inside fits as it is; 4 crowd it, and a
	 * fine entry holds 3 starts in its 4 slots */
	static const uint16_t three[] = { 138, 20, 30, 100, 4096 - 288 };
	freqs(freq, 7, three, 5);
	CHECK(fits(freq));
	static const uint16_t four[] = { 130, 1, 1, 1, 1, 2, 4096 - 136 };
	freqs(freq, 7, four, 7);
	CHECK(fits(freq));
	/* two crowded buckets: refused; one in the middle: fits */
	static const uint16_t two[] = { 1, 1, 1, 1, 1000, 1, 1, 1, 1, 4096 - 1008 };
	freqs(freq, 40, two, 10);
	CHECK(!fits(freq));
	static const uint16_t middle[] = { 2000, 1, 1, 1, 1, 1, 1, 4096 - 2006 };
	freqs(freq, 40, middle, 8);
	CHECK(fits(freq));
	/* random tables of 2 to 40 symbols: the ones that fit agree slot by
	 * slot, and both kinds occur */
	unsigned fit = 0, refused = 0;
	for (int t = 0; t < 400; t++) {
		unsigned k = 2 + (unsigned)(t_rand() % 39), left = PROB_SCALE;
		for (unsigned i = 0; i + 1 < k; i++) {
			/* mostly small frequencies, some large */
			unsigned most = left - (k - 1 - i);
			unsigned want = t_rand() % 4 ? 1 + (unsigned)(t_rand() % 8) :
						       1 + (unsigned)(t_rand() % (PROB_SCALE / k));
			f[i] = (uint16_t)WSP_MIN(want, most);
			left -= f[i];
		}
		f[k - 1] = (uint16_t)left;
		freqs(freq, (unsigned)(t_rand() % (257 - k)), f, k);
		if (fits(freq))
			fit++;
		else
			refused++;
	}
	printf("random tables: %u fit, %u refused\n", fit, refused);
	CHECK(fit > 20 && refused > 20);
}

/* bf16 values whose exponents crowd a bucket in the middle of the slots
 * (a common exponent, six rare ones, another common one): every decoder
 * gives them back. */
static void crowded_middle(void)
{
	enum { N = 3 * 32768 + 77 };
	uint16_t *v = malloc(N * 2), *back = malloc(N * 2);
	size_t cap = exprans_bound(N, 2, 0);
	uint8_t *enc = malloc(cap);
	struct wspi_err err;
	CHECK(v && back && enc);
	wspi_err_init(&err);
	for (unsigned i = 0; i < N; i++) {
		unsigned r = (unsigned)(t_rand() % 4096), e;
		if (r < 2000)
			e = 118;
		else if (r < 2006)
			e = 119 + (r - 2000);
		else
			e = 125;
		v[i] = (uint16_t)((t_rand() & 0x807f) | e << 7);
	}
	int64_t len = exprans_encode(v, N, 2, 0, enc, cap);
	CHECK(len > 0);
	for (int simd = 0; simd < 3; simd++) {
		exprans_use_simd = simd;
		memset(back, 0xee, N * 2);
		CHECK_RC(exprans_decode(enc, (size_t)len, back, N, 2, 0, &err), 0);
		CHECK(memcmp(v, back, N * 2) == 0);
	}
	exprans_use_simd = 2;
	wspi_err_destroy(&err);
	free(v), free(back), free(enc);
}

int main(void)
{
	tables();
	crowded_middle();
	printf("this CPU decodes with %s\n", exprans_cpu_has_avx512() ? "AVX-512" :
	       exprans_cpu_has_avx2() ? "AVX2" : "the portable loop");
	return 0;
}
