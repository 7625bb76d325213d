/* Replays a saved corpus through a libFuzzer target without a fuzzing engine,
 * so `make check` runs every parser over its hand-made bad files.  Arguments
 * are files or directories; with none, CORPUS_DIR (set at build time) is used.
 * Exit 0 when every input was processed without a crash (ASan/UBSan builds
 * turn memory errors into crashes). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	struct stat st;
	if (fstat(fileno(f), &st) != 0) {
		fclose(f);
		return -1;
	}
	size_t n = (size_t)st.st_size;
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf || fread(buf, 1, n, f) != n) {
		fprintf(stderr, "%s: read failed\n", path);
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, n);
	free(buf);
	return 0;
}

static int replay_path(const char *path, unsigned *count)
{
	struct stat st;
	if (stat(path, &st) != 0) {
		perror(path);
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		(*count)++;
		return replay_file(path);
	}
	struct dirent **names;
	int n = scandir(path, &names, NULL, alphasort), rc = 0;
	if (n < 0) {
		perror(path);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		if (names[i]->d_name[0] != '.' && rc == 0) {
			char sub[4096];
			snprintf(sub, sizeof(sub), "%s/%s", path, names[i]->d_name);
			rc = replay_path(sub, count);
		}
		free(names[i]);
	}
	free(names);
	return rc;
}

int main(int argc, char **argv)
{
	unsigned count = 0;
	int rc = 0;
	if (argc < 2) {
#ifdef CORPUS_DIR
		rc = replay_path(CORPUS_DIR, &count);
#else
		fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
		return 1;
#endif
	}
	for (int i = 1; i < argc && rc == 0; i++)
		rc = replay_path(argv[i], &count);
	if (rc == 0 && count == 0) {
		fprintf(stderr, "no corpus inputs found: nothing was tested\n");
		return 1;
	}
	printf("replayed %u inputs\n", count);
	return rc == 0 ? 0 : 1;
}
