/* A release whose event cannot be recorded fails and is not half done: the
 * layer stays acquired (its slot is never reused under a stream nothing
 * orders it after), no unrecorded event is kept to be waited on, and the
 * release can be made again once recording works.  Host backend, with the
 * device's record operation made to fail for the user's stream. */
#include <errno.h>

#include "pager/pager.h"
#include "pager_util.h"

static const struct dev_ops *real;

static int failing_record(struct dev *d, struct dev_event *ev, int on_copy, void *stream,
			  struct wspi_err *err)
{
	if (on_copy)
		return real->record(d, ev, on_copy, stream, err);
	return WSP_ERR(err, WSP_ECUDA, "record: injected failure");
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	const struct wsp_layer *a, *b;
	char err[512];
	wsp_pager *pg;

	t_model_make(&m, "release-fault", 3, 128, 256);
	t_host_options(&o, &m, 100, 1);
	o.flags |= WSP_OPEN_NO_PREFETCH;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	CHECK_RC(wsp_acquire(pg, 0, NULL, &a), 0);

	struct dev_ops broken = *pg->dev->ops;
	real = pg->dev->ops;
	broken.record = failing_record;
	pg->dev->ops = &broken;
	struct slot *s = slots_find(&pg->sp, 0);
	CHECK(s && s->refs == 1);
	unsigned n_rel = s->n_rel;
	CHECK_RC(wsp_release(pg, 0, NULL), WSP_ECUDA);
	CHECK(strstr(wsp_errmsg(pg), "injected failure"));
	CHECK(s->refs == 1);           /* still acquired */
	CHECK(s->n_rel == n_rel);      /* no unrecorded event kept */
	/* the one slot is still held: another layer cannot take it */
	CHECK_RC(wsp_acquire(pg, 1, NULL, &b), WSP_ESTATE);

	pg->dev->ops = real;
	CHECK_RC(wsp_release(pg, 0, NULL), 0);   /* made again: now it works */
	CHECK(s->refs == 0);
	CHECK_RC(wsp_acquire(pg, 1, NULL, &b), 0);
	CHECK(t_view_bad(b) == 0);
	CHECK_RC(wsp_release(pg, 1, NULL), 0);
	wsp_close(pg);
	t_model_remove(&m);
	return 0;
}
