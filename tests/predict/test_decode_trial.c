/* Who decodes (src/pager/trial.h): after a warm-up window raw copies are
 * asked for; once made, raw and packed windows take turns in pairs (raw,
 * packed, packed, raw, raw, ...), the window after each switch of form not
 * counted, nor the first after the copies, only steady ones counting, and
 * the raw copies are kept only when the median of the pairs' raw / packed
 * ratios is more than the margin below 1.  A drift of the device's speed
 * over the trial, as much as the forms differ, does not decide it.  None
 * made keeps the GPU decoding; windows that never become steady make it
 * give up for the GPU; after the choice nothing more happens.  Windows end
 * where they began in the cycle of acquires (whole steps). */
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
 * every switch of form asked for checked on the way (an unsteady window
 * before each counted one changes nothing). */
static enum trial_action run(const uint64_t *raw, const uint64_t *packed)
{
	struct trial t;
	trial_init(&t);
	warm_up(&t);
	CHECK(trial_copies_made(&t, 7) == TRIAL_HAND_RAW);
	CHECK(trial_copies_made(&t, 7) == TRIAL_NONE);   /* once */
	CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);     /* unsteady */
	CHECK(trial_window(&t, 1, 1) == TRIAL_NONE);     /* after making them: not counted */
	enum trial_action a = TRIAL_NONE;
	for (unsigned i = 0; i < TRIAL_PAIRS; i++) {
		int raw_first = i % 2 == 0;
		uint64_t first = raw_first ? raw[i] : packed[i];
		uint64_t second = raw_first ? packed[i] : raw[i];
		CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);
		CHECK(trial_window(&t, first, 1) == (raw_first ? TRIAL_HAND_PACKED : TRIAL_HAND_RAW));
		CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);
		CHECK(trial_window(&t, 900000, 1) == TRIAL_NONE);   /* the switch's window */
		a = trial_window(&t, second, 1);
		CHECK(i + 1 < TRIAL_PAIRS ? a == TRIAL_NONE : a == TRIAL_KEEP_HOST ||
							       a == TRIAL_KEEP_GPU);
	}
	CHECK(t.phase == TRIAL_DONE);
	CHECK(trial_window(&t, 1, 1) == TRIAL_NONE && trial_copies_made(&t, 1) == TRIAL_NONE);
	return a;
}

int main(void)
{
	_Static_assert(TRIAL_PAIRS == 6, "the pairs below are six");
	_Static_assert(TRIAL_MARGIN_PERMILLE == 20, "the margin below is 2%");
	const uint64_t packed[6] = { 100000, 101000, 99000, 100000, 100500, 99500 };
	/* compute-bound: the raw windows are faster */
	CHECK(run((const uint64_t[]){ 93000, 92000, 94000, 93000, 92500, 93500 }, packed) ==
	      TRIAL_KEEP_HOST);
	/* link-bound: they are slower */
	CHECK(run((const uint64_t[]){ 108000, 109000, 110000, 108000, 107000, 109000 }, packed) ==
	      TRIAL_KEEP_GPU);
	/* within the margin: the packed form, which takes less memory */
	CHECK(run((const uint64_t[]){ 99000, 99500, 97500, 98500, 99000, 98000 }, packed) ==
	      TRIAL_KEEP_GPU);
	CHECK(run((const uint64_t[]){ 97000, 98000, 96500, 97500, 98000, 97000 }, packed) ==
	      TRIAL_KEEP_HOST);
	/* the median of the three two-pair ratios: one disturbed either way
	 * changes nothing */
	CHECK(run((const uint64_t[]){ 93000, 800000, 93000, 93000, 93000, 92000 }, packed) ==
	      TRIAL_KEEP_HOST);
	CHECK(run((const uint64_t[]){ 108000, 109000, 5000, 5000, 109000, 108000 }, packed) ==
	      TRIAL_KEEP_GPU);
	/* The device slows by 1% a window (warming up; the switch's windows
	 * too) while raw windows are 3% faster: the host; 1.5% slower: the
	 * GPU.  Windows in order: r0 . p0 p1 . r1 r2 . p2 p3 . r3 r4 . p4
	 * p5 . r5 (. the switch's, 3 windows a pair).  The median of the pairs'
	 * own ratios would not see it: raw first 0.951-0.952, packed first
	 * 0.988, and the median of six takes 0.988, within the margin. */
	uint64_t r[6], p[6], r_slow[6];
	for (unsigned i = 0; i < 6; i++) {
		unsigned at_r = i % 2 == 0 ? 3 * i : 3 * i + 2, at_p = i % 2 == 0 ? 3 * i + 2 : 3 * i;
		r[i] = 97000 * (100 + at_r) / 100;
		r_slow[i] = 101500 * (100 + at_r) / 100;
		p[i] = 100000 * (100 + at_p) / 100;
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
	/* Windows end where they began in the cycle, at least `least`
	 * acquires on; at TRIAL_WINDOW_MAX times that where no such place
	 * comes.  A training step of 21 acquires, least 11: whole steps. */
	CHECK(!trial_window_ends(10, 11, 1) && trial_window_ends(11, 11, 1));
	CHECK(!trial_window_ends(20, 11, 0) && trial_window_ends(21, 11, 1));
	CHECK(!trial_window_ends(11 * TRIAL_WINDOW_MAX - 1, 11, 0));
	CHECK(trial_window_ends(11 * TRIAL_WINDOW_MAX, 11, 0));
	printf("decode trial: choices as expected\n");
	return 0;
}
