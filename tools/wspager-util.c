/* wspager(1): messages, option values, clocks, progress bar, devices. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef WSP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "wspager-tool.h"

const char *wt_text(const char *untrusted)
{
	static __thread char buf[4 * 1024 + 1];
	return wsp_escape_text(untrusted, buf, sizeof(buf));
}

int wt_opt_device(const char *opt, const char *arg, void *dest)
{
	int *out = dest;
	unsigned v;
	if (!strcmp(arg, "host")) {
		*out = WSP_DEVICE_HOST;
		return 0;
	}
	char *end;
	errno = 0;
	unsigned long l = strtoul(arg, &end, 10);
	if (!*arg || *end || errno || arg[0] == '-' || arg[0] == '+' || l > 1023)
		return cli_usage("%s: invalid device '%s' (a CUDA device number or 'host')", opt, arg);
	v = (unsigned)l;
	*out = (int)v;
	return 0;
}

int wt_opt_devices(const char *opt, const char *arg, void *dest)
{
	struct wt_devices *out = dest;
	char item[32];
	out->n = 0;
	for (const char *p = arg;; p++) {
		size_t len = strcspn(p, ",");
		if (len == 0 || len >= sizeof(item))
			return cli_usage("%s: invalid list '%s' (devices as --device takes them, "
					 "separated by commas: 0,1)", opt, arg);
		if (out->n == WT_MAX_DEVICES)
			return cli_usage("%s: more than %u devices", opt, WT_MAX_DEVICES);
		memcpy(item, p, len);
		item[len] = '\0';
		int rc = wt_opt_device(opt, item, &out->dev[out->n]);
		if (rc)
			return rc;
		for (unsigned j = 0; j < out->n; j++)
			if (out->dev[j] == out->dev[out->n] && out->dev[j] != WSP_DEVICE_HOST)
				return cli_usage("%s: device %s is named twice", opt, item);
		out->n++;
		p += len;
		if (!*p)
			return 0;
	}
}

uint64_t wt_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void wt_cpu_now(struct wt_cpu *c)
{
	struct rusage ru;
	memset(c, 0, sizeof(*c));
	if (getrusage(RUSAGE_SELF, &ru))
		return;
	c->user_ns = (uint64_t)ru.ru_utime.tv_sec * 1000000000ull + (uint64_t)ru.ru_utime.tv_usec * 1000;
	c->sys_ns = (uint64_t)ru.ru_stime.tv_sec * 1000000000ull + (uint64_t)ru.ru_stime.tv_usec * 1000;
}

double wt_gbps(uint64_t bytes, uint64_t ns)
{
	return ns ? (double)bytes / (double)ns : 0.0;
}

const char *wt_size(uint64_t bytes, char *buf, size_t len)
{
	return wsp_format_size(bytes, buf, len);
}

int wt_pick_device(const char *opt, int requested, bool explicit_dev, int *out)
{
	if (requested == WSP_DEVICE_HOST) {
		*out = WSP_DEVICE_HOST;
		return 0;
	}
#ifdef WSP_HAVE_CUDA
	int n = 0;
	cudaError_t ce = cudaGetDeviceCount(&n);
	if (ce == cudaSuccess && requested < n) {
		*out = requested;
		return 0;
	}
	if (explicit_dev) {
		if (ce != cudaSuccess)
			cli_error("%s %d: no usable CUDA device: %s", opt, requested, cudaGetErrorString(ce));
		else
			cli_error("%s %d: no such CUDA device (%d found)", opt, requested, n);
		return CLI_EXIT_FAIL;
	}
	fprintf(stderr, "wspager: no usable CUDA device (%s): using the host backend (--device host)\n",
		ce != cudaSuccess ? cudaGetErrorString(ce) : "none found");
#else
	if (explicit_dev) {
		cli_error("%s %d: this wspager was built without CUDA; use --device host", opt, requested);
		return CLI_EXIT_FAIL;
	}
	fputs("wspager: built without CUDA: using the host backend (--device host)\n", stderr);
#endif
	*out = WSP_DEVICE_HOST;
	return 0;
}

const char *wt_device_name(int device, char *buf, size_t len)
{
	if (device == WSP_DEVICE_HOST) {
		snprintf(buf, len, "host");
		return buf;
	}
#ifdef WSP_HAVE_CUDA
	struct cudaDeviceProp prop;
	if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
		snprintf(buf, len, "cuda:%d (%s)", device, prop.name);
		return buf;
	}
#endif
	snprintf(buf, len, "cuda:%d", device);
	return buf;
}

void wt_open_error(const char *path, const char *err, int rc)
{
	const char *detail = err && err[0] ? err : wsp_strerror(rc);
	/* Name the pack once, whether or not the library already did. */
	if (strstr(detail, path))
		cli_error("%s", detail);
	else
		cli_error("%s: %s", path, detail);
}

int wt_pack_open(const char *path, wsp_pack **out)
{
	char err[512] = "";
	int rc = wsp_pack_open(path, out, err, sizeof(err));
	if (rc < 0) {
		wt_open_error(path, err, rc);
		*out = NULL;
		return CLI_EXIT_FAIL;
	}
	return 0;
}

int wt_json_print(struct json_t *v)
{
	if (json_dumpf(v, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0 || fputc('\n', stdout) == EOF ||
	    fflush(stdout) == EOF) {
		cli_error("writing JSON to standard output: %s", strerror(errno));
		return CLI_EXIT_FAIL;
	}
	return 0;
}

void wt_acquire_error(wsp_pager *pg, const char *layer)
{
	const char *m = wsp_errmsg(pg);
	/* The library's message usually names the layer already. */
	if (m && *m && strstr(m, layer))
		cli_error("%s", m);
	else
		cli_error("acquire of layer %s: %s", layer, m && *m ? m : "failed");
}

bool wt_drop_caches_allowed(void)
{
	const char *e = getenv("WSPAGER_NO_DROP_CACHES");
	return !(e && *e && strcmp(e, "0"));
}

