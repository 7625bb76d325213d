/* Shared by the write-back tests that spill to an overflow file: the
 * process's peak RSS (what spilling keeps down), what the file's directory
 * holds, and a way to damage the file the pager keeps open there
 * (unnamed, so found among the process's open descriptors). */
#ifndef WSP_TESTS_WRITEBACK_OVERFLOW_UTIL_H
#define WSP_TESTS_WRITEBACK_OVERFLOW_UTIL_H

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/testlib.h"

/* The process's peak resident set, KiB. */
static inline long t_peak_rss_kib(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

/* Entries of `dir` besides . and .. */
static inline unsigned t_entries(const char *dir)
{
	unsigned k = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d)))
		k += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	if (d)
		closedir(d);
	return k;
}

/* Overwrite every open, deleted file in `dir` (the pager's overflow files)
 * with other bytes, through a description of its own (no O_DIRECT).
 * Returns how many bytes were changed. */
static inline uint64_t t_corrupt_overflow(const char *dir)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	uint64_t changed = 0;
	while (d && (e = readdir(d))) {
		char link[300], target[800];
		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		ssize_t k = readlink(link, target, sizeof(target) - 1);
		if (k <= 0)
			continue;
		target[k] = 0;
		if (strncmp(target, dir, strlen(dir)) != 0 || !strstr(target, "(deleted)"))
			continue;
		int fd = open(link, O_RDWR);
		struct stat st;
		CHECK(fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0);
		char junk[4096];
		memset(junk, 0xa5, sizeof(junk));
		for (off_t at = 0; at < st.st_size; at += (off_t)sizeof(junk))
			changed += (uint64_t)pwrite(fd, junk, sizeof(junk), at);
		CHECK(fsync(fd) == 0);
		close(fd);
	}
	if (d)
		closedir(d);
	return changed;
}

#endif
