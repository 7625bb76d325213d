/* The hand-made fuzz corpus doubles as a table of verdicts: files named ok-*
 * must open, every other one must be refused with a message naming it. */
#include <dirent.h>

#include "sthelp.h"

int main(void)
{
	struct wspi_err err;
	wspi_err_init(&err);
	struct dirent **names;
	int n = scandir(CORPUS_DIR, &names, NULL, alphasort), checked = 0;
	CHECK(n > 0);
	for (int i = 0; i < n; i++) {
		const char *nm = names[i]->d_name;
		if (nm[0] != '.') {
			char path[1024];
			snprintf(path, sizeof(path), "%s/%s", CORPUS_DIR, nm);
			struct st_file f;
			wspi_err_clear(&err);
			int rc = st_open(path, &f, &err);
			int want_ok = !strncmp(nm, "ok-", 3);
			if (want_ok ? rc != 0 : (rc >= 0 || !strstr(err.msg, nm))) {
				fprintf(stderr, "%s: rc %d (%s): %s\n", nm, rc, wsp_strerror(rc), err.msg);
				return 1;
			}
			if (rc == 0)
				st_file_free(&f);
			checked++;
		}
		free(names[i]);
	}
	free(names);
	printf("%d corpus files judged\n", checked);
	wspi_err_destroy(&err);
	return checked > 30 ? 0 : 1;
}
