/* File-system helpers of the pack area: full writes and reads, directory
 * fsync, removal of a tree, and the commit of a temporary output directory. */
#ifndef WSP_PACK_FSUTIL_H
#define WSP_PACK_FSUTIL_H

#include <stdint.h>
#include "common/error.h"

/* pwrite all `len` bytes at `off`; returns 0 or -errno. */
int pack_pwrite_full(int fd, const void *buf, uint64_t len, uint64_t off);
/* pread all `len` bytes at `off`; returns 0, -errno, or WSP_EFORMAT when the
 * file ends first (*got says how much was read). */
int pack_pread_full(int fd, void *buf, uint64_t len, uint64_t off, uint64_t *got);
/* fsync a directory (its entries). */
int pack_fsync_dir(const char *path);
/* Remove a file or directory tree (no symlinks followed); 0 or -errno. */
int pack_rmtree(const char *path);
/* Make "<out>.tmp-XXXXXX" next to out; returns 0 or a code with message. */
int pack_make_tmpdir(const char *out, char **tmp, struct wsp_err *err);
/* Rename the finished temporary directory `tmp` to `out`.  With `force`, an
 * existing `out` is moved aside first and removed only once the new one is in
 * place, so that a failure leaves either the old or the new output.  Without
 * it an existing `out` fails with WSP_EEXIST.  fsyncs the parent directory. */
int pack_commit_dir(const char *tmp, const char *out, int force, struct wsp_err *err);

#endif
