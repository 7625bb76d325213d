/* wsp_save of a pack converted from one checkpoint file whose name does not
 * end in .safetensors (`wspack generate`'s default output is such a file):
 * the save succeeds (it used to fail: "no model.safetensors.index.json and
 * no .safetensors files"), the saved pack records the same source name, and
 * unpacked it is the original file with the updated layer's bytes.  Host
 * backend. */
#include <stdio.h>
#include <string.h>

#include "../gpu/pager_util.h"

int main(void)
{
	char dir[512], ckpt[600], pack[600], out[600], back[600], file[700], err[512];
	struct wsp_generate_options g;
	struct wsp_convert_options c;
	struct wsp_options o;
	const struct wsp_layer *L;
	wsp_pager *pg;
	wsp_pack *pk;

	snprintf(dir, sizeof(dir), "%s", t_scratch("save-names"));
	snprintf(ckpt, sizeof(ckpt), "%s/tiny-llama", dir);   /* no .safetensors */
	snprintf(pack, sizeof(pack), "%s/tiny.wsp", dir);
	snprintf(out, sizeof(out), "%s/saved.wsp", dir);
	snprintf(back, sizeof(back), "%s/back", dir);
	wsp_generate_options_init(&g);
	g.layers = 2;
	g.hidden = 64;
	g.intermediate = 128;
	g.vocab = 256;
	CHECK_RC(wsp_generate(ckpt, &g, err, sizeof(err)), 0);
	wsp_convert_options_init(&c);
	const char *in[] = { ckpt };
	CHECK_RC(wsp_convert(in, 1, pack, &c, err, sizeof(err)), 0);

	wsp_options_init(&o);
	o.device = WSP_DEVICE_HOST;
	o.host_cache_bytes = 8 << 20;
	CHECK_RC(wsp_open(pack, &o, &pg, err, sizeof(err)), 0);
	/* layer 1 changed: every byte of its first tensor flipped */
	CHECK_RC(wsp_acquire(pg, 1, NULL, &L), 0);
	uint64_t n = L->tensors[0].bytes;
	uint8_t *want = malloc(n);
	CHECK(want);
	memcpy(want, L->tensors[0].data, n);
	CHECK_RC(wsp_release(pg, 1, NULL), 0);
	for (uint64_t i = 0; i < n; i++)
		want[i] ^= 0xff;
	const void *vals[64] = { want };
	CHECK_RC(wsp_update(pg, 1, vals), 0);
	int rc = wsp_save(pg, out, 0, NULL, NULL);
	if (rc < 0)
		fprintf(stderr, "save: %s\n", wsp_errmsg(pg));
	CHECK_RC(rc, 0);
	wsp_close(pg);

	/* unpacked: the same file name, the new bytes where the layer was */
	CHECK_RC(wsp_pack_open(out, &pk, err, sizeof(err)), 0);
	CHECK_RC(wsp_pack_unpack(pk, back, 0, NULL, NULL), 0);
	wsp_pack_close(pk);
	snprintf(file, sizeof(file), "%s/tiny-llama", back);
	FILE *f = fopen(file, "rb"), *g0 = fopen(ckpt, "rb");
	CHECK(f && g0);
	fseek(f, 0, SEEK_END);
	fseek(g0, 0, SEEK_END);
	CHECK(ftell(f) == ftell(g0));
	fclose(g0);
	/* find the updated tensor's bytes in the unpacked file */
	long size = ftell(f);
	uint8_t *all = malloc((size_t)size);
	CHECK(all);
	rewind(f);
	CHECK(fread(all, 1, (size_t)size, f) == (size_t)size);
	fclose(f);
	int found = 0;
	for (long at = 0; at + (long)n <= size && !found; at += 2)
		found = memcmp(all + at, want, n) == 0;
	CHECK(found);
	printf("a pack converted from %s (no .safetensors name) saves; unpacked, the file keeps "
	       "its name and holds the updated layer\n", "tiny-llama");
	free(all);
	free(want);
	t_rmrf(dir);
	return 0;
}
