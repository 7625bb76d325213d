/* Who decodes (src/pager/trial.h): after a warm-up window raw copies are
 * asked for; once made, raw and packed windows take turns (the form
 * switched after each steady window, the first window after the copies
 * not counted), only steady ones count, and the raw copies are kept only
 * when the median of the pairs' raw / packed ratios is more than the
 * margin below 1.  A drift of the device's speed over the trial, as much
 * as the forms differ, does not decide it.  None made keeps the GPU
 * decoding; windows that never become steady make it give up for the
 * GPU; after the choice nothing more happens. */
#include "testlib.h"
#include "pager/trial.h"

/* The warm-up window (unsteady ones before it are not counted), then the
 * copies asked for; windows while they are made count for nothing. */
static void warm_up(struct trial *t)
{
	CHECK(trial_window(t, 1, 0) == TRIAL_NONE);      /* not steady: not counted */
	CHECK(trial_window(t, 5000, 1) == TRIAL_MAKE_COPIES);
	CHECK(t->phase == TRIAL_MAKING);
	CHECK(trial_window(t, 1, 1) == TRIAL_NONE && trial_window(t, 1, 1) == TRIAL_NONE);
}

/* The whole trial, raw[i] and packed[i] the i-th pair: its choice, and
 * every switch of form asked for checked on the way. */
static enum trial_action run(const uint64_t *raw, const uint64_t *packed)
{
	struct trial t;
	trial_init(&t);
	warm_up(&t);
	CHECK(trial_copies_made(&t, 7) == TRIAL_HAND_RAW);
	CHECK(trial_copies_made(&t, 7) == TRIAL_NONE);   /* once */
	CHECK(trial_window(&t, 1, 1) == TRIAL_NONE);     /* after making them: not counted */
	enum trial_action a = TRIAL_NONE;
	for (unsigned i = 0; i < TRIAL_PAIRS; i++) {
		CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);   /* unsteady: no switch */
		CHECK(trial_window(&t, raw[i], 1) == TRIAL_HAND_PACKED);
		CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);
		a = trial_window(&t, packed[i], 1);
		CHECK(i + 1 < TRIAL_PAIRS ? a == TRIAL_HAND_RAW : a == TRIAL_KEEP_HOST ||
								 a == TRIAL_KEEP_GPU);
	}
	CHECK(t.phase == TRIAL_DONE);
	CHECK(trial_window(&t, 1, 1) == TRIAL_NONE && trial_copies_made(&t, 1) == TRIAL_NONE);
	return a;
}

int main(void)
{
	_Static_assert(TRIAL_PAIRS == 5, "the pairs below are five");
	_Static_assert(TRIAL_MARGIN_PERMILLE == 20, "the margin below is 2%");
	const uint64_t packed[5] = { 100000, 101000, 99000, 100000, 100500 };
	/* compute-bound: the raw windows are faster */
	CHECK(run((const uint64_t[]){ 93000, 92000, 94000, 93000, 92500 }, packed) ==
	      TRIAL_KEEP_HOST);
	/* link-bound: they are slower */
	CHECK(run((const uint64_t[]){ 108000, 109000, 110000, 108000, 107000 }, packed) ==
	      TRIAL_KEEP_GPU);
	/* within the margin: the packed form, which takes less memory */
	CHECK(run((const uint64_t[]){ 99000, 99500, 97500, 98500, 99000 }, packed) ==
	      TRIAL_KEEP_GPU);
	CHECK(run((const uint64_t[]){ 97000, 98000, 96500, 97500, 98000 }, packed) ==
	      TRIAL_KEEP_HOST);
	/* medians of the pairs: two pairs disturbed either way change nothing */
	CHECK(run((const uint64_t[]){ 93000, 800000, 93000, 5000, 93000 }, packed) ==
	      TRIAL_KEEP_HOST);
	CHECK(run((const uint64_t[]){ 108000, 5000, 109000, 108000, 5000 }, packed) ==
	      TRIAL_KEEP_GPU);
	/* The device slows by 1% a window (warming up) while raw windows are
	 * 4% faster: by pairs, the host.  The medians of each form alone (a
	 * raw window comes first in each pair) would see raw 4% faster too,
	 * but a trial timing all packed windows first would have seen raw
	 * ones slower; and with raw 1% slower the drift does not make it look
	 * faster. */
	uint64_t r[5], p[5], r_slow[5];
	for (unsigned i = 0; i < 5; i++) {
		r[i] = 96000 * (100 + 2 * i) / 100;
		r_slow[i] = 101000 * (100 + 2 * i) / 100;
		p[i] = 100000 * (100 + 2 * i + 1) / 100;
	}
	CHECK(run(r, p) == TRIAL_KEEP_HOST);
	CHECK(run(r_slow, p) == TRIAL_KEEP_GPU);

	/* No copy could be made: the GPU keeps decoding, and that is final. */
	struct trial t;
	trial_init(&t);
	CHECK(trial_copies_made(&t, 3) == TRIAL_NONE);   /* not asked for yet */
	warm_up(&t);
	CHECK(trial_copies_made(&t, 0) == TRIAL_KEEP_GPU && t.phase == TRIAL_DONE);
	CHECK(trial_window(&t, 1, 1) == TRIAL_NONE);
	/* Windows that never become steady: after TRIAL_GIVE_UP in a row the
	 * GPU decodes, in either phase; a steady window starts the count
	 * again, and the copies' hand-out does too. */
	trial_init(&t);
	for (unsigned i = 0; i + 1 < TRIAL_GIVE_UP; i++)
		CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);
	CHECK(trial_window(&t, 1, 0) == TRIAL_KEEP_GPU && t.gave_up && t.phase == TRIAL_DONE);
	CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);     /* final */
	trial_init(&t);
	warm_up(&t);
	for (unsigned i = 0; i < 2 * TRIAL_GIVE_UP; i++)   /* making: no windows count */
		CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);
	CHECK(trial_copies_made(&t, 5) == TRIAL_HAND_RAW && t.phase == TRIAL_TURNS);
	CHECK(trial_window(&t, 1, 1) == TRIAL_NONE);     /* not counted, but steady */
	for (unsigned i = 0; i + 1 < TRIAL_GIVE_UP; i++)
		CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);
	CHECK(trial_window(&t, 1, 1) == TRIAL_HAND_PACKED);   /* steady: the count restarts */
	for (unsigned i = 0; i + 1 < TRIAL_GIVE_UP; i++)
		CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);
	CHECK(!t.gave_up && t.phase == TRIAL_TURNS);
	CHECK(trial_window(&t, 1, 0) == TRIAL_KEEP_GPU && t.gave_up && t.phase == TRIAL_DONE);
	printf("decode trial: choices as expected\n");
	return 0;
}
