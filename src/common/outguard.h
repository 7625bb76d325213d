/*
 * What an output path may be.  The writers (convert, unpack, generate)
 * replace their output with a rename, and with force they remove what was
 * there: these checks run before any work, so that neither the user's inputs
 * nor an unrelated file is ever the thing removed.
 */
#ifndef WSP_COMMON_OUTGUARD_H
#define WSP_COMMON_OUTGUARD_H

#include <stddef.h>
#include <sys/stat.h>
#include "common/error.h"

/*
 * Refuse `out` when it is one of `inputs`, lies inside one, or contains one
 * (device and inode compared up the path, so symlinks, bind mounts and hard
 * links are seen through), or when its last component is "." or "..", which
 * no rename can replace.  Returns 0 or -EINVAL with the detail in `err`.
 */
int out_check_inputs(const char *out, const char *const *inputs, size_t n_inputs,
		     struct wspi_err *err);

/* Whether the entry `name` of an existing output directory is one that a
 * previous output of this kind holds (1) or not (0). */
typedef int (*out_entry_fn)(void *ctx, const char *name, const struct stat *st);

/*
 * Before any work: a missing `out` is fine; an existing one without `force`
 * is WSP_EEXIST.  With `force` it must be a directory (a regular file when
 * `file_ok` and `entry_ok` accepts it under its own name) whose every entry
 * `entry_ok` accepts; otherwise WSP_EEXIST naming the first unexpected
 * entries, and `kind` ("a pack") says what was expected.
 */
int out_check_replaceable(const char *out, int force, int file_ok, out_entry_fn entry_ok,
			  void *ctx, const char *kind, struct wspi_err *err);

/* Entry test for checkpoints: regular *.safetensors files and
 * model.safetensors.index.json. */
int out_checkpoint_entry(void *ctx, const char *name, const struct stat *st);

/* The process umask, read without changing it (thread-safe). */
unsigned out_umask(void);

#endif
