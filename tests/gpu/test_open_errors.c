/* wsp_open fails cleanly: exact codes, a message naming the problem, *out
 * NULL, nothing leaked (run under ASan / valgrind). */
#include "pager_util.h"

static void expect(const char *pack, const struct wsp_options *o, int want, const char *needle)
{
	char err[512] = "untouched";
	wsp_pager *pg = (wsp_pager *)0x1;
	int rc = wsp_open(pack, o, &pg, err, sizeof(err));
	if (rc != want) {
		fprintf(stderr, "wsp_open: %d (%s), want %d; message: %s\n", rc,
			wsp_strerror(rc), want, err);
		exit(1);
	}
	CHECK(pg == NULL);
	if (!strstr(err, needle)) {
		fprintf(stderr, "message \"%s\" does not mention \"%s\"\n", err, needle);
		exit(1);
	}
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	char missing[700];

	t_model_make(&m, "gpu-open", 3, 128, 256);

	/* No such pack. */
	snprintf(missing, sizeof(missing), "%s/nothere", m.dir);
	t_host_options(&o, &m, 100, 3);
	expect(missing, &o, -ENOENT, "nothere");

	/* A host tier that cannot hold the largest layer. */
	t_host_options(&o, &m, 100, 3);
	o.host_cache_bytes = m.sum.max_layer_raw_bytes / 2;
	expect(m.pack, &o, WSP_ETOOBIG, m.pack);

	/* Bad options. */
	t_host_options(&o, &m, 100, 3);
	o.gpu_slots = 0;
	expect(m.pack, &o, -EINVAL, "gpu_slots");
	t_host_options(&o, &m, 100, 3);
	o.page_bytes = 1000;
	expect(m.pack, &o, -EINVAL, "page_bytes");
	t_host_options(&o, &m, 100, 3);
	o.flags = WSP_OPEN_HOST_DECODE | WSP_OPEN_GPU_DECODE;   /* who decodes, both fixed */
	expect(m.pack, &o, -EINVAL, "WSP_OPEN_GPU_DECODE");
	t_host_options(&o, &m, 100, 3);
	o.device = -7;
	expect(m.pack, &o, WSP_ENODEVICE, "-7");

	/* A CUDA device that does not exist (on any machine: ordinal 4096). */
	t_host_options(&o, &m, 100, 3);
	o.device = 4096;
	expect(m.pack, &o, WSP_ENODEVICE, "");

	/* The defaults. */
	wsp_options_init(&o);
	CHECK(o.gpu_slots == 3 && o.device == 0 && o.io == WSP_IO_AUTO);
	CHECK(o.queue_depth == 32 && o.io_threads == 4 && o.decode_threads == 0);
	CHECK(o.policy == WSP_POLICY_PREDICT && o.page_bytes == (2u << 20));
	CHECK(o.host_cache_bytes > 0 && o.host_cache_bytes <= (8ull << 30));
	CHECK(o.flags == 0 && o.lookahead == 0 && o.log == NULL);

	/* NULL arguments. */
	wsp_pager *pg;
	CHECK_RC(wsp_open(m.pack, &o, NULL, NULL, 0), -EINVAL);
	CHECK_RC(wsp_open(NULL, &o, &pg, NULL, 0), -EINVAL);
	CHECK(pg == NULL);
	CHECK(strcmp(wsp_errmsg(NULL), "") != 0);

	t_model_remove(&m);
	return 0;
}
