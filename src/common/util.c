#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/util.h"

int wspi_grow(void **arr, size_t *cap, size_t need, size_t elem, size_t first)
{
	if (need <= *cap)
		return 0;
	size_t n = *cap ? *cap : (first ? first : 1);
	while (n < need) {
		if (n > SIZE_MAX / 2)
			return -ENOMEM;
		n *= 2;
	}
	if (elem && n > SIZE_MAX / elem)
		return -ENOMEM;
	void *p = realloc(*arr, elem ? n * elem : 1);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = n;
	return 0;
}

unsigned wspi_cpu_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1u;
}

static uint64_t read_u64_file(const char *path, int *ok)
{
	char buf[64];
	FILE *f = fopen(path, "re");
	*ok = 0;
	if (!f)
		return 0;
	if (fgets(buf, sizeof(buf), f) && strncmp(buf, "max", 3) != 0) {
		char *end;
		unsigned long long v = strtoull(buf, &end, 10);
		if (end != buf)
			*ok = 1;
		fclose(f);
		return v;
	}
	fclose(f);
	return 0;
}

/* A "key value" line of a memory.stat file; 0 when absent. */
static uint64_t read_stat_key(const char *path, const char *key)
{
	char line[256];
	size_t klen = strlen(key);
	uint64_t v = 0;
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, klen) == 0 && line[klen] == ' ') {
			v = strtoull(line + klen + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/*
 * Room left under our memory cgroup: limit - (usage - inactive page cache),
 * since clean file pages are reclaimed before the OOM killer runs.  Handles
 * cgroup v2 ("0::/path") and v1 ("N:memory:/path").  0 and *found = 0 when
 * there is no limit.
 */
static uint64_t cgroup_room(int *found)
{
	char v2[512] = "", v1[512] = "", line[512], path[700];
	int have_v2 = 0, have_v1 = 0;
	FILE *f = fopen("/proc/self/cgroup", "re");
	*found = 0;
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		char *rest = strchr(line, ':');
		char *cgpath = rest ? strchr(rest + 1, ':') : NULL;
		if (!cgpath)
			continue;
		*cgpath++ = '\0';
		rest++;
		if (strcmp(line, "0") == 0 && *rest == '\0') {
			snprintf(v2, sizeof(v2), "%s", cgpath);
			have_v2 = 1;
		} else if (strstr(rest, "memory")) {
			snprintf(v1, sizeof(v1), "%s", cgpath);
			have_v1 = 1;
		}
	}
	fclose(f);
	const char *limit_file, *usage_file, *inactive_key;
	char base[600];
	if (have_v1) {
		snprintf(base, sizeof(base), "/sys/fs/cgroup/memory%s", v1);
		limit_file = "memory.limit_in_bytes";
		usage_file = "memory.usage_in_bytes";
		inactive_key = "total_inactive_file";
	} else if (have_v2) {
		snprintf(base, sizeof(base), "/sys/fs/cgroup%s", v2);
		limit_file = "memory.max";
		usage_file = "memory.current";
		inactive_key = "inactive_file";
	} else {
		return 0;
	}
	int ok_max, ok_cur;
	snprintf(path, sizeof(path), "%s/%s", base, limit_file);
	uint64_t max = read_u64_file(path, &ok_max);
	/* v1 spells "no limit" as a huge page-rounded number. */
	if (!ok_max || max >= (1ull << 62))
		return 0;
	snprintf(path, sizeof(path), "%s/%s", base, usage_file);
	uint64_t cur = read_u64_file(path, &ok_cur);
	snprintf(path, sizeof(path), "%s/memory.stat", base);
	uint64_t inactive = read_stat_key(path, inactive_key);
	if (!ok_cur)
		cur = 0;
	cur = cur > inactive ? cur - inactive : 0;
	*found = 1;
	return cur < max ? max - cur : 0;
}

uint64_t wspi_memory_available(const char **why)
{
	uint64_t avail = 0;
	FILE *f = fopen("/proc/meminfo", "re");
	if (f) {
		char line[256];
		while (fgets(line, sizeof(line), f)) {
			unsigned long long kb;
			if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
				avail = kb * 1024ull;
				break;
			}
		}
		fclose(f);
	}
	if (why)
		*why = "MemAvailable";
	int limited;
	uint64_t room = cgroup_room(&limited);
	if (limited && (!avail || room < avail)) {
		avail = room;
		if (why)
			*why = "the cgroup memory limit";
	}
	return avail;
}

int wspi_tensor_bytes(int dtype, unsigned rank, const uint64_t *shape, uint64_t *bytes)
{
	unsigned bits = wsp_dtype_bits((enum wsp_dtype)dtype);
	if (!bits)
		return WSP_EDTYPE;
	if (rank > WSP_MAX_RANK)
		return WSP_ETOOBIG;
	uint64_t n = 1;
	for (unsigned i = 0; i < rank; i++)
		if (ckd_mul(&n, n, shape[i]))
			return WSP_ETOOBIG;
	uint64_t total_bits;
	if (ckd_mul(&total_bits, n, (uint64_t)bits))
		return WSP_ETOOBIG;
	if (total_bits % 8)
		return WSP_EFORMAT;
	*bytes = total_bits / 8;
	return 0;
}

int wspi_open_regular(const char *path, int flags, struct wspi_err *err)
{
	struct stat st;
	int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC), rc;

	if (fd < 0)
		return WSP_ERR(err, -errno, "%s: %s", path, strerror(errno));
	if (fstat(fd, &st) < 0) {
		rc = WSP_ERR(err, -errno, "%s: %s", path, strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		rc = WSP_ERR(err, -EINVAL, "%s: not a regular file", path);
	} else if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0) {
		rc = WSP_ERR(err, -errno, "%s: %s", path, strerror(errno));
	} else {
		return fd;
	}
	close(fd);
	return rc;
}

void *wspi_map_bytes(uint64_t bytes)
{
	void *p = mmap(NULL, (size_t)(bytes ? bytes : 1), PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void wspi_unmap_bytes(void *p, uint64_t bytes)
{
	if (p)
		munmap(p, (size_t)(bytes ? bytes : 1));
}

void wspi_release_after_json(uint64_t bytes)
{
#ifdef __GLIBC__
	if (bytes > (256u << 10))
		malloc_trim(0);
#else
	(void)bytes;
#endif
}
