/* Whole transfers at an offset (see fdio.h). */
#include <errno.h>
#include <unistd.h>

#include "common/fdio.h"
#include "wspager.h"

#define FDIO_MAX_CALL (1ull << 30)

int fd_read_at(int fd, void *buf, uint64_t len, uint64_t off, uint64_t *got)
{
	char *p = buf;
	uint64_t done = 0;
	int rc = 0;
	while (done < len) {
		uint64_t want = len - done < FDIO_MAX_CALL ? len - done : FDIO_MAX_CALL;
		ssize_t r = pread(fd, p + done, want, (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			rc = r < 0 ? -errno : WSP_EFORMAT;
			break;
		}
		done += (uint64_t)r;
	}
	if (got)
		*got = done;
	return rc;
}

int fd_write_at(int fd, const void *buf, uint64_t len, uint64_t off)
{
	const char *p = buf;
	while (len) {
		ssize_t w = pwrite(fd, p, len < FDIO_MAX_CALL ? len : FDIO_MAX_CALL, (off_t)off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		p += w;
		off += (uint64_t)w;
		len -= (uint64_t)w;
	}
	return 0;
}
