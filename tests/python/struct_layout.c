/* Prints the layout of the public structs as JSON, for the Python
 * binding's test (tests/python/test_api.py compares its ctypes mirror). */
#include <stddef.h>
#include <stdio.h>

#include "wspager.h"

#define F(s, f) printf("%s[\"%s\", %zu, %zu]", first++ ? ", " : "", #f, offsetof(struct s, f), \
		       sizeof(((struct s *)0)->f))

int main(void)
{
	int first;
	printf("{");
	printf("\"wsp_tensor\": {\"size\": %zu, \"fields\": [", sizeof(struct wsp_tensor));
	first = 0;
	F(wsp_tensor, name);
	F(wsp_tensor, short_name);
	F(wsp_tensor, dtype);
	F(wsp_tensor, rank);
	F(wsp_tensor, shape);
	F(wsp_tensor, bytes);
	F(wsp_tensor, checksum);
	F(wsp_tensor, layer);
	F(wsp_tensor, data);
	F(wsp_tensor, reserved);
	printf("]}");
	printf(", \"wsp_layer\": {\"size\": %zu, \"fields\": [", sizeof(struct wsp_layer));
	first = 0;
	F(wsp_layer, index);
	F(wsp_layer, name);
	F(wsp_layer, n_tensors);
	F(wsp_layer, tensors);
	F(wsp_layer, raw_bytes);
	F(wsp_layer, stored_bytes);
	F(wsp_layer, data);
	F(wsp_layer, reserved);
	printf("]}");
	printf(", \"wsp_pack_summary\": {\"size\": %zu, \"fields\": [", sizeof(struct wsp_pack_summary));
	first = 0;
	F(wsp_pack_summary, n_layers);
	F(wsp_pack_summary, n_tensors);
	F(wsp_pack_summary, n_shards);
	F(wsp_pack_summary, n_sources);
	F(wsp_pack_summary, n_chunks);
	F(wsp_pack_summary, raw_bytes);
	F(wsp_pack_summary, stored_bytes);
	F(wsp_pack_summary, max_layer_raw_bytes);
	F(wsp_pack_summary, chunk_bytes);
	F(wsp_pack_summary, format_version);
	F(wsp_pack_summary, metadata_json);
	F(wsp_pack_summary, reserved);
	printf("]}");
	printf(", \"wsp_options\": {\"size\": %zu, \"fields\": [", sizeof(struct wsp_options));
	first = 0;
	F(wsp_options, host_cache_bytes);
	F(wsp_options, gpu_slots);
	F(wsp_options, device);
	F(wsp_options, io);
	F(wsp_options, queue_depth);
	F(wsp_options, io_threads);
	F(wsp_options, decode_threads);
	F(wsp_options, policy);
	F(wsp_options, lookahead);
	F(wsp_options, page_bytes);
	F(wsp_options, flags);
	F(wsp_options, log);
	F(wsp_options, log_ctx);
	F(wsp_options, trace);
	F(wsp_options, trace_ctx);
	F(wsp_options, on_demand);
	F(wsp_options, reserved);
	printf("]}");
	printf(", \"wsp_stats\": {\"size\": %zu, \"fields\": [", sizeof(struct wsp_stats));
	first = 0;
	F(wsp_stats, acquires);
	F(wsp_stats, gpu_hits);
	F(wsp_stats, host_hits);
	F(wsp_stats, misses);
	F(wsp_stats, predicted);
	F(wsp_stats, prefetches);
	F(wsp_stats, prefetch_wasted);
	F(wsp_stats, host_evictions);
	F(wsp_stats, gpu_evictions);
	F(wsp_stats, bytes_read);
	F(wsp_stats, bytes_decoded);
	F(wsp_stats, bytes_h2d);
	F(wsp_stats, read_ns);
	F(wsp_stats, decode_ns);
	F(wsp_stats, h2d_ns);
	F(wsp_stats, acquire_block_ns);
	F(wsp_stats, host_cache_bytes);
	F(wsp_stats, pinned_bytes);
	F(wsp_stats, slot_bytes);
	F(wsp_stats, gpu_slots);
	F(wsp_stats, io_backend);
	F(wsp_stats, direct_io);
	F(wsp_stats, staging_bytes);
	F(wsp_stats, acquire_failures);
	F(wsp_stats, grad_pushes);
	F(wsp_stats, bytes_d2h);
	F(wsp_stats, grad_add_ns);
	F(wsp_stats, reserved);
	printf("]}");
	printf(", \"wsp_convert_options\": {\"size\": %zu, \"fields\": [", sizeof(struct wsp_convert_options));
	first = 0;
	F(wsp_convert_options, level);
	F(wsp_convert_options, chunk_bytes);
	F(wsp_convert_options, shard_bytes);
	F(wsp_convert_options, codec);
	F(wsp_convert_options, transform);
	F(wsp_convert_options, threads);
	F(wsp_convert_options, group_regex);
	F(wsp_convert_options, flags);
	F(wsp_convert_options, progress);
	F(wsp_convert_options, progress_ctx);
	F(wsp_convert_options, log);
	F(wsp_convert_options, log_ctx);
	F(wsp_convert_options, group_map);
	F(wsp_convert_options, reserved);
	printf("]}");
	printf(", \"wsp_grads\": {\"size\": %zu, \"fields\": [", sizeof(struct wsp_grads));
	first = 0;
	F(wsp_grads, layer);
	F(wsp_grads, n_tensors);
	F(wsp_grads, data);
	F(wsp_grads, pushes);
	F(wsp_grads, reserved);
	printf("]}");
	printf("}\n");
	return 0;
}
