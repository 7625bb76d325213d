/* A pager over several devices (wsp_options.devices), on two host-backend
 * devices: layers go to the devices in consecutive runs balanced by raw
 * bytes, or as layer_devices says; every acquire, whichever device, gives
 * the layer's bytes intact; each layer is read from disk once over the two
 * passes (one host tier's worth in all, split between the devices); the
 * counters add up over the devices.  Refused, with the reason: a device
 * index out of range, devices NULL, a GPU named twice, layer_devices with
 * one device, and training calls on such a pager. */
#include <inttypes.h>

#include "pager_util.h"

static void pass(wsp_pager *pg, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		t_use_layer(pg, i);
}

int main(void)
{
	struct t_model m;
	struct wsp_options o;
	struct wsp_stats st;
	char err[512];
	wsp_pager *pg;
	wsp_pack *pk;
	const int hosts[2] = { WSP_DEVICE_HOST, WSP_DEVICE_HOST };

	t_model_make(&m, "devices", 8, 128, 256);
	CHECK_RC(wsp_pack_open(m.pack, &pk, err, sizeof(err)), 0);
	uint32_t n = m.sum.n_layers;
	uint64_t stored = 0, raw_total = 0, raw_first = 0;
	for (uint32_t i = 0; i < n; i++) {
		stored += wsp_pack_layer(pk, i)->stored_bytes;
		raw_total += wsp_pack_layer(pk, i)->raw_bytes;
	}

	/* Consecutive, balanced by raw bytes. */
	t_host_options(&o, &m, 200, 3);   /* the model fits, pages rounded up and all */
	o.devices = hosts;
	o.n_devices = 2;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	unsigned prev = 0, k;
	int dev;
	for (uint32_t i = 0; i < n; i++) {
		CHECK_RC(wsp_layer_device(pg, i, &dev, &k), 0);
		CHECK(dev == WSP_DEVICE_HOST && k < 2 && k >= prev);
		prev = k;
		if (k == 0)
			raw_first += wsp_pack_layer(pk, i)->raw_bytes;
	}
	CHECK_RC(wsp_layer_device(pg, 0, &dev, &k), 0);
	CHECK(k == 0);
	CHECK_RC(wsp_layer_device(pg, n - 1, &dev, &k), 0);
	CHECK(k == 1);
	printf("device 0 has %.1f%% of the raw bytes\n", 100.0 * raw_first / raw_total);
	CHECK(raw_first * 10 >= raw_total * 3 && raw_first * 10 <= raw_total * 7);
	pass(pg, n);
	pass(pg, n);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	printf("2 passes of %u layers: %" PRIu64 " acquires, %" PRIu64 " bytes read (the pack "
	       "stores %" PRIu64 "), host tiers %" PRIu64 " bytes\n", n, st.acquires,
	       st.bytes_read, stored, st.host_cache_bytes);
	CHECK(st.acquires == 2ull * n && st.acquire_failures == 0);
	CHECK(st.bytes_read >= stored && st.bytes_read <= stored + 4096ull * n);
	CHECK(st.gpu_slots == 6);
	CHECK(st.host_cache_bytes <= o.host_cache_bytes + (2u << 20));
	wsp_reset_stats(pg);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.acquires == 0);
	uint32_t next[2] = { 1, n - 1 };
	CHECK_RC(wsp_hint_next(pg, next, 2), 0);
	CHECK_RC(wsp_prefetch(pg, 2), 0);
	wsp_reset_prediction(pg);
	pass(pg, n);

	/* Training and saving need one device. */
	const void *none[64] = { 0 };
	CHECK_RC(wsp_update(pg, 0, none), WSP_ESTATE);
	CHECK(strstr(wsp_errmsg(pg), "wsp_update") && strstr(wsp_errmsg(pg), "one device"));
	CHECK_RC(wsp_grad_push(pg, 0, none, NULL), WSP_ESTATE);
	CHECK_RC(wsp_grad_wait(pg, 0), WSP_ESTATE);
	void *data;
	CHECK_RC(wsp_state_acquire(pg, 0, 64, &data), WSP_ESTATE);
	CHECK_RC(wsp_save(pg, m.dir, 0, NULL, NULL), WSP_ESTATE);
	/* A layer the pack does not have, by either route. */
	const struct wsp_layer *L;
	CHECK_RC(wsp_acquire(pg, n, NULL, &L), WSP_ENOTFOUND);
	CHECK(strstr(wsp_errmsg(pg), "no layer"));
	CHECK_RC(wsp_layer_device(pg, n, &dev, &k), WSP_ENOTFOUND);
	CHECK_RC(wsp_acquire_by_name(pg, wsp_pack_layer(pk, 1)->name, NULL, &L), 0);
	CHECK_RC(wsp_release(pg, 1, NULL), 0);
	CHECK_RC(wsp_release(pg, 1, NULL), WSP_ESTATE);   /* a member's refusal, its reason */
	CHECK(strstr(wsp_errmsg(pg), "not acquired"));
	wsp_close(pg);

	/* As layer_devices says: alternating. */
	uint32_t *where = calloc(n, sizeof(*where));
	CHECK(where);
	for (uint32_t i = 0; i < n; i++)
		where[i] = i % 2;
	o.layer_devices = where;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	for (uint32_t i = 0; i < n; i++) {
		CHECK_RC(wsp_layer_device(pg, i, &dev, &k), 0);
		CHECK(k == i % 2);
	}
	pass(pg, n);
	pass(pg, n);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.bytes_read >= stored && st.bytes_read <= stored + 4096ull * n);
	wsp_close(pg);
	/* Everything on one of the two: the other gets no tiers. */
	for (uint32_t i = 0; i < n; i++)
		where[i] = 1;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	pass(pg, n);
	CHECK_RC(wsp_get_stats(pg, &st), 0);
	CHECK(st.gpu_slots == 3);
	wsp_close(pg);

	/* Refusals at open, each saying why. */
	where[n - 1] = 2;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), -EINVAL);
	printf("%s\n", err);
	CHECK(strstr(err, "layer_devices[") && strstr(err, "2 devices"));
	o.layer_devices = NULL;
	o.devices = NULL;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "devices is NULL"));
	const int twice[2] = { 0, 0 };
	o.devices = twice;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "twice"));
	const int bad[2] = { WSP_DEVICE_HOST, -7 };
	o.devices = bad;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), WSP_ENODEVICE);
	o.devices = hosts;
	o.n_devices = 1;
	o.layer_devices = where;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), -EINVAL);
	CHECK(strstr(err, "layer_devices"));
	/* One device in the list: as `device`. */
	o.layer_devices = NULL;
	CHECK_RC(wsp_open(m.pack, &o, &pg, err, sizeof(err)), 0);
	CHECK_RC(wsp_layer_device(pg, 0, &dev, &k), 0);
	CHECK(dev == WSP_DEVICE_HOST && k == 0);
	pass(pg, n);
	wsp_close(pg);

	free(where);
	wsp_pack_close(pk);
	t_model_remove(&m);
	return 0;
}
