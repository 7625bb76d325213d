/* Shared by the reliability tests: build a generated pack in a child process
 * (so the parent's peak memory reflects only the pager), and stream a pack
 * verifying every tensor against its manifest checksum. */
#ifndef WSP_REL_H
#define WSP_REL_H

#include <stdint.h>
#include <sys/wait.h>

#include "testlib.h"
#include "wspager.h"

/* Generate a Llama-shaped bf16 checkpoint and pack it at `pack`. */
static inline void rel_make_pack(const char *dir, const char *pack, unsigned layers, unsigned hidden,
				 unsigned inter, unsigned vocab)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		char err[512], src[1024];
		struct wsp_generate_options g;
		wsp_generate_options_init(&g);
		g.layers = layers;
		g.hidden = hidden;
		g.intermediate = inter;
		g.vocab = vocab;
		snprintf(src, sizeof(src), "%s/src.safetensors", dir);
		if (wsp_generate(src, &g, err, sizeof(err)) < 0) {
			fprintf(stderr, "generate: %s\n", err);
			_exit(1);
		}
		struct wsp_convert_options c;
		wsp_convert_options_init(&c);
		const char *in[] = {src};
		if (wsp_convert(in, 1, pack, &c, err, sizeof(err)) < 0) {
			fprintf(stderr, "convert: %s\n", err);
			_exit(1);
		}
		unlink(src);
		_exit(0);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* Acquire `layer`, check every tensor's bytes against the manifest checksum
 * (host backend: data is host memory), release.  Returns bytes verified. */
static inline uint64_t rel_check_layer(wsp_pager *pg, uint32_t layer)
{
	const struct wsp_layer *L;
	int rc = wsp_acquire(pg, layer, NULL, &L);
	if (rc < 0) {
		fprintf(stderr, "acquire %u: %s (%s)\n", layer, wsp_strerror(rc), wsp_errmsg(pg));
		exit(1);
	}
	uint64_t bytes = 0;
	for (uint32_t t = 0; t < L->n_tensors; t++) {
		const struct wsp_tensor *T = &L->tensors[t];
		if (wsp_checksum64(T->data, T->bytes) != T->checksum) {
			fprintf(stderr, "layer %s tensor %s: checksum mismatch\n", L->name, T->name);
			exit(1);
		}
		bytes += T->bytes;
	}
	CHECK_RC(wsp_release(pg, layer, NULL), 0);
	return bytes;
}

/* A field of /proc/self/status in bytes ("VmHWM", "VmRSS"). */
static inline uint64_t rel_status_bytes(const char *key)
{
	char line[256];
	size_t klen = strlen(key);
	uint64_t v = 0;
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, klen) == 0 && line[klen] == ':')
			v = strtoull(line + klen + 1, NULL, 10) * 1024;
	fclose(f);
	return v;
}

#endif
