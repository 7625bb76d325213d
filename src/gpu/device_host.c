/*
 * The host backend: the "GPU" tier lives in host memory.  Copies are memcpy
 * on the calling thread, so by the time an event is recorded everything
 * before it is done: events are completed flags that remember when they
 * were recorded (for the h2d busy time).  Streams are ignored.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "gpu/device.h"

struct dev_event {
	int recorded;
	uint64_t t_ns;
};

static void host_close(struct dev *d)
{
	free(d);
}

static int host_alloc(struct dev *d, uint64_t bytes, void **out, struct wspi_err *err)
{
	void *p = NULL;
	if (bytes > SIZE_MAX)
		return WSP_ERR(err, WSP_ETOOBIG, "slot memory of %llu bytes exceeds the address space",
			       (unsigned long long)bytes);
	int rc = posix_memalign(&p, 4096, bytes ? (size_t)bytes : 4096);
	if (rc) {
		const char *why = NULL;
		uint64_t avail = wspi_memory_available(&why);
		return WSP_ERR(err, -rc,
			       "allocating %llu bytes of host slot memory failed: %s; "
			       "%llu bytes available (%s)",
			       (unsigned long long)bytes, strerror(rc), (unsigned long long)avail,
			       why ? why : "unknown");
	}
	*out = p;
	return 0;
}

static void host_free(struct dev *d, void *p)
{
	free(p);
}

static int host_event_create(struct dev *d, int timing, struct dev_event **out,
			     struct wspi_err *err)
{
	*out = calloc(1, sizeof(**out));
	if (!*out)
		return WSP_ERR(err, -ENOMEM, "out of memory for an event");
	return 0;
}

static void host_event_destroy(struct dev *d, struct dev_event *ev)
{
	free(ev);
}

static int host_record(struct dev *d, struct dev_event *ev, int q, void *stream,
		       struct wspi_err *err)
{
	ev->recorded = 1;
	ev->t_ns = wspi_now_ns();
	return 0;
}

static int host_wait(struct dev *d, int q, void *stream, struct dev_event *ev,
		     struct wspi_err *err)
{
	return 0;
}

static int host_query(struct dev *d, struct dev_event *ev, struct wspi_err *err)
{
	return 1;
}

static int host_event_sync(struct dev *d, struct dev_event *ev, struct wspi_err *err)
{
	return 0;
}

static int host_elapsed_ns(struct dev *d, struct dev_event *a, struct dev_event *b, uint64_t *ns,
			   struct wspi_err *err)
{
	*ns = b->t_ns > a->t_ns ? b->t_ns - a->t_ns : 0;
	return 0;
}

static int host_copy_h2d(struct dev *d, void *dst, const void *src, uint64_t len,
			 struct wspi_err *err)
{
	memcpy(dst, src, len);
	return 0;
}

static int host_copy_d2h(struct dev *d, int q, void *dst, const void *src, uint64_t len,
			 struct wspi_err *err)
{
	memcpy(dst, src, len);   /* host memory both sides */
	return 0;
}

static int host_sync_copy(struct dev *d, struct wspi_err *err)
{
	return 0;
}

static int host_pin(struct dev *d, void *p, uint64_t len, struct wspi_err *err)
{
	return 0;
}

static void host_unpin(struct dev *d, void *p)
{
}

static const struct dev_ops host_ops = {
	.name = "host",
	.close = host_close,
	.alloc = host_alloc,
	.free = host_free,
	.event_create = host_event_create,
	.event_destroy = host_event_destroy,
	.record = host_record,
	.wait = host_wait,
	.query = host_query,
	.event_sync = host_event_sync,
	.elapsed_ns = host_elapsed_ns,
	.copy_h2d = host_copy_h2d,
	.copy_d2h = host_copy_d2h,
	.sync_copy = host_sync_copy,
	.pin = host_pin,
	.unpin = host_unpin,
};

int dev_host_open(struct dev **out, struct wspi_err *err)
{
	struct dev *d = calloc(1, sizeof(*d));
	if (!d)
		return WSP_ERR(err, -ENOMEM, "out of memory for the host device");
	d->ops = &host_ops;
	d->ordinal = WSP_DEVICE_HOST;
	snprintf(d->desc, sizeof(d->desc), "host memory (WSP_DEVICE_HOST)");
	*out = d;
	return 0;
}
