/* Training state kept for the caller (see state.h). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

#include "common/util.h"
#include "writeback/spill.h"
#include "writeback/state.h"

struct state_store {
	pthread_mutex_t lock;
	struct spill *sp;          /* the buffers, in memory or in the overflow file */
	uint64_t held;             /* bytes of buffers, wherever they are */
};

int state_create(struct dev *d, const struct state_config *cfg, struct state_store **out,
		 struct wspi_err *err)
{
	struct state_store *st = calloc(1, sizeof(*st));
	struct spill_config sc = {
		.budget = cfg->budget, .dir = cfg->dir, .pack_dir = cfg->pack_dir,
		.what = "training state", .log = cfg->log, .log_ctx = cfg->log_ctx,
	};
	*out = NULL;
	if (!st)
		return WSP_ERR(err, -ENOMEM, "training state: out of memory");
	int rc = spill_create(d, cfg->n_layers, &sc, &st->sp, err);
	if (rc < 0) {
		free(st);
		return rc;
	}
	pthread_mutex_init(&st->lock, NULL);
	*out = st;
	return 0;
}

void state_destroy(struct state_store *st)
{
	if (!st)
		return;
	spill_destroy(st->sp);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

int state_acquire(struct state_store *st, uint32_t layer, uint64_t bytes, void **data,
		  struct wspi_err *err)
{
	pthread_mutex_lock(&st->lock);
	uint64_t had = spill_bytes(st->sp, layer);
	int rc = 0;
	*data = NULL;
	if (had != bytes) {
		if (spill_holders(st->sp, layer)) {
			rc = WSP_ERR(err, WSP_ESTATE, "training state of layer %u: taken with %" PRIu64
				     " bytes, asked for %" PRIu64, layer, had, bytes);
			goto out;
		}
		/* Another size (or none): a new buffer of zeros. */
		if ((rc = spill_new(st->sp, layer, bytes, NULL, data, err)) < 0)
			goto out;
		st->held += bytes - had;
	} else if ((rc = spill_get(st->sp, layer, data, err)) < 0) {
		goto out;
	}
	spill_hold(st->sp, layer);
out:
	pthread_mutex_unlock(&st->lock);
	return rc;
}

int state_release(struct state_store *st, uint32_t layer, int changed, struct wspi_err *err)
{
	pthread_mutex_lock(&st->lock);
	int rc = 0;
	if (!spill_holders(st->sp, layer)) {
		rc = WSP_ERR(err, WSP_ESTATE, "training state of layer %u: released but not taken",
			     layer);
	} else {
		spill_unhold(st->sp, layer);
		if (changed)
			spill_changed(st->sp, layer);
		spill_trim(st->sp);   /* it may leave now */
	}
	pthread_mutex_unlock(&st->lock);
	return rc;
}

uint64_t state_size(struct state_store *st, uint32_t layer)
{
	pthread_mutex_lock(&st->lock);
	uint64_t n = spill_bytes(st->sp, layer);
	pthread_mutex_unlock(&st->lock);
	return n;
}

void state_counters(struct state_store *st, struct state_counters *out)
{
	struct spill_counters c;
	pthread_mutex_lock(&st->lock);
	spill_counters(st->sp, &c);
	*out = (struct state_counters){ .resident = c.resident, .held = st->held,
					.spilled = c.spilled, .read_back = c.read_back };
	pthread_mutex_unlock(&st->lock);
}
