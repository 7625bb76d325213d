/* wsp_get_stats / wsp_reset_stats: the host tier's counters plus the
 * pager's own (per-acquire outcome, copies into slots, host blocking). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gpu/unpack.h"
#include "pager/pager.h"

int wsp_get_stats(wsp_pager *pg, struct wsp_stats *out)
{
	struct hcache_stats hs;
	if (!pg || !out)
		return -EINVAL;
	if (pg->group)
		return pgroup_get_stats(pg, out);
	memset(out, 0, sizeof(*out));
	memset(&hs, 0, sizeof(hs));
	pager_reap(pg, 0);   /* count the copies that have completed by now */
	hcache_get_stats(pg->hc, &hs);

	pthread_mutex_lock(&pg->lock);
	out->acquires = pg->acquires;
	out->gpu_hits = pg->gpu_hits;
	out->host_hits = pg->host_hits;
	out->misses = pg->misses;
	out->predicted = pg->predicted;
	out->acquire_block_ns = pg->acquire_block_ns;
	out->acquire_failures = pg->acquire_failures;
	out->bytes_h2d = pg->sp.bytes_h2d;
	out->h2d_ns = pg->sp.h2d_ns;
	out->gpu_evictions = pg->sp.gpu_evictions;
	out->prefetch_wasted = pg->sp.prefetch_wasted;
	out->slot_bytes = pg->sp.slot_bytes;
	out->slots_total_bytes = pg->sp.total_bytes;
	out->gpu_slots = pg->sp.n;
	unpacker_counters(pg->sp.unpack, &out->packed_gpu_hits, &out->packed_gpu_bytes);
	pthread_mutex_unlock(&pg->lock);

	out->prefetches = hs.prefetches;
	out->readahead_left_out = readahead_left_out(pg->ra);
	out->prefetch_wasted += hs.prefetch_wasted;
	out->host_evictions = hs.evictions;
	out->bytes_read = hs.bytes_read;
	out->bytes_decoded = hs.bytes_decoded;
	out->read_ns = hs.read_ns;
	out->decode_ns = hs.decode_ns;
	out->host_cache_bytes = hs.budget_bytes;
	out->pinned_bytes = hs.pinned_bytes;
	out->staging_bytes = hs.staging_bytes;
	pthread_mutex_lock(&pg->lock);
	struct wb *wb = pg->wb;
	pthread_mutex_unlock(&pg->lock);
	if (wb)
		wb_counters(wb, &out->grad_pushes, &out->bytes_d2h, &out->grad_add_ns);
	struct dirty *dt = __atomic_load_n(&pg->dirty, __ATOMIC_ACQUIRE);
	if (dt) {
		struct dirty_counters c;
		dirty_counters(dt, &c);
		out->updated_layers = c.layers;
		out->updated_bytes = c.bytes;
		out->updated_resident = c.resident;
		out->overflow_written = c.spilled;
		out->overflow_read = c.read_back;
	}
	struct state_store *st = __atomic_load_n(&pg->state, __ATOMIC_ACQUIRE);
	if (st) {
		struct state_counters c;
		state_counters(st, &c);
		out->state_held = c.held;
		out->state_resident = c.resident;
		out->overflow_written += c.spilled;
		out->overflow_read += c.read_back;
	}
	const struct io_engine *io = hcache_io(pg->hc);
	if (io) {
		snprintf(out->io_backend, sizeof(out->io_backend), "%s", io_engine_backend(io));
		out->direct_io = io_engine_direct(io);
	}
	return 0;
}

void wsp_reset_stats(wsp_pager *pg)
{
	if (!pg)
		return;
	if (pg->group) {
		pgroup_reset_stats(pg);
		return;
	}
	pager_reap(pg, 0);
	hcache_reset_stats(pg->hc);
	pthread_mutex_lock(&pg->lock);
	if (pg->wb)
		wb_reset_counters(pg->wb);
	pg->acquires = pg->gpu_hits = pg->host_hits = pg->misses = 0;
	pg->predicted = pg->acquire_block_ns = pg->acquire_failures = 0;
	pg->sp.bytes_h2d = pg->sp.h2d_ns = pg->sp.fills = 0;
	pg->sp.gpu_evictions = pg->sp.prefetch_fills = pg->sp.prefetch_wasted = 0;
	unpacker_reset_counters(pg->sp.unpack);
	pthread_mutex_unlock(&pg->lock);
}

int wsp_who_decodes(wsp_pager *pg)
{
	if (!pg)
		return -EINVAL;
	return pg->group ? pgroup_who_decodes(pg) : who_decodes_choice(pg);
}
