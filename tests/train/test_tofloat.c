/* Gradients reach their fp32 accumulators exactly: every one of the 65536
 * fp16 and bf16 values converts to the fp32 value it denotes (worked out
 * here independently, with ldexp), NaN staying NaN and the sign of zero
 * kept; a first push assigns (bit for bit, -0 included), later ones add
 * (the vector loops giving the scalar loops' bits, for bf16 and fp16). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/testlib.h"
#include "train/tofloat.h"

static double f16_value(uint16_t h)
{
	int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	double v;
	if (exp == 0x1f)
		v = man ? NAN : INFINITY;
	else if (exp == 0)
		v = ldexp(man, -24);
	else
		v = ldexp(1024 + man, exp - 25);
	return sign ? -v : v;
}

static double bf16_value(uint16_t h)
{
	int sign = h >> 15, exp = (h >> 7) & 0xff, man = h & 0x7f;
	double v;
	if (exp == 0xff)
		v = man ? NAN : INFINITY;
	else if (exp == 0)
		v = ldexp(man, -133);
	else
		v = ldexp(128 + man, exp - 134);
	return sign ? -v : v;
}

static int same(float got, double want)
{
	if (isnan(want))
		return isnan(got);
	return (double)got == want && !signbit(got) == !signbit(want);
}

/* Large first pushes are widened with streaming stores where the CPU has
 * them: the same bits as the plain loop, from every alignment of source
 * and accumulator, for lengths around the vector width and the size at
 * which streaming starts, with the elements just past the end untouched. */
static int check_streamed(enum wsp_dtype dt, const char *name)
{
	enum { MAX = 20000 };
	static uint16_t src[MAX + 8];
	static float want[MAX + 16], got[MAX + 16];
	static const uint64_t lengths[] = { 0, 1, 7, 8, 9, 4095, 4096, 4097, 4103, 4104, 9999, MAX };
	for (unsigned i = 0; i < MAX + 8; i++)
		src[i] = (uint16_t)(i * 40503u + 7);
	for (unsigned so = 0; so < 8; so++)
		for (unsigned ao = 0; ao < 8; ao++)
			for (unsigned k = 0; k < sizeof(lengths) / sizeof(lengths[0]); k++) {
				uint64_t n = lengths[k];
				memset(want, 0x5a, sizeof(want));
				memset(got, 0x5a, sizeof(got));
				wspi_tofloat_use_simd = 0;
				wb_accumulate(want + ao, src + so, dt, n, 1);
				wspi_tofloat_use_simd = 1;
				wb_accumulate(got + ao, src + so, dt, n, 1);
				if (memcmp(want, got, sizeof(want)) != 0) {
					fprintf(stderr, "%s widening of %llu elements (source +%u, "
						"accumulator +%u): the streamed loop differs\n",
						name, (unsigned long long)n, so, ao);
					return 1;
				}
			}
	return 0;
}

/* Later pushes add with AVX2 where the CPU has it: the same sums as the
 * scalar loop for every pair of values drawn (infinities, NaNs, zeros of
 * both signs and subnormals among them), from every alignment of source
 * and accumulator, with the elements just past the end untouched.  Where
 * both addends are NaN the result is a NaN (which payload is the
 * hardware's choice of operand order). */
static int check_added(enum wsp_dtype dt, const char *name)
{
	enum { MAX = 4200 };
	static uint16_t src[MAX + 8];
	static float start[MAX + 16], want[MAX + 16], got[MAX + 16];
	static const uint64_t lengths[] = { 0, 1, 7, 8, 9, 15, 16, 17, 4103, MAX };
	for (unsigned i = 0; i < MAX + 8; i++)
		src[i] = (uint16_t)(i * 40503u + 7);
	for (unsigned i = 0; i < MAX + 16; i++) {
		uint32_t bits = (uint32_t)(i * 2654435761u) ^ (i % 7 == 0 ? 0x7f800000u : 0);
		memcpy(&start[i], &bits, sizeof(bits));
	}
	for (unsigned so = 0; so < 8; so++)
		for (unsigned ao = 0; ao < 8; ao++)
			for (unsigned k = 0; k < sizeof(lengths) / sizeof(lengths[0]); k++) {
				uint64_t n = lengths[k];
				memcpy(want, start, sizeof(want));
				memcpy(got, start, sizeof(got));
				wspi_tofloat_use_simd = 0;
				wb_accumulate(want + ao, src + so, dt, n, 0);
				wspi_tofloat_use_simd = 1;
				wb_accumulate(got + ao, src + so, dt, n, 0);
				for (unsigned i = 0; i < MAX + 16; i++) {
					uint16_t v = i >= ao && i - ao < n ? src[so + i - ao] : 0;
					int nans = i >= ao && i - ao < n && isnan(start[i]) &&
						   isnan(dt == WSP_DTYPE_F16 ? f16_value(v) : bf16_value(v));
					if (nans ? isnan(got[i]) && isnan(want[i])
						 : memcmp(&got[i], &want[i], sizeof(float)) == 0)
						continue;
					fprintf(stderr, "%s added into %llu elements (source +%u, "
						"accumulator +%u): element %u is %a, the scalar loop "
						"gives %a\n", name, (unsigned long long)n, so, ao, i,
						got[i], want[i]);
					return 1;
				}
			}
	return 0;
}

/* Every fp16 value, assigned and added by the vector loops (F16C where the
 * CPU has it) and by the scalar ones, bit for bit: NaNs come out quiet
 * with their payload (IEEE conversion sets the quiet bit of a signalling
 * NaN; so does F16C), and added to a number they stay that NaN. */
