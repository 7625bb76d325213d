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

/* Messages quote names, paths and lines from input files: escaped, so
 * that an input can never write control sequences to the terminal. */
static void say(const char *fmt, va_list ap, const char *tail)
{
	char raw[2048], safe[4 * sizeof(raw)];
	vsnprintf(raw, sizeof(raw), fmt, ap);
	fflush(stdout);
	fprintf(stderr, "wspager: %s%s\n", wsp_escape_text(raw, safe, sizeof(safe)), tail);
}

void wt_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	say(fmt, ap, "");
	va_end(ap);
}

int wt_usage(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	say(fmt, ap, " (try 'wspager --help')");
	va_end(ap);
	return WT_EXIT_USAGE;
}

const char *wt_text(const char *untrusted)
{
	static __thread char buf[4 * 1024 + 1];
	return wsp_escape_text(untrusted, buf, sizeof(buf));
}

int wt_bad_option(const char *cmd, int argc, char **argv)
{
	extern int optind, optopt;
	const char *arg = optind - 1 < argc && optind > 0 ? argv[optind - 1] : "?";
	if (optopt && arg[0] == '-' && arg[1] != '-' && arg[1] != optopt)
		return wt_usage("%s: unknown option '-%c'", cmd, optopt);
	return wt_usage("%s: unknown option or missing value: '%s'", cmd, arg);
}

int wt_opt_size(const char *opt, const char *arg, uint64_t *out)
{
	int rc = wsp_parse_size(arg, out);
	if (rc == -ERANGE)
		return wt_usage("%s: size too large: '%s'", opt, arg);
	if (rc < 0)
		return wt_usage("%s: invalid size '%s' (a number with an optional K, M, G or T suffix)", opt, arg);
	return 0;
}

int wt_opt_uint(const char *opt, const char *arg, unsigned min, unsigned max, unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(arg, &end, 10);
	if (!*arg || *end || errno || arg[0] == '-' || arg[0] == '+' || v < min || v > max)
		return wt_usage("%s: invalid value '%s' (an integer from %u to %u)", opt, arg, min, max);
	*out = (unsigned)v;
	return 0;
}

int wt_opt_device(const char *opt, const char *arg, int *out)
{
	unsigned v;
	if (!strcmp(arg, "host")) {
		*out = WSP_DEVICE_HOST;
		return 0;
	}
	char *end;
	errno = 0;
	unsigned long l = strtoul(arg, &end, 10);
	if (!*arg || *end || errno || arg[0] == '-' || arg[0] == '+' || l > 1023)
		return wt_usage("%s: invalid device '%s' (a CUDA device number or 'host')", opt, arg);
	v = (unsigned)l;
	*out = (int)v;
	return 0;
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

void wt_progress_init(struct wt_progress *p, const char *label)
{
	p->on = isatty(STDERR_FILENO);
	p->label = label;
	p->last_ns = 0;
}

void wt_progress_update(struct wt_progress *p, uint64_t done, uint64_t total)
{
	if (!p->on)
		return;
	uint64_t now = wt_now_ns();
	/* Redraw at most ten times a second: terminals are slow. */
	if (done < total && now - p->last_ns < 100000000ull)
		return;
	p->last_ns = now;
	unsigned pct = total ? (unsigned)(done * 100 / total) : 100;
	if (pct > 100)
		pct = 100;
	char bar[41];
	unsigned fill = pct * 40 / 100;
	memset(bar, '#', fill);
	memset(bar + fill, ' ', 40 - fill);
	bar[40] = '\0';
	char a[32], b[32];
	fprintf(stderr, "\r%s [%s] %3u%% %s / %s ", p->label, bar, pct, wt_size(done, a, sizeof(a)),
		wt_size(total, b, sizeof(b)));
	fflush(stderr);
}

void wt_progress_done(struct wt_progress *p)
{
	if (!p->on)
		return;
	/* Clear the line so that later messages start clean. */
	fputs("\r\033[K", stderr);
	fflush(stderr);
}

int wt_progress_cb(void *ctx, uint64_t done, uint64_t total)
{
	wt_progress_update(ctx, done, total);
	return 0;
}

int wt_pick_device(int requested, bool explicit_dev, int *out)
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
			wt_error("--device %d: no usable CUDA device: %s", requested, cudaGetErrorString(ce));
		else
			wt_error("--device %d: no such CUDA device (%d found)", requested, n);
		return WT_EXIT_FAIL;
	}
	fprintf(stderr, "wspager: no usable CUDA device (%s): using the host backend (--device host)\n",
		ce != cudaSuccess ? cudaGetErrorString(ce) : "none found");
#else
	if (explicit_dev) {
		wt_error("--device %d: this wspager was built without CUDA; use --device host", requested);
		return WT_EXIT_FAIL;
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
		wt_error("%s", detail);
	else
		wt_error("%s: %s", path, detail);
}

int wt_pack_open(const char *path, wsp_pack **out)
{
	char err[512] = "";
	int rc = wsp_pack_open(path, out, err, sizeof(err));
	if (rc < 0) {
		wt_open_error(path, err, rc);
		*out = NULL;
		return WT_EXIT_FAIL;
	}
	return 0;
}

int wt_json_print(struct json_t *v)
{
	if (json_dumpf(v, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER) < 0 || fputc('\n', stdout) == EOF ||
	    fflush(stdout) == EOF) {
		wt_error("writing JSON to standard output: %s", strerror(errno));
		return WT_EXIT_FAIL;
	}
	return 0;
}

void wt_acquire_error(wsp_pager *pg, const char *layer)
{
	const char *m = wsp_errmsg(pg);
	/* The library's message usually names the layer already. */
	if (m && *m && strstr(m, layer))
		wt_error("%s", m);
	else
		wt_error("acquire of layer %s: %s", layer, m && *m ? m : "failed");
}

bool wt_drop_caches_allowed(void)
{
	const char *e = getenv("WSPAGER_NO_DROP_CACHES");
	return !(e && *e && strcmp(e, "0"));
}

FILE *wt_fopen_regular(const char *path)
{
	struct stat st;
	FILE *f;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0) {
		wt_error("%s: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		wt_error("%s: not a regular file", path);
		close(fd);
		return NULL;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	f = fdopen(fd, "r");
	if (!f) {
		wt_error("%s: %s", path, strerror(errno));
		close(fd);
	}
	return f;
}
