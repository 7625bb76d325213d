/* Who decodes: the trial's rules (trial.h). */
#include <string.h>

#include "pager/trial.h"

void trial_init(struct trial *t)
{
	memset(t, 0, sizeof(*t));
	t->phase = TRIAL_PACKED;
}

static uint64_t median(uint64_t *v, unsigned n)
{
	for (unsigned i = 1; i < n; i++)   /* a few values: insertion sort */
		for (unsigned j = i; j > 0 && v[j - 1] > v[j]; j--) {
			uint64_t x = v[j];
			v[j] = v[j - 1];
			v[j - 1] = x;
		}
	return v[n / 2];
}

/* The pairs are in: the medians, and the choice by the median ratio of
 * two pairs in a row (raw, packed, packed, raw: a steady drift of the
 * GPU's speed adds as much to both forms). */
static enum trial_action decide(struct trial *t)
{
	uint64_t ratio[TRIAL_PAIRS / 2];
	for (unsigned i = 0; i < TRIAL_PAIRS / 2; i++) {
		uint64_t raw = t->ns[1][2 * i] + t->ns[1][2 * i + 1];
		uint64_t packed = t->ns[0][2 * i] + t->ns[0][2 * i + 1];
		ratio[i] = packed ? raw * 1000 / packed : 1000;
	}
	t->ratio_permille = (uint32_t)median(ratio, TRIAL_PAIRS / 2);
	t->packed_ns = median(t->ns[0], TRIAL_PAIRS);
	t->raw_ns = median(t->ns[1], TRIAL_PAIRS);
	t->phase = TRIAL_DONE;
	return t->ratio_permille < 1000 - TRIAL_MARGIN_PERMILLE ? TRIAL_KEEP_HOST : TRIAL_KEEP_GPU;
}

enum trial_action trial_window(struct trial *t, uint64_t ns, int steady)
{
	if (t->phase == TRIAL_PACKED || t->phase == TRIAL_TURNS) {
		t->unsteady = steady ? 0 : t->unsteady + 1;
		if (t->unsteady == TRIAL_GIVE_UP) {
			t->phase = TRIAL_DONE;
			t->gave_up = 1;
			return TRIAL_KEEP_GPU;
		}
	}
	if (!steady || (t->phase != TRIAL_PACKED && t->phase != TRIAL_TURNS))
		return TRIAL_NONE;
	if (t->phase == TRIAL_PACKED) {   /* warmed up: the copies */
		t->phase = TRIAL_MAKING;
		return TRIAL_MAKE_COPIES;
	}
	if (t->skip) {
		t->skip = 0;
		return TRIAL_NONE;
	}
	t->ns[t->raw][t->pairs] = ns;
	if (!t->second) {   /* the pair's other form, after a window to switch */
		t->second = 1;
		t->raw = !t->raw;
		t->skip = 1;
		return t->raw ? TRIAL_HAND_RAW : TRIAL_HAND_PACKED;
	}
	t->second = 0;   /* the next pair begins with this form: no switch */
	if (++t->pairs == TRIAL_PAIRS)
		return decide(t);
	return TRIAL_NONE;
}

enum trial_action trial_copies_made(struct trial *t, uint32_t made)
{
	if (t->phase != TRIAL_MAKING)
		return TRIAL_NONE;
	if (!made) {
		t->phase = TRIAL_DONE;
		return TRIAL_KEEP_GPU;
	}
	t->phase = TRIAL_TURNS;
	t->raw = 1;
	t->skip = 1;
	t->unsteady = 0;
	return TRIAL_HAND_RAW;
}

int trial_window_ends(uint64_t count, uint64_t least, int same_place)
{
	return count >= least * TRIAL_WINDOW_MAX || (count >= least && same_place);
}
