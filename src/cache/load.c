/* The record of a load in flight: see load.h. */
#include <stdarg.h>
#include <stdio.h>

#include "cache/load.h"

void hc_load_begin(struct hc_load *ld, uint64_t n_jobs)
{
	atomic_store(&ld->pending, n_jobs + 1);
	atomic_store(&ld->status, 0);
	wspi_err_clear(&ld->err);
}

int hc_load_put(struct hc_load *ld, uint64_t n)
{
	return n && atomic_fetch_sub(&ld->pending, n) == n;
}

int hc_load_result(struct hc_load *ld, char *msg, size_t size)
{
	int status = atomic_load(&ld->status);
	if (status)
		wspi_err_copy(&ld->err, msg, size);
	return status;
}

int hc_load_failed(struct hc_load *ld)
{
	return atomic_load(&ld->status) != 0;
}

int hc_load_fail(struct hc_load *ld, int rc, const char *fmt, ...)
{
	int zero = 0;
	if (!atomic_compare_exchange_strong(&ld->status, &zero, rc))
		return 0;   /* it had failed already: the first message stays */
	char msg[WSP_ERRMSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	wspi_err_set(&ld->err, rc, "%s", msg);
	return 1;
}
