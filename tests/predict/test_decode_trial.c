/* Who decodes (src/pager/trial.h): windows of each form are measured after
 * one warm-up window, only steady ones count, the medians are compared, and
 * the raw copies are kept only when they are more than the margin faster.
 * Raw copies are asked for once the packed windows are in, handed out once
 * made; none made keeps the GPU decoding; windows that never become
 * steady make it give up for the GPU; after the choice nothing more
 * happens. */
#include "testlib.h"
#include "pager/trial.h"

/* Feed the packed windows (the first is the warm-up, whatever its length). */
static void packed_phase(struct trial *t, const uint64_t *ns)
{
	CHECK(trial_window(t, 5000, 1) == TRIAL_NONE);   /* warm-up */
	CHECK(trial_window(t, 1, 0) == TRIAL_NONE);      /* not steady: not counted */
	for (unsigned i = 0; i < TRIAL_WINDOWS; i++)
		CHECK(trial_window(t, ns[i], 1) ==
		      (i + 1 == TRIAL_WINDOWS ? TRIAL_MAKE_COPIES : TRIAL_NONE));
	CHECK(t->phase == TRIAL_MAKING);
	/* Windows while the copies are made count for nothing. */
	CHECK(trial_window(t, 1, 1) == TRIAL_NONE && trial_window(t, 1, 1) == TRIAL_NONE);
}

/* The whole trial: its choice. */
static enum trial_action run(const uint64_t *packed, const uint64_t *raw)
{
	struct trial t;
	trial_init(&t);
	packed_phase(&t, packed);
	CHECK(trial_copies_made(&t, 7) == TRIAL_HAND_RAW);
	CHECK(trial_copies_made(&t, 7) == TRIAL_NONE);   /* once */
	CHECK(trial_window(&t, 1, 1) == TRIAL_NONE);     /* the switch's window */
	enum trial_action a = TRIAL_NONE;
	for (unsigned i = 0; i < TRIAL_WINDOWS; i++) {
		CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);
		a = trial_window(&t, raw[i], 1);
		CHECK((a == TRIAL_NONE) == (i + 1 < TRIAL_WINDOWS));
	}
	CHECK(t.phase == TRIAL_DONE);
	CHECK(trial_window(&t, 1, 1) == TRIAL_NONE && trial_copies_made(&t, 1) == TRIAL_NONE);
	return a;
}

int main(void)
{
	_Static_assert(TRIAL_WINDOWS == 3, "the windows below are three");
	const uint64_t packed[3] = { 100000, 101000, 99000 };
	/* compute-bound: the raw windows are faster */
	CHECK(run(packed, (const uint64_t[]){ 93000, 92000, 94000 }) == TRIAL_KEEP_HOST);
	/* link-bound: they are slower */
	CHECK(run(packed, (const uint64_t[]){ 108000, 109000, 110000 }) == TRIAL_KEEP_GPU);
	/* within the margin (2%): the packed form, which takes less memory */
	CHECK(run(packed, (const uint64_t[]){ 99000, 98500, 99500 }) == TRIAL_KEEP_GPU);
	CHECK(run(packed, (const uint64_t[]){ 97000, 97500, 96500 }) == TRIAL_KEEP_HOST);
	/* medians: one slow window of either form changes nothing */
	CHECK(run((const uint64_t[]){ 100000, 900000, 100000 },
		  (const uint64_t[]){ 93000, 93000, 800000 }) == TRIAL_KEEP_HOST);
	CHECK(run(packed, (const uint64_t[]){ 5000, 108000, 109000 }) == TRIAL_KEEP_GPU);

	/* No copy could be made: the GPU keeps decoding, and that is final. */
	struct trial t;
	trial_init(&t);
	CHECK(trial_copies_made(&t, 3) == TRIAL_NONE);   /* not asked for yet */
	packed_phase(&t, packed);
	CHECK(trial_copies_made(&t, 0) == TRIAL_KEEP_GPU && t.phase == TRIAL_DONE);
	CHECK(trial_window(&t, 1, 1) == TRIAL_NONE);
	/* Windows that never become steady: after TRIAL_GIVE_UP in a row the
	 * GPU decodes, in either phase; a steady window starts the count
	 * again, and the switch to raw copies does too. */
	trial_init(&t);
	for (unsigned i = 0; i + 1 < TRIAL_GIVE_UP; i++)
		CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);
	CHECK(trial_window(&t, 1, 1) == TRIAL_NONE);     /* steady: the count restarts */
	for (unsigned i = 0; i + 1 < TRIAL_GIVE_UP; i++)
		CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);
	CHECK(!t.gave_up && t.phase == TRIAL_PACKED);
	CHECK(trial_window(&t, 1, 0) == TRIAL_KEEP_GPU && t.gave_up && t.phase == TRIAL_DONE);
	CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);     /* final */
	trial_init(&t);
	packed_phase(&t, packed);
	for (unsigned i = 0; i < 2 * TRIAL_GIVE_UP; i++)   /* making: no windows count */
		CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);
	CHECK(trial_copies_made(&t, 5) == TRIAL_HAND_RAW && t.phase == TRIAL_RAW);
	for (unsigned i = 0; i + 1 < TRIAL_GIVE_UP; i++)
		CHECK(trial_window(&t, 1, 0) == TRIAL_NONE);
	CHECK(trial_window(&t, 1, 0) == TRIAL_KEEP_GPU && t.gave_up && t.phase == TRIAL_DONE);
	printf("decode trial: choices as expected\n");
	return 0;
}
