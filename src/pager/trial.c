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

/* Count a window of the current form; 1 when the form has its windows. */
static int measured(struct trial *t, int form, uint64_t ns, int steady)
{
	if (!steady)
		return 0;
	if (!t->skipped) {
		t->skipped = 1;
		return 0;
	}
	t->ns[form][t->n[form]++] = ns;
	return t->n[form] == TRIAL_WINDOWS;
}

enum trial_action trial_window(struct trial *t, uint64_t ns, int steady)
{
	if (t->phase == TRIAL_PACKED || t->phase == TRIAL_RAW) {
		t->unsteady = steady ? 0 : t->unsteady + 1;
		if (t->unsteady == TRIAL_GIVE_UP) {
			t->phase = TRIAL_DONE;
			t->gave_up = 1;
			return TRIAL_KEEP_GPU;
		}
	}
	switch (t->phase) {
	case TRIAL_PACKED:
		if (!measured(t, 0, ns, steady))
			return TRIAL_NONE;
		t->packed_ns = median(t->ns[0], TRIAL_WINDOWS);
		t->phase = TRIAL_MAKING;
		return TRIAL_MAKE_COPIES;
	case TRIAL_RAW:
		if (!measured(t, 1, ns, steady))
			return TRIAL_NONE;
		t->raw_ns = median(t->ns[1], TRIAL_WINDOWS);
		t->phase = TRIAL_DONE;
		return t->raw_ns * 1000 < t->packed_ns * (1000 - TRIAL_MARGIN_PERMILLE)
			       ? TRIAL_KEEP_HOST : TRIAL_KEEP_GPU;
	default:
		return TRIAL_NONE;
	}
}

enum trial_action trial_copies_made(struct trial *t, uint32_t made)
{
	if (t->phase != TRIAL_MAKING)
		return TRIAL_NONE;
	if (!made) {
		t->phase = TRIAL_DONE;
		return TRIAL_KEEP_GPU;
	}
	t->phase = TRIAL_RAW;
	t->skipped = 0;
	t->unsteady = 0;
	return TRIAL_HAND_RAW;
}