static int check_f16_nans(void)
{
	static uint16_t all[65536];
	static float want[65536], got[65536];
	for (unsigned i = 0; i < 65536; i++)
		all[i] = (uint16_t)i;
	for (int first = 1; first >= 0; first--) {
		for (unsigned i = 0; i < 65536; i++)
			want[i] = got[i] = (float)(i % 13) - 6.5f;
		wspi_tofloat_use_simd = 0;
		wb_accumulate(want, all, WSP_DTYPE_F16, 65536, first);
		wspi_tofloat_use_simd = 1;
		wb_accumulate(got, all, WSP_DTYPE_F16, 65536, first);
		for (unsigned i = 0; i < 65536; i++) {
			uint32_t g, w;
			memcpy(&g, &got[i], 4);
			memcpy(&w, &want[i], 4);
			int nan = (i & 0x7c00) == 0x7c00 && (i & 0x3ff);
			uint32_t quiet = ((uint32_t)(i & 0x8000) << 16) | 0x7fc00000u |
					 ((uint32_t)(i & 0x3ff) << 13);
			if (g != w || (nan && w != quiet)) {
				fprintf(stderr, "f16 %04x %s: %08x, the scalar loop %08x%s\n", i,
					first ? "assigned" : "added", g, w,
					nan ? " (want the quiet NaN)" : "");
				return 1;
			}
		}
	}
	return 0;
}

/* Threads widening slices of one accumulator side by side, as the
 * write-back's workers do: each slice ends unaligned, and every value is
 * seen by the thread that joins them. */
struct slice {
	float *acc;
	const uint16_t *src;
	uint64_t n;
};

static void *widen_slice(void *arg)
{
	struct slice *s = arg;
	wb_accumulate(s->acc, s->src, WSP_DTYPE_BF16, s->n, 1);
	return NULL;
}

static int check_streamed_threads(void)
{
	enum { N = 1 << 20, PARTS = 4 };
	uint16_t *src = malloc(N * sizeof(*src));
	float *acc = malloc(N * sizeof(*acc));
	CHECK(src && acc);
	for (unsigned i = 0; i < N; i++)
		src[i] = (uint16_t)(i * 2654435761u >> 16);
	pthread_t th[PARTS];
	struct slice sl[PARTS];
	uint64_t per = N / PARTS + 3;   /* slices that start and end unaligned */
	for (unsigned k = 0; k < PARTS; k++) {
		uint64_t a = per * k < N ? per * k : N;
		uint64_t b = a + per < N ? a + per : N;
		sl[k] = (struct slice){ acc + a, src + a, b - a };
		CHECK(pthread_create(&th[k], NULL, widen_slice, &sl[k]) == 0);
	}
	for (unsigned k = 0; k < PARTS; k++)
		pthread_join(th[k], NULL);
	for (unsigned i = 0; i < N; i++) {
		uint32_t bits;
		memcpy(&bits, &acc[i], sizeof(bits));
		if (bits != (uint32_t)src[i] << 16) {
			fprintf(stderr, "element %u widened by a thread: %08x, want %08x\n", i, bits,
				(uint32_t)src[i] << 16);
			return 1;
		}
	}
	free(src);
	free(acc);
	return 0;
}

int main(void)
{
	static uint16_t all[65536];
	static float acc[65536];
	for (unsigned i = 0; i < 65536; i++)
		all[i] = (uint16_t)i;

	CHECK(wb_dtype_ok(WSP_DTYPE_F32) && wb_dtype_ok(WSP_DTYPE_F16) && wb_dtype_ok(WSP_DTYPE_BF16));
	CHECK(!wb_dtype_ok(WSP_DTYPE_I32) && !wb_dtype_ok(WSP_DTYPE_F8_E4M3) &&
	      !wb_dtype_ok(WSP_DTYPE_U8));

	wb_accumulate(acc, all, WSP_DTYPE_F16, 65536, 1);
	for (unsigned i = 0; i < 65536; i++)
		if (!same(acc[i], f16_value((uint16_t)i))) {
			fprintf(stderr, "f16 %04x: got %a, want %a\n", i, acc[i], f16_value((uint16_t)i));
			return 1;
		}
	wb_accumulate(acc, all, WSP_DTYPE_BF16, 65536, 1);
	for (unsigned i = 0; i < 65536; i++)
		if (!same(acc[i], bf16_value((uint16_t)i))) {
			fprintf(stderr, "bf16 %04x: got %a, want %a\n", i, acc[i], bf16_value((uint16_t)i));
			return 1;
		}

	/* f32: the first push is a copy (-0 stays -0); then sums in push order */
	float g1[4] = { -0.0f, 1.5f, 3e-39f, -2.0f }, g2[4] = { 0.25f, 1e8f, 1.0f, 2.0f };
	float a[4];
	wb_accumulate(a, g1, WSP_DTYPE_F32, 4, 1);
	CHECK(memcmp(a, g1, sizeof(a)) == 0);
	wb_accumulate(a, g2, WSP_DTYPE_F32, 4, 0);
	for (int i = 0; i < 4; i++)
		CHECK(a[i] == g1[i] + g2[i]);
	/* bf16 adds in fp32: 1 + 2^-20 is kept, as no bf16 sum could */
	uint16_t one = 0x3f80, tiny = 0x3580;   /* 1.0, 2^-20 */
	float s;
	wb_accumulate(&s, &one, WSP_DTYPE_BF16, 1, 1);
	wb_accumulate(&s, &tiny, WSP_DTYPE_BF16, 1, 0);
	CHECK(s == 1.0f + ldexpf(1.0f, -20));
	return check_streamed(WSP_DTYPE_BF16, "bf16") || check_added(WSP_DTYPE_BF16, "bf16") ||
	       check_streamed(WSP_DTYPE_F16, "f16") || check_added(WSP_DTYPE_F16, "f16") ||
	       check_f16_nans() || check_streamed_threads();
}
