#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/error.h"
#include "common/util.h"

unsigned wsp_cpu_count(void)
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

uint64_t wsp_memory_available(const char **why)
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
	/* cgroup v2: the limit of our own group. */
	char cg[512] = "", path[640];
	f = fopen("/proc/self/cgroup", "re");
	if (f) {
		char line[512];
		while (fgets(line, sizeof(line), f))
			if (strncmp(line, "0::", 3) == 0) {
				snprintf(cg, sizeof(cg), "%s", line + 3);
				cg[strcspn(cg, "\n")] = '\0';
			}
		fclose(f);
	}
	int ok_max, ok_cur;
	snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.max", cg);
	uint64_t max = read_u64_file(path, &ok_max);
	snprintf(path, sizeof(path), "/sys/fs/cgroup%s/memory.current", cg);
	uint64_t cur = read_u64_file(path, &ok_cur);
	if (ok_max) {
		uint64_t left = (ok_cur && cur < max) ? max - cur : 0;
		if (!avail || left < avail) {
			avail = left;
			if (why)
				*why = "the cgroup memory limit";
		}
	}
	return avail;
}

int wsp_tensor_bytes(int dtype, unsigned rank, const uint64_t *shape, uint64_t *bytes)
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
