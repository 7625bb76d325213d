/* wsp_update and wsp_save: an updated layer is what every later acquire
 * sees (with its new checksums), a partial update keeps the other tensors,
 * the other layers are untouched, an acquired layer cannot be updated; a
 * save writes a pack with the same layers and the new bytes, refuses the
 * open pack and an existing output (unless forced), and a save killed
 * midway leaves no output and the open pack intact, its temporary removed
 * by the next save; a save that runs out of disk (emulated by RLIMIT_FSIZE:
 * writes fail with EFBIG, as with ENOSPC) fails naming the file and leaves
 * neither output nor temporary.  Host backend. */
#include <dirent.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../gpu/pager_util.h"

/* The expected bytes of layer l's tensor t: the pack's, or changed. */
static void change(uint8_t *p, uint64_t n, unsigned salt)
{
	for (uint64_t i = 0; i < n; i++)
		p[i] ^= (uint8_t)(0x5a + salt + i);
}

static int kill_after_first(void *ctx, uint64_t done, uint64_t total)
{
	(void)ctx;
	(void)total;
	if (done)
		raise(SIGKILL);
	return 0;
}

static unsigned count_entries(const char *dir, const char *prefix)
{
	unsigned n = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d)))
		n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
	if (d)
		closedir(d);
	return n;
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	const struct wsp_layer *L;
	char err[512], out[700], base[700];
	wsp_pager *pg;
	wsp_pack *pk, *saved;

	t_model_make(&m, "update", 5, 128, 256);
	snprintf(out, sizeof(out), "%s/tuned.wsp", m.dir);
	snprintf(base, sizeof(base), "%s", "tuned.wsp.tmp-");
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	t_host_options(&o, &m, 100, 2);
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);

	/* expected[l]: layer l's raw bytes as they should read now */
	uint32_t n = m.sum.n_layers;
	uint8_t **expected = calloc(n, sizeof(*expected));
	for (uint32_t l = 0; l < n; l++) {
		expected[l] = malloc(wsp_pack_layer(pk, l)->raw_bytes);
		CHECK_RC(wsp_pack_read_layer(pk, l, expected[l]), 0);
	}

	/* Layer 2 in a slot, then updated whole; layer 3 partly (tensor 0 kept). */
	CHECK_RC(wsp_acquire(pg, 2, NULL, &L), 0);
	uint64_t off[64];
	CHECK(L->n_tensors <= 64);
	for (uint32_t t = 0; t < L->n_tensors; t++)
		off[t] = (uint64_t)((const uint8_t *)L->tensors[t].data - (const uint8_t *)L->data);
	const void *vals[64] = { 0 };
	for (uint32_t t = 0; t < L->n_tensors; t++)
		vals[t] = expected[2] + off[t];
	CHECK_RC(wsp_update(pg, 2, vals), WSP_ESTATE);   /* acquired */
	CHECK(strstr(wsp_errmsg(pg), "release it first") != NULL);
	CHECK_RC(wsp_release(pg, 2, NULL), 0);
	/* The view is gone with the release (the slot may be refilled): the
	 * pack's own layer says the sizes. */
	const struct wsp_layer *L2 = wsp_pack_layer(pk, 2);
	for (uint32_t t = 0; t < L2->n_tensors; t++)
		change(expected[2] + off[t], L2->tensors[t].bytes, t);
	CHECK_RC(wsp_update(pg, 2, vals), 0);
	const struct wsp_layer *L3 = wsp_pack_layer(pk, 3);
	for (uint32_t t = 1; t < L3->n_tensors; t++) {
		change(expected[3] + off[t], L3->tensors[t].bytes, 7 * t);
		vals[t] = expected[3] + off[t];
	}
	vals[0] = NULL;
	CHECK_RC(wsp_update(pg, 3, vals), 0);

	/* Every layer reads as expected, twice (from the room, then a slot). */
	for (int pass = 0; pass < 2; pass++)
		for (uint32_t l = 0; l < n; l++) {
			CHECK_RC(wsp_acquire(pg, l, NULL, &L), 0);
			CHECK(t_view_bad(L) == 0);
			CHECK(memcmp(L->data, expected[l], L->raw_bytes) == 0);
			CHECK_RC(wsp_release(pg, l, NULL), 0);
		}
	struct wsp_stats st;
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.updated_layers == 2 &&
	      st.updated_bytes == wsp_pack_layer(pk, 2)->raw_bytes + L3->raw_bytes);
	CHECK_RC(wsp_update(pg, 99, vals), WSP_ENOTFOUND);
	CHECK_RC(wsp_update(pg, 1, NULL), -EINVAL);

	/* Save: refused onto the open pack; then the new pack reads back. */
	CHECK_RC(wsp_save(pg, m.pack, WSP_SAVE_FORCE, NULL, NULL), -EINVAL);
	CHECK_RC(wsp_save(pg, out, 0, NULL, NULL), 0);
	CHECK_RC(wsp_save(pg, out, 0, NULL, NULL), WSP_EEXIST);
	CHECK_RC(wsp_save(pg, out, WSP_SAVE_FORCE, NULL, NULL), 0);
	CHECK_RC(wsp_pack_open(out, &saved, err, sizeof(err)), 0);
	CHECK_RC(wsp_pack_verify(saved, 0, NULL, NULL), 0);
	struct wsp_pack_summary s0, s1;
	wsp_pack_summary(pk, &s0);
	wsp_pack_summary(saved, &s1);
	CHECK(s0.n_layers == s1.n_layers && s0.n_tensors == s1.n_tensors);
	for (uint32_t l = 0; l < n; l++) {
		const struct wsp_layer *a = wsp_pack_layer(pk, l), *b = wsp_pack_layer(saved, l);
		CHECK(strcmp(a->name, b->name) == 0 && a->n_tensors == b->n_tensors);
		CHECK(a->raw_bytes == b->raw_bytes);
		uint8_t *got = malloc(b->raw_bytes);
		CHECK_RC(wsp_pack_read_layer(saved, l, got), 0);
		CHECK(memcmp(got, expected[l], b->raw_bytes) == 0);
		free(got);
	}
	wsp_pack_close(saved);
	CHECK(count_entries(m.dir, base) == 0);

	/* A save killed after its first layer: no output, the open pack
	 * intact, and the next save removes the temporary it left. */
	char out2[720];
	snprintf(out2, sizeof(out2), "%s/killed.wsp", m.dir);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		wsp_save(pg, out2, 0, kill_after_first, NULL);
		_exit(3);
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	CHECK(access(out2, F_OK) != 0);
	CHECK(count_entries(m.dir, "killed.wsp.tmp-") == 1);
	CHECK_RC(wsp_pack_verify(pk, 0, NULL, NULL), 0);
	CHECK_RC(wsp_save(pg, out2, 0, NULL, NULL), 0);
	CHECK(count_entries(m.dir, "killed.wsp.tmp-") == 0);

	/* Out of disk: every write past 64 KiB fails. */
	char out3[720];
	snprintf(out3, sizeof(out3), "%s/full.wsp", m.dir);
	fflush(NULL);
	pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct rlimit rl = { 64 << 10, 64 << 10 };
		signal(SIGXFSZ, SIG_IGN);
		if (setrlimit(RLIMIT_FSIZE, &rl) < 0)
			_exit(2);
		int rc = wsp_save(pg, out3, 0, NULL, NULL);
		printf("save out of disk: %d: %s\n", rc, wsp_errmsg(pg));
		fflush(stdout);
		_exit(rc < 0 && strstr(wsp_errmsg(pg), "File too large") &&
		      strstr(wsp_errmsg(pg), "full.wsp.tmp-") ? 0 : 1);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(access(out3, F_OK) != 0);
	CHECK(count_entries(m.dir, "full.wsp.save.tmp-") == 0);
	CHECK(count_entries(m.dir, "full.wsp.tmp-") == 0);

	wsp_close(pg);
	for (uint32_t l = 0; l < n; l++)
		free(expected[l]);
	free(expected);
	wsp_pack_close(pk);
	t_model_remove(&m);
	return 0;
}
