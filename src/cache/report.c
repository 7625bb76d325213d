/*
 * What the host tier says: notices, trace events and layer names for
 * messages.  Apart from hcache.c so that the loader and the decode pool,
 * which report, do not depend on the file that creates them.
 */
#include <stdarg.h>

#include "cache/hcache_int.h"

void hc_notice(struct hcache *hc, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	wspi_vnotice(hc->cfg.notice, hc->cfg.notice_ctx, fmt, ap);
	va_end(ap);
}

void hc_trace(struct hcache *hc, enum wsp_stage st, uint32_t layer, uint64_t b, uint64_t e,
	      uint64_t bytes, int thread)
{
	if (!hc->cfg.trace)
		return;
	struct wsp_trace_event ev = {
		.stage = st, .layer = layer, .begin_ns = b, .end_ns = e, .bytes = bytes,
		.thread = thread,
	};
	hc->cfg.trace(hc->cfg.trace_ctx, &ev);
}

const char *hc_layer_name(const struct hcache *hc, uint32_t layer)
{
	return wspm_str(hc->m, hc->m->layers[layer].name_off);
}
