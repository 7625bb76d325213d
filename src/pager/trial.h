/*
 * Who decodes a packed layer: the GPU at each fill (the link carries ~1.5x
 * fewer bytes) or the host, once (the link carries raw bytes, and the
 * GPU's SMs stay with the user's kernels).  Which is faster depends on the
 * workload: a step bound by the link wants the GPU to decode, one bound by
 * compute wants the host to.  No model of the step predicts it well (the
 * backward's gradients share the link, the decode's cost depends on what
 * it runs beside), so the pager measures both: once raw copies are made,
 * windows of acquires with raw copies and with packed layers take turns,
 * and it keeps the faster by the median ratio of two pairs in a row (see
 * TRIAL_PAIRS).  Taking
 * turns matters: a GPU's speed drifts by a few percent over its first
 * minutes (its clock follows its power and temperature), as much as the
 * two forms differ where compute bounds the step, and a trial that timed
 * all of one form and then all of the other chose by that drift.
 *
 * This is the trial's state and rules alone, with no clock or pager in it:
 * the pager (who_decodes.c) feeds it the length of each window and whether
 * the window was steady (no layer had to be read), and does what it says.
 */
#ifndef WSP_PAGER_TRIAL_H
#define WSP_PAGER_TRIAL_H

#include <stdint.h>

/* Pairs of windows (one raw, one packed) measured.  The window after each
 * switch of form is not counted: a window's wall time ends with work the
 * device still had queued from before it, of the form before the switch
 * (nor is the first window once the copies are handed out: making them
 * took the host's cores).  A pair's second form begins the next pair, so
 * the forms come raw, packed, packed, raw, raw, ...: two pairs in a row
 * see a drift from both sides, and their ratio (raw windows over packed)
 * is free of a steady drift.  The choice: the median of those ratios. */
#define TRIAL_PAIRS 6u
/* Raw copies are kept only when they are this much faster: a tie keeps
 * the packed form, which takes less memory (per mille). */
#define TRIAL_MARGIN_PERMILLE 20u
/* A window ends where it began in the cycle of acquires (the same layer
 * acquired after the same one), once it has at least its least number of
 * acquires: windows of whole steps, each with one end of a step in it
 * (where the caller waits for the device).  A window of a fixed number of
 * acquires drifts against the step (a training step acquires 21 times
 * where its window took 22) and takes in, every so often, the host's wait
 * at a step's end twice: as much as the forms differ.  A pattern with no
 * such place ends its window at TRIAL_WINDOW_MAX times the least. */
#define TRIAL_WINDOW_MAX 8u
/* Unsteady windows in a row after which the trial gives up and the GPU
 * decodes: layers that keep being read from disk (routed experts still
 * arriving, copies that crowd the tier) would otherwise keep it trying,
 * and any copies made, for good. */
#define TRIAL_GIVE_UP 16u

enum trial_phase {
	TRIAL_PACKED,    /* the warm-up window, packed layers */
	TRIAL_MAKING,    /* raw copies being made: windows not measured */
	TRIAL_TURNS,     /* raw and packed windows taking turns */
	TRIAL_DONE,
};

enum trial_action {
	TRIAL_NONE,
	TRIAL_MAKE_COPIES,   /* make raw copies of the packed layers */
	TRIAL_HAND_RAW,      /* hand out the copies from now on */
	TRIAL_HAND_PACKED,   /* hand out the packed form again, keeping the copies */
	TRIAL_KEEP_GPU,      /* done: the GPU decodes (drop the copies) */
	TRIAL_KEEP_HOST,     /* done: the raw copies are handed out from now on */
};

struct trial {
	enum trial_phase phase;
	unsigned unsteady;              /* unsteady windows in a row */
	int gave_up;                    /* done for TRIAL_GIVE_UP of them */
	int raw;                        /* the form handed out now (TRIAL_TURNS) */
	int skip;                       /* the next steady window is not counted */
	int second;                     /* the pair's first window is in */
	unsigned pairs;                 /* pairs measured */
	uint64_t ns[2][TRIAL_PAIRS];    /* each pair's windows: packed, raw */
	uint64_t packed_ns, raw_ns;     /* the medians of each form (0: not yet) */
	uint32_t ratio_permille;        /* the median ratio, raw / packed, of two pairs */
};

void trial_init(struct trial *t);
/* A window of acquires ended, `ns` long; `steady`: no layer was read from
 * disk in it (nor did anything else make it unlike the others).  An
 * unsteady window is not counted, and the form is not switched after it:
 * a pair is a steady window of one form and, after the switch's window,
 * one of the other. */
enum trial_action trial_window(struct trial *t, uint64_t ns, int steady);
/* The raw copies asked for are made: `made` of them (0: none could be,
 * for lack of room, and the GPU keeps decoding). */
enum trial_action trial_copies_made(struct trial *t, uint32_t made);
/* Whether a window of `count` acquires, at least `least`, ends at this
 * acquire; `same_place`: it is the same layer after the same one as the
 * acquire that began the window. */
int trial_window_ends(uint64_t count, uint64_t least, int same_place);

#endif
