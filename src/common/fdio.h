/*
 * Whole transfers on a file descriptor at an offset: every byte or an
 * error, never a short count.  One copy of the loops the pack, manifest and
 * safetensors code each had: EINTR retried, at most 1 GiB a call (Linux
 * transfers at most 2 GiB - 4 KiB at once), a read that ends early and a
 * write that makes no progress both errors.
 */
#ifndef WSP_COMMON_FDIO_H
#define WSP_COMMON_FDIO_H

#include <stdint.h>

/* 0, -errno, or WSP_EFORMAT when the file ends first (fewer bytes than
 * expected: truncated, or shrunk meanwhile); *got (may be NULL) is what
 * was read either way. */
int fd_read_at(int fd, void *buf, uint64_t len, uint64_t off, uint64_t *got);
/* 0 or -errno (-EIO when a write makes no progress). */
int fd_write_at(int fd, const void *buf, uint64_t len, uint64_t off);

#endif
