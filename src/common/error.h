/* Error reporting inside the library.
 *
 * Internal functions return 0 / count / negative code like the public ones and
 * write the detail into a `struct wspi_err` owned by the caller (a handle, or a
 * stack buffer for handle-less calls).  The macros keep error paths one line:
 *
 *	if (fd < 0)
 *		return WSP_ERR(err, -errno, "%s: open: %s", path, strerror(errno));
 */
#ifndef WSP_COMMON_ERROR_H
#define WSP_COMMON_ERROR_H

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include "wspager.h"

#define WSP_ERRMSG_MAX 512

struct wspi_err {
	pthread_mutex_t lock;      /* several workers may fail at once */
	int code;                  /* first error kept until cleared */
	char msg[WSP_ERRMSG_MAX];
};

void wspi_err_init(struct wspi_err *e);
void wspi_err_destroy(struct wspi_err *e);
/* Record (code, message) and return code.  A later error overwrites an earlier
 * one unless `keep_first` semantics are wanted: see wspi_err_set_first. e may be
 * NULL (then only the code is returned). */
int wspi_err_set(struct wspi_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Like wspi_err_set, but keeps an error already recorded (for worker threads:
 * the first failure is the interesting one). */
int wspi_err_set_first(struct wspi_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Prefix the current message with "prefix: " (adds context while unwinding). */
void wspi_err_prefix(struct wspi_err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void wspi_err_clear(struct wspi_err *e);
/* Copy the message out under the lock. */
void wspi_err_copy(struct wspi_err *e, char *buf, size_t len);

/* Format a notice, escape what it quotes (wsp_escape_text) and hand it to
 * `log` (nothing when NULL): the one way the library says things that do
 * not stop it. */
void wspi_notice(wsp_log_fn log, void *ctx, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void wspi_vnotice(wsp_log_fn log, void *ctx, const char *fmt, va_list ap);

#define WSP_ERR(e, code, ...) wspi_err_set((e), (code), __VA_ARGS__)
/* Return early on a negative result, keeping the callee's message. */
#define WSP_TRY(expr)                                                         \
	do {                                                                  \
		int wspi_try_rc_ = (expr);                                     \
		if (wspi_try_rc_ < 0)                                          \
			return wspi_try_rc_;                                   \
	} while (0)

#endif
