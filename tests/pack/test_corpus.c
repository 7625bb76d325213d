/* The manifest corpus is what it claims: files named ok-* parse, every other
 * file is refused by wspm_parse (so the fuzz replay starts from real
 * defects, each caught by the check meant for it). */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pack/manifest.h"
#include "testlib.h"

int main(void)
{
	struct dirent **names;
	int n = scandir(CORPUS_DIR, &names, NULL, alphasort), bad = 0, count = 0;

	CHECK(n > 0);
	for (int i = 0; i < n; i++) {
		char path[4096];
		const char *name = names[i]->d_name;
		if (name[0] == '.') {
			free(names[i]);
			continue;
		}
		snprintf(path, sizeof(path), "%s/%s", CORPUS_DIR, name);
		FILE *f = fopen(path, "rb");
		CHECK(f);
		fseek(f, 0, SEEK_END);
		long len = ftell(f);
		rewind(f);
		uint64_t *buf = malloc(len ? (size_t)len + 8 : 8);
		CHECK(buf && fread(buf, 1, (size_t)len, f) == (size_t)len);
		fclose(f);
		struct wspi_manifest m;
		struct wspi_err err;
		wspi_err_init(&err);
		int rc = wspm_parse(buf, (uint64_t)len, &m, &err);
		int want_ok = !strncmp(name, "ok-", 3);
		if ((rc == 0) != want_ok) {
			fprintf(stderr, "%s: wspm_parse returned %d (%s)\n", name, rc, err.msg);
			bad++;
		} else if (rc < 0 && !err.msg[0]) {
			fprintf(stderr, "%s: rejected without a message\n", name);
			bad++;
		} else if (rc < 0) {
			printf("%s: %s\n", name, err.msg);   /* for the log: why */
		}
		count++;
		wspi_err_destroy(&err);
		free(buf);
		free(names[i]);
	}
	free(names);
	printf("%d corpus files checked\n", count);
	return bad ? 1 : 0;
}
