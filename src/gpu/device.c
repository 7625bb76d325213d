/* Backend selection and the pinning hooks handed to the host cache. */
#include "config.h"   /* WSP_HAVE_CUDA */
#include "gpu/device.h"

int dev_open(int ordinal, struct dev **out, struct wspi_err *err)
{
	*out = NULL;
	if (ordinal == WSP_DEVICE_HOST)
		return dev_host_open(out, err);
	if (ordinal < 0)
		return WSP_ERR(err, WSP_ENODEVICE, "device %d: not a CUDA ordinal nor WSP_DEVICE_HOST",
			       ordinal);
#ifdef WSP_HAVE_CUDA
	return dev_cuda_open(ordinal, out, err);
#else
	return WSP_ERR(err, WSP_ENODEVICE,
		       "device %d: built without CUDA (use WSP_DEVICE_HOST)", ordinal);
#endif
}

void dev_close(struct dev *d)
{
	if (d)
		d->ops->close(d);
}

int dev_pin_hook(void *ctx, void *p, uint64_t len, struct wspi_err *err)
{
	struct dev *d = ctx;
	return d->ops->pin(d, p, len, err);
}

void dev_unpin_hook(void *ctx, void *p)
{
	struct dev *d = ctx;
	d->ops->unpin(d, p);
}
