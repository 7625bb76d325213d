/* The one table of error strings, and the per-handle message. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"

static const char *const project_errors[] = {
	[-(WSP_EFORMAT) - 4096] = "malformed file",
	[-(WSP_ECHECKSUM) - 4096] = "checksum mismatch",
	[-(WSP_EZSTD) - 4096] = "zstd frame rejected",
	[-(WSP_ECUDA) - 4096] = "CUDA error",
	[-(WSP_ECUBLAS) - 4096] = "cuBLAS error",
	[-(WSP_EVERSION) - 4096] = "unsupported pack format version",
	[-(WSP_EDTYPE) - 4096] = "unknown or unsupported dtype",
	[-(WSP_ETOOBIG) - 4096] = "size or count beyond limit",
	[-(WSP_ENOTFOUND) - 4096] = "no such layer or tensor",
	[-(WSP_ENODEVICE) - 4096] = "no CUDA device",
	[-(WSP_ESTATE) - 4096] = "invalid in the current state",
	[-(WSP_EEXIST) - 4096] = "output exists (use force to replace it)",
	[-(WSP_EBIGENDIAN) - 4096] = "big-endian hosts are not supported",
};

const char *wsp_strerror(int code)
{
	if (code >= 0)
		return "success";
	if (code > -4096)
		return strerror(-code);
	size_t i = (size_t)(-(long)code - 4096);
	if (i < sizeof(project_errors) / sizeof(project_errors[0]) && project_errors[i])
		return project_errors[i];
	return "unknown error";
}

void wspi_err_init(struct wspi_err *e)
{
	pthread_mutex_init(&e->lock, NULL);
	e->code = 0;
	e->msg[0] = '\0';
}

void wspi_err_destroy(struct wspi_err *e)
{
	if (e)
		pthread_mutex_destroy(&e->lock);
}

static int err_vset(struct wspi_err *e, int keep_first, int code, const char *fmt, va_list ap)
{
	if (!e)
		return code;
	pthread_mutex_lock(&e->lock);
	if (!(keep_first && e->code < 0)) {
		char raw[WSP_ERRMSG_MAX];
		e->code = code;
		vsnprintf(raw, sizeof(raw), fmt, ap);
		/* Messages quote names read from files: never raw to a terminal. */
		wsp_escape_text(raw, e->msg, sizeof(e->msg));
	}
	pthread_mutex_unlock(&e->lock);
	return code;
}

int wspi_err_set(struct wspi_err *e, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	err_vset(e, 0, code, fmt, ap);
	va_end(ap);
	return code;
}

int wspi_err_set_first(struct wspi_err *e, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	err_vset(e, 1, code, fmt, ap);
	va_end(ap);
	return code;
}

void wspi_err_prefix(struct wspi_err *e, const char *fmt, ...)
{
	if (!e)
		return;
	char prefix[WSP_ERRMSG_MAX], old[WSP_ERRMSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(old, sizeof(old), fmt, ap);
	va_end(ap);
	wsp_escape_text(old, prefix, sizeof(prefix));
	/* "prefix: old", truncated to fit; built by hand because the
	 * truncation is intended. */
	pthread_mutex_lock(&e->lock);
	memcpy(old, e->msg, sizeof(old));
	size_t cap = sizeof(e->msg) - 1, n = strnlen(prefix, cap);
	memcpy(e->msg, prefix, n);
	for (const char *s = ": "; *s && n < cap; s++)
		e->msg[n++] = *s;
	size_t rest = strnlen(old, sizeof(old));
	if (rest > cap - n)
		rest = cap - n;
	memcpy(e->msg + n, old, rest);
	e->msg[n + rest] = '\0';
	pthread_mutex_unlock(&e->lock);
}

void wspi_err_clear(struct wspi_err *e)
{
	pthread_mutex_lock(&e->lock);
	e->code = 0;
	e->msg[0] = '\0';
	pthread_mutex_unlock(&e->lock);
}

void wspi_err_copy(struct wspi_err *e, char *buf, size_t len)
{
	if (!buf || !len)
		return;
	pthread_mutex_lock(&e->lock);
	snprintf(buf, len, "%s", e->msg);
	pthread_mutex_unlock(&e->lock);
}

void wspi_vnotice(wsp_log_fn log, void *ctx, const char *fmt, va_list ap)
{
	char raw[WSP_ERRMSG_MAX], msg[WSP_ERRMSG_MAX];

	if (!log)
		return;
	vsnprintf(raw, sizeof(raw), fmt, ap);
	log(ctx, wsp_escape_text(raw, msg, sizeof(msg)));
}

void wspi_notice(wsp_log_fn log, void *ctx, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	wspi_vnotice(log, ctx, fmt, ap);
	va_end(ap);
}
