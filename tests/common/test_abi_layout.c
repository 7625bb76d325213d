/* ABI: a program built against the WSPAGER_0.2 layout of the public structs
 * (tests/common/abi_0_2.h, frozen) works with this library.  At compile
 * time every field of 0.2 must sit at the same offset with the same size and
 * every struct keep its size (new fields come out of `reserved`, which is
 * therefore the one thing allowed to move: wsp_convert_options.group_map
 * took its first word).  At run
 * time such a caller converts, opens, acquires and reads its stats through
 * its own struct types; and a caller that leaves garbage in reserved space
 * is refused rather than half-understood. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "../lib/testlib.h"
#include "abi_0_2.h"

#define SAME_SIZE(s) _Static_assert(sizeof(struct s) == sizeof(struct s##_v0_2), \
				    #s " changed size")
#define SAME_FIELD(s, f)                                                              \
	_Static_assert(offsetof(struct s, f) == offsetof(struct s##_v0_2, f) &&       \
		       sizeof(((struct s *)0)->f) == sizeof(((struct s##_v0_2 *)0)->f), \
		       #s "." #f " moved or changed size")

static void layout(void)
{
	SAME_SIZE(wsp_tensor);
	SAME_FIELD(wsp_tensor, name);
	SAME_FIELD(wsp_tensor, short_name);
	SAME_FIELD(wsp_tensor, dtype);
	SAME_FIELD(wsp_tensor, rank);
	SAME_FIELD(wsp_tensor, shape);
	SAME_FIELD(wsp_tensor, bytes);
	SAME_FIELD(wsp_tensor, checksum);
	SAME_FIELD(wsp_tensor, layer);
	SAME_FIELD(wsp_tensor, data);
	SAME_SIZE(wsp_layer);
	SAME_FIELD(wsp_layer, index);
	SAME_FIELD(wsp_layer, name);
	SAME_FIELD(wsp_layer, n_tensors);
	SAME_FIELD(wsp_layer, tensors);
	SAME_FIELD(wsp_layer, raw_bytes);
	SAME_FIELD(wsp_layer, stored_bytes);
	SAME_FIELD(wsp_layer, data);
	SAME_SIZE(wsp_pack_summary);
	SAME_FIELD(wsp_pack_summary, n_layers);
	SAME_FIELD(wsp_pack_summary, n_tensors);
	SAME_FIELD(wsp_pack_summary, n_shards);
	SAME_FIELD(wsp_pack_summary, n_sources);
	SAME_FIELD(wsp_pack_summary, n_chunks);
	SAME_FIELD(wsp_pack_summary, raw_bytes);
	SAME_FIELD(wsp_pack_summary, stored_bytes);
	SAME_FIELD(wsp_pack_summary, max_layer_raw_bytes);
	SAME_FIELD(wsp_pack_summary, chunk_bytes);
	SAME_FIELD(wsp_pack_summary, format_version);
	SAME_FIELD(wsp_pack_summary, metadata_json);
	SAME_SIZE(wsp_options);
	SAME_FIELD(wsp_options, host_cache_bytes);
	SAME_FIELD(wsp_options, gpu_slots);
	SAME_FIELD(wsp_options, device);
	SAME_FIELD(wsp_options, io);
	SAME_FIELD(wsp_options, queue_depth);
	SAME_FIELD(wsp_options, io_threads);
	SAME_FIELD(wsp_options, decode_threads);
	SAME_FIELD(wsp_options, policy);
	SAME_FIELD(wsp_options, lookahead);
	SAME_FIELD(wsp_options, page_bytes);
	SAME_FIELD(wsp_options, flags);
	SAME_FIELD(wsp_options, log);
	SAME_FIELD(wsp_options, log_ctx);
	SAME_FIELD(wsp_options, trace);
	SAME_FIELD(wsp_options, trace_ctx);
	SAME_SIZE(wsp_stats);
	SAME_FIELD(wsp_stats, acquires);
	SAME_FIELD(wsp_stats, gpu_hits);
	SAME_FIELD(wsp_stats, host_hits);
	SAME_FIELD(wsp_stats, misses);
	SAME_FIELD(wsp_stats, predicted);
	SAME_FIELD(wsp_stats, prefetches);
	SAME_FIELD(wsp_stats, prefetch_wasted);
	SAME_FIELD(wsp_stats, host_evictions);
	SAME_FIELD(wsp_stats, gpu_evictions);
	SAME_FIELD(wsp_stats, bytes_read);
	SAME_FIELD(wsp_stats, bytes_decoded);
	SAME_FIELD(wsp_stats, bytes_h2d);
	SAME_FIELD(wsp_stats, read_ns);
	SAME_FIELD(wsp_stats, decode_ns);
	SAME_FIELD(wsp_stats, h2d_ns);
	SAME_FIELD(wsp_stats, acquire_block_ns);
	SAME_FIELD(wsp_stats, host_cache_bytes);
	SAME_FIELD(wsp_stats, pinned_bytes);
	SAME_FIELD(wsp_stats, slot_bytes);
	SAME_FIELD(wsp_stats, gpu_slots);
	SAME_FIELD(wsp_stats, io_backend);
	SAME_FIELD(wsp_stats, direct_io);
	SAME_FIELD(wsp_stats, staging_bytes);
	SAME_FIELD(wsp_stats, acquire_failures);
	SAME_SIZE(wsp_convert_options);
	SAME_FIELD(wsp_convert_options, level);
	SAME_FIELD(wsp_convert_options, chunk_bytes);
	SAME_FIELD(wsp_convert_options, shard_bytes);
	SAME_FIELD(wsp_convert_options, codec);
	SAME_FIELD(wsp_convert_options, transform);
	SAME_FIELD(wsp_convert_options, threads);
	SAME_FIELD(wsp_convert_options, group_regex);
	SAME_FIELD(wsp_convert_options, flags);
	SAME_FIELD(wsp_convert_options, progress);
	SAME_FIELD(wsp_convert_options, progress_ctx);
	SAME_FIELD(wsp_convert_options, log);
	SAME_FIELD(wsp_convert_options, log_ctx);
	SAME_SIZE(wsp_generate_options);
	SAME_FIELD(wsp_generate_options, layers);
	SAME_FIELD(wsp_generate_options, hidden);
	SAME_FIELD(wsp_generate_options, intermediate);
	SAME_FIELD(wsp_generate_options, vocab);
	SAME_FIELD(wsp_generate_options, heads);
	SAME_FIELD(wsp_generate_options, kv_heads);
	SAME_FIELD(wsp_generate_options, dtype);
	SAME_FIELD(wsp_generate_options, shard_bytes);
	SAME_FIELD(wsp_generate_options, seed);
	SAME_FIELD(wsp_generate_options, flags);
	SAME_FIELD(wsp_generate_options, progress);
	SAME_FIELD(wsp_generate_options, progress_ctx);
}

int main(void)
{
	char dir[600], model[700], pack[700], err[512];
	struct wsp_generate_options_v0_2 g;
	struct wsp_convert_options_v0_2 c;
	struct wsp_options_v0_2 o;
	struct wsp_stats_v0_2 st;
	struct wsp_pack_summary_v0_2 sum;
	const struct wsp_layer *L;
	wsp_pager *pg;
	wsp_pack *pk;

	layout();
	snprintf(dir, sizeof(dir), "%s", t_scratch("abi"));
	snprintf(model, sizeof(model), "%s/m.safetensors", dir);
	snprintf(pack, sizeof(pack), "%s/m.wsp", dir);

	/* an old caller: its own structs, filled by the init functions */
	wsp_generate_options_init((struct wsp_generate_options *)&g);
	g.layers = 2;
	g.hidden = 128;
	g.intermediate = 256;
	g.vocab = 256;
	CHECK_RC(wsp_generate(model, (struct wsp_generate_options *)&g, err, sizeof(err)), 0);
	wsp_convert_options_init((struct wsp_convert_options *)&c);
	c.threads = 1;
	const char *in[] = { model };
	CHECK_RC(wsp_convert(in, 1, pack, (struct wsp_convert_options *)&c, err, sizeof(err)), 0);
	CHECK_RC(wsp_pack_open(pack, &pk, err, sizeof(err)), 0);
	memset(&sum, 0xa5, sizeof(sum));
	CHECK_RC(wsp_pack_summary(pk, (struct wsp_pack_summary *)&sum), 0);
	CHECK(sum.n_layers >= 3);   /* embedding, two blocks, the rest */
	for (size_t i = 0; i < sizeof(sum.reserved) / sizeof(sum.reserved[0]); i++)
		CHECK(sum.reserved[i] == 0);
	wsp_pack_close(pk);

	wsp_options_init((struct wsp_options *)&o);
	o.device = WSP_DEVICE_HOST;
	o.gpu_slots = 2;
	o.host_cache_bytes = 16 << 20;
	CHECK_RC(wsp_open(pack, (struct wsp_options *)&o, &pg, err, sizeof(err)), 0);
	for (uint32_t l = 0; l < sum.n_layers; l++) {
		CHECK_RC(wsp_acquire(pg, l, NULL, &L), 0);
		for (uint32_t t = 0; t < L->n_tensors; t++) {
			const struct wsp_tensor_v0_2 *T = (const void *)&L->tensors[t];
			CHECK(wsp_checksum64(T->data, T->bytes) == T->checksum);
			for (int k = 0; k < 4; k++)
				CHECK(T->reserved[k] == 0);
		}
		CHECK_RC(wsp_release(pg, l, NULL), 0);
	}
	/* The library writes every byte of the 0.2 caller's struct: the words
	 * later fields took out of its reserved space hold what those fields
	 * say (the same bytes a current caller gets, each buffer filled with a
	 * different pattern first), and what is still reserved is zero. */
	/* The pager's own threads may still move a counter between the two
	 * calls (pinning the host tier in the background, a read ahead
	 * finishing): the two agree once it is quiet, never if a field moved. */
	struct wsp_stats now;
	int same = 0;
	for (int tries = 0; tries < 400 && !same; tries++) {
		if (tries)
			usleep(5000);
		memset(&st, 0xa5, sizeof(st));
		memset(&now, 0x5a, sizeof(now));
		CHECK_RC(wsp_get_stats(pg, (struct wsp_stats *)&st), 0);
		CHECK_RC(wsp_get_stats(pg, &now), 0);
		same = memcmp(&st, &now, sizeof(st)) == 0;
	}
	for (size_t i = 0; !same && i < sizeof(st); i++)
		if (((const uint8_t *)&st)[i] != ((const uint8_t *)&now)[i])
			fprintf(stderr, "stats byte %zu: %02x in the 0.2 struct, %02x now\n", i,
				((const uint8_t *)&st)[i], ((const uint8_t *)&now)[i]);
	CHECK(st.acquires == sum.n_layers);
	CHECK(same);
	for (size_t i = 0; i < sizeof(now.reserved) / sizeof(now.reserved[0]); i++)
		CHECK(now.reserved[i] == 0);
	wsp_close(pg);

	/* a caller that did not use the init function and left garbage */
	memset(&o, 0, sizeof(o));
	wsp_options_init((struct wsp_options *)&o);
	o.device = WSP_DEVICE_HOST;
	o.reserved[15] = 42;
	CHECK_RC(wsp_open(pack, (struct wsp_options *)&o, &pg, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "reserved"));
	t_rmrf(dir);
	printf("the 0.2 layout holds: %zu-byte options, %zu-byte stats\n", sizeof(o), sizeof(st));
	return 0;
}
