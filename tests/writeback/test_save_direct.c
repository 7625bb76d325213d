/* wsp_save writes the new pack straight from the pager's layers:
 *  - no checkpoint in between: around a save of a generated bf16 model
 *    (ratio ~1.5) the process reads about the open pack's stored bytes and
 *    writes about the new pack's size (/proc/self/io); converting through
 *    safetensors files read and wrote each 2.5x that;
 *  - a pack without safetensors sources (made with the pack writer, as
 *    tests and tools do) saves too, its updated layer's bytes in it and
 *    every other layer as it was;
 *  - the saved pack keeps the layers, their order and the chunk size.
 * Host backend. */
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

#include "../gpu/pager_util.h"
#include "../lib/testpack.h"

/* rchar and wchar of this process, or 0 when /proc/self/io is missing. */
static int io_counts(uint64_t *rchar, uint64_t *wchar)
{
	FILE *f = fopen("/proc/self/io", "r");
	char key[64];
	unsigned long long v;
	int got = 0;
	if (!f)
		return 0;
	while (fscanf(f, "%63[^:]: %llu\n", key, &v) == 2) {
		if (!strcmp(key, "rchar"))
			*rchar = v, got++;
		if (!strcmp(key, "wchar"))
			*wchar = v, got++;
	}
	fclose(f);
	return got == 2;
}

/* Bytes of the regular files directly in dir. */
static uint64_t dir_bytes(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	uint64_t n = 0;
	char path[1024];
	struct stat st;
	CHECK(d);
	while ((e = readdir(d))) {
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
			n += (uint64_t)st.st_size;
	}
	closedir(d);
	return n;
}

/* Layer l of `saved` as the open pager's layer l reads now. */
static void same_layers(wsp_pager *pg, const char *saved_dir, unsigned n_layers)
{
	char err[512];
	wsp_pack *saved;
	const struct wsp_layer *L;
	CHECK_RC(wsp_pack_open(saved_dir, &saved, err, sizeof(err)), 0);
	wsp_pack *open_pk = wsp_pager_pack(pg);
	CHECK(wsp_pack_layer(saved, 0) && !wsp_pack_layer(saved, n_layers));
	for (uint32_t l = 0; l < n_layers; l++) {
		const struct wsp_layer *b = wsp_pack_layer(saved, l);
		CHECK(strcmp(b->name, wsp_pack_layer(open_pk, l)->name) == 0);
		uint8_t *got = malloc(b->raw_bytes);
		CHECK(got);
		CHECK_RC(wsp_pack_read_layer(saved, l, got), 0);
		CHECK_RC(wsp_acquire(pg, l, NULL, &L), 0);
		CHECK(L->raw_bytes == b->raw_bytes && memcmp(got, L->data, b->raw_bytes) == 0);
		CHECK_RC(wsp_release(pg, l, NULL), 0);
		free(got);
	}
	struct wsp_pack_summary a, b;
	CHECK_RC(wsp_pack_summary(open_pk, &a), 0);
	CHECK_RC(wsp_pack_summary(saved, &b), 0);
	CHECK(a.chunk_bytes == b.chunk_bytes && a.n_tensors == b.n_tensors && a.n_sources == b.n_sources &&
	      a.raw_bytes == b.raw_bytes);
	wsp_pack_close(saved);
}

int main(void)
{
	char err[512], out[700];
	struct wsp_options o;
	wsp_pager *pg;

	/* 1. a generated model: the save's I/O is the two packs' sizes */
	struct t_model m;
	t_model_make(&m, "save-direct", 6, 256, 512);
	snprintf(out, sizeof(out), "%s/saved.wsp", m.dir);
	t_host_options(&o, &m, 100, 2);
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	uint64_t nb;
	free(t_update_flipped(pg, 2, &nb));
	uint64_t r0 = 0, w0 = 0, r1 = 0, w1 = 0;
	int have_io = io_counts(&r0, &w0);
	int rc = wsp_save(pg, out, 0, NULL, NULL);
	if (rc < 0)
		fprintf(stderr, "save: %s\n", wsp_errmsg(pg));
	CHECK_RC(rc, 0);
	uint64_t old_bytes = dir_bytes(m.pack), new_bytes = dir_bytes(out);
	if (have_io && io_counts(&r1, &w1)) {
		printf("save: read %llu bytes (open pack %llu), wrote %llu (saved pack %llu; raw "
		       "weights %llu)\n", (unsigned long long)(r1 - r0),
		       (unsigned long long)old_bytes, (unsigned long long)(w1 - w0),
		       (unsigned long long)new_bytes, (unsigned long long)m.sum.raw_bytes);
		CHECK(m.sum.raw_bytes > old_bytes * 13 / 10);   /* the data compresses */
		CHECK(r1 - r0 < old_bytes * 12 / 10 + (1u << 20));
		CHECK(w1 - w0 < new_bytes * 12 / 10 + (1u << 20));
	} else {
		printf("no /proc/self/io: the save's I/O is not checked\n");
	}
	same_layers(pg, out, m.sum.n_layers);
	wsp_close(pg);
	t_model_remove(&m);

	/* 2. a pack without sources */
	const char *root = t_scratch("save-nosource");
	char pack[600];
	snprintf(pack, sizeof(pack), "%s/p", root);
	snprintf(out, sizeof(out), "%s/saved.wsp", root);
	struct t_pack_spec spec = {
		.layers = 4, .tensors_per_layer = 3, .tensor_bytes = 40000, .compressible = 0,
		.codec = WSP_CODEC_ZSTD, .chunk_bytes = 16384,
	};
	CHECK_RC(t_make_pack(pack, &spec), 0);
	wsp_options_init(&o);
	o.device = WSP_DEVICE_HOST;
	o.host_cache_bytes = 4 << 20;
	CHECK_RC(wsp_open(pack, &o, &pg, err, sizeof(err)), 0);
	free(t_update_flipped(pg, 1, &nb));
	rc = wsp_save(pg, out, 0, NULL, NULL);
	if (rc < 0)
		fprintf(stderr, "save: %s\n", wsp_errmsg(pg));
	CHECK_RC(rc, 0);
	same_layers(pg, out, spec.layers);
	wsp_close(pg);
	printf("a pack without sources saves; layers, order and chunk size kept\n");
	return 0;
}
