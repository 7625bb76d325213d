/* The NULL policy of wspager(3), call by call: a NULL handle or a NULL
 * pointer argument that the call needs gives -EINVAL (never a crash);
 * free/close functions accept NULL; lookups on NULL return NULL; and
 * absurd sizes in options are refused before anything is allocated. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "../lib/testlib.h"
#include "wspager.h"

int main(void)
{
	char err[512];
	uint64_t u = 0, v = 0;
	wsp_pack *pk = NULL;
	wsp_pager *pg = NULL;
	const struct wsp_layer *L;
	struct wsp_options o;
	struct wsp_convert_options c;
	struct wsp_generate_options g;
	const char *in[] = { "x.safetensors", NULL };

	/* utilities */
	CHECK_RC(wsp_parse_size(NULL, &u), -EINVAL);
	CHECK_RC(wsp_parse_size("4M", NULL), -EINVAL);
	CHECK(wsp_format_size(1, NULL, 0) == NULL);
	CHECK(wsp_escape_text("x", NULL, 0) == NULL);
	CHECK(strcmp(wsp_escape_text(NULL, err, sizeof(err)), "") == 0);
	CHECK(wsp_checksum64(NULL, 0) == wsp_checksum64("", 0));
	CHECK(wsp_dtype_from_name(NULL) == WSP_EDTYPE);
	CHECK(wsp_strerror(0) != NULL);

	/* packs */
	CHECK_RC(wsp_pack_open(NULL, &pk, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "no pack path"));
	CHECK_RC(wsp_pack_open("somewhere", NULL, err, sizeof(err)), -EINVAL);
	CHECK_RC(wsp_pack_open(NULL, NULL, NULL, 0), -EINVAL);
	wsp_pack_close(NULL);
	CHECK(wsp_pack_errmsg(NULL) != NULL);
	CHECK(wsp_pack_layer(NULL, 0) == NULL);
	CHECK(wsp_pack_find_layer(NULL, "x") == NULL);
	CHECK(wsp_pack_find_tensor(NULL, "x") == NULL);
	CHECK_RC(wsp_pack_summary(NULL, NULL), -EINVAL);
	CHECK_RC(wsp_pack_dtype_bytes(NULL, WSP_DTYPE_BF16, &u, &v), -EINVAL);
	CHECK_RC(wsp_pack_shard_path(NULL, 0, err, sizeof(err)), -EINVAL);
	uint32_t shard;
	uint64_t offset;
	CHECK_RC(wsp_pack_layer_extent(NULL, 0, &shard, &offset), -EINVAL);
	CHECK_RC(wsp_hint_next(NULL, NULL, 0), -EINVAL);
	CHECK_RC(wsp_acquire_flags(NULL, 0, NULL, 0, NULL), -EINVAL);
	CHECK_RC(wsp_pack_verify(NULL, 0, NULL, NULL), -EINVAL);
	CHECK_RC(wsp_pack_read_layer(NULL, 0, err), -EINVAL);
	struct wsp_part part;
	CHECK_RC(wsp_pack_read_part(NULL, 0, 0, 1, NULL, 0, &part), -EINVAL);
	CHECK_RC(wsp_pack_measure_decode(NULL, 0, 0, &u, &v), -EINVAL);
	CHECK_RC(wsp_pack_measure_read(NULL, NULL, 0, &u, &v), -EINVAL);
	CHECK_RC(wsp_pack_unpack(NULL, "out", 0, NULL, NULL), -EINVAL);

	/* the pager */
	wsp_options_init(&o);
	CHECK_RC(wsp_open(NULL, &o, &pg, err, sizeof(err)), -EINVAL);
	CHECK_RC(wsp_open("somewhere", &o, NULL, err, sizeof(err)), -EINVAL);
	wsp_close(NULL);
	CHECK(wsp_errmsg(NULL) != NULL);
	CHECK(wsp_pager_pack(NULL) == NULL);
	CHECK_RC(wsp_acquire(NULL, 0, NULL, &L), -EINVAL);
	CHECK_RC(wsp_acquire_by_name(NULL, "x", NULL, &L), -EINVAL);
	CHECK(wsp_layer_tensor(NULL, "x") == NULL);
	CHECK_RC(wsp_release(NULL, 0, NULL), -EINVAL);
	CHECK_RC(wsp_prefetch(NULL, 0), -EINVAL);
	CHECK_RC(wsp_provide(NULL, 0, err, 1), -EINVAL);
	CHECK_RC(wsp_provide_device(NULL, 0, err, 1, NULL), -EINVAL);
	int device;
	CHECK_RC(wsp_layer_device(NULL, 0, &device, NULL), -EINVAL);
	CHECK_RC(wsp_grad_push(NULL, 0, NULL, NULL), -EINVAL);
	CHECK_RC(wsp_grad_query(NULL, 0), -EINVAL);
	CHECK_RC(wsp_grad_wait(NULL, WSP_ALL_LAYERS), -EINVAL);
	CHECK_RC(wsp_grad_get(NULL, 0, NULL), -EINVAL);
	CHECK_RC(wsp_grad_zero(NULL, 0), -EINVAL);
	CHECK_RC(wsp_update(NULL, 0, NULL), -EINVAL);
	CHECK_RC(wsp_update_f32(NULL, 0, NULL), -EINVAL);
	CHECK_RC(wsp_save(NULL, NULL, 0, NULL, NULL), -EINVAL);
	wsp_reset_prediction(NULL);
	CHECK_RC(wsp_get_stats(NULL, NULL), -EINVAL);
	wsp_reset_stats(NULL);
	CHECK_RC(wsp_who_decodes(NULL), -EINVAL);
	wsp_options_init(NULL);
	wsp_convert_options_init(NULL);
	wsp_generate_options_init(NULL);

	/* absurd sizes and non-zero reserved fields: refused at open, before
	 * any allocation (the pack path does not even exist) */
	wsp_options_init(&o);
	o.device = WSP_DEVICE_HOST;
	o.gpu_slots = 0xffffffffu;
	CHECK_RC(wsp_open("/nonexistent", &o, &pg, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "gpu_slots"));
	wsp_options_init(&o);
	o.reserved[3] = 1;
	CHECK_RC(wsp_open("/nonexistent", &o, &pg, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "reserved"));

	/* converting and generating */
	wsp_convert_options_init(&c);
	CHECK_RC(wsp_convert(NULL, 1, "out", &c, err, sizeof(err)), -EINVAL);
	CHECK_RC(wsp_convert(in, 1, NULL, &c, err, sizeof(err)), -EINVAL);
	CHECK_RC(wsp_convert(in, 2, "out", &c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "NULL"));
	c.reserved[0] = 1;
	CHECK_RC(wsp_convert(in, 1, "out", &c, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "reserved"));
	wsp_generate_options_init(&g);
	CHECK_RC(wsp_generate(NULL, &g, err, sizeof(err)), -EINVAL);
	g.reserved[7] = 1;
	CHECK_RC(wsp_generate("out.safetensors", &g, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "reserved"));
	CHECK_RC(wsp_simulate(NULL, 1, NULL, 1, 1, WSP_SIM_LRU, NULL), -EINVAL);
	printf("every NULL argument refused\n");
	return 0;
}
