/* File-system helpers of the pack area: directory fsync, removal of a tree,
 * and the commit of a temporary output directory (whole reads and writes
 * are common/fdio.h's). */
#ifndef WSP_PACK_FSUTIL_H
#define WSP_PACK_FSUTIL_H

#include <stdint.h>
#include "common/error.h"
#include "wspager.h"

/* fsync a directory (its entries). */
int pack_fsync_dir(const char *path);
/* Remove a file or directory tree (no symlinks followed); 0 or -errno. */
int pack_rmtree(const char *path);
/* Make "<out>.tmp-XXXXXX" next to out; returns 0 or a code with message. */
int pack_make_tmpdir(const char *out, char **tmp, struct wspi_err *err);
/*
 * Stale temporaries.  A writer's temporary directory holds PACK_TMP_LOCK,
 * exclusively flock()ed by the writer for its whole life; the kernel drops
 * the lock when the process dies, however it dies.  So a temporary whose
 * lock can be taken was left by a run that no longer exists.
 */
#define PACK_TMP_LOCK ".lock"
/* What the lock file holds: a directory whose lock file holds anything else
 * is not a temporary of ours and is never removed. */
#define PACK_TMP_SIGNATURE "wspager temporary output\n"
/* pack_make_tmpdir, plus the lock file, locked through *lock_fd (O_CLOEXEC;
 * the caller closes it after the commit or the removal of *tmp). */
int pack_make_locked_tmpdir(const char *out, char **tmp, int *lock_fd, struct wspi_err *err);
/* pack_commit_dir, then removes PACK_TMP_LOCK from the committed `out`. */
int pack_commit_locked_dir(const char *tmp, const char *out, int force, struct wspi_err *err);
/* Remove the directories "<basename(out)>.tmp-XXXXXX" beside `out` whose
 * lock file exists and is not held, if they hold only regular files; and
 * the old outputs "<basename(out)>.old-XXXXXX" that pack_commit_dir moved
 * aside, or put such a one back as `out` when `out` is missing.  Each
 * removal and each problem is a note through `log` (may be NULL); never
 * fails.  Returns the number removed or put back. */
int pack_clean_stale_tmp(const char *out, wsp_log_fn log, void *log_ctx);
/* Rename the finished temporary directory `tmp` to `out`.  With `force`, an
 * existing `out` is swapped with `tmp` in one renameat2(RENAME_EXCHANGE), so
 * that `out` is the old or the new output at every instant, and the old one
 * is removed after; it is marked first (a lock file), so that a kill leaves
 * it where pack_clean_stale_tmp removes it.  Where the file system cannot
 * exchange, the old output goes aside as "<out>.old-XXXXXX" first (put back
 * by the next run's cleanup after a kill).  Without force an existing `out`
 * fails with WSP_EEXIST.  fsyncs the parent directory. */
int pack_commit_dir(const char *tmp, const char *out, int force, struct wspi_err *err);

/* Before any work: may `out` be written (out_check_replaceable for a pack:
 * with force, only an empty directory or a valid pack of shard files is
 * replaced)?  0, or WSP_EEXIST / -errno with the detail. */
int pack_check_output(const char *out, int force, struct wspi_err *err);

#endif
