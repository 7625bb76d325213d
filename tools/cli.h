/*
 * What wspack(1) and wspager(1) share on the command line, so that both say
 * the same mistake the same way: who speaks ("wspack convert", "wspager
 * run"), runtime errors, usage errors with one hint, option values, and a
 * progress line.  Uses only the public API (wspager.h).
 */
#ifndef WSP_TOOLS_CLI_H
#define WSP_TOOLS_CLI_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "wspager.h"

#define CLI_EXIT_OK 0
#define CLI_EXIT_FAIL 1    /* runtime error: bad pack, I/O, CUDA, checksum */
#define CLI_EXIT_USAGE 2   /* bad command line */

/* The program and, once known, its subcommand (NULL: none). */
void cli_name(const char *prog, const char *cmd);

/* "PROG: detail" on stderr, the detail escaped (names come from files). */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "PROG CMD: detail" and "Try 'PROG --help' for more information." on
 * stderr; returns CLI_EXIT_USAGE. */
int cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The usage error for what getopt_long (opterr = 0, optstring starting
 * with ':') returned as c ('?' or ':'). */
int cli_bad_option(int c, int argc, char **argv);

/* Option values: 0, or the usage error (CLI_EXIT_USAGE).  `opt` is the
 * option as typed ("--host-cache").  Sizes take K, M, G, T suffixes. */
int cli_opt_size(const char *opt, const char *arg, uint64_t min, uint64_t *out);
int cli_opt_uint(const char *opt, const char *arg, unsigned long long min,
		 unsigned long long max, unsigned long long *out);
int cli_opt_unsigned(const char *opt, const char *arg, unsigned min, unsigned max,
		     unsigned *out);

/*
 * A command's options as a table: cli_parse builds getopt_long's options
 * from it, stores each value where `dest` points, checked as its type
 * says, and reports every mistake as a usage error in the same words
 * ("--threads: invalid number 'x' (an integer from 0 to 1024)").  -h and
 * --help are always accepted.  The first mistake ends the parse.
 */
enum cli_type {
	CLI_TRUE,      /* no value: *(bool *)dest = true */
	CLI_BITS,      /* no value: *(unsigned *)dest |= bits */
	CLI_STRING,    /* *(const char **)dest = the value */
	CLI_UINT,      /* *(unsigned *)dest: an integer in [min, max] */
	CLI_ULL,       /* *(unsigned long long *)dest: an integer in [min, max] */
	CLI_SIZE,      /* *(uint64_t *)dest: a size (K, M, G, T suffixes) of at least min */
	CLI_CHOICE,    /* *(int *)dest = values[i] for the value names[i] (any case) */
	CLI_CALL,      /* call(option, value, dest): 0 or the usage error it printed */
};
struct cli_opt {
	const char *name;             /* the long name: "host-cache" */
	char letter;                  /* a short name, or 0 */
	enum cli_type type;
	void *dest;
	unsigned long long min, max;  /* CLI_UINT, CLI_ULL: the range; CLI_SIZE: min */
	unsigned bits;                /* CLI_BITS */
	bool nonzero;                 /* CLI_UINT, CLI_ULL, CLI_SIZE: 0 is refused */
	const char *const *names;     /* CLI_CHOICE: NULL-terminated */
	const int *values;
	int (*call)(const char *opt, const char *arg, void *dest);
	bool *given;                  /* set true when the option appears (may be NULL) */
};
/* A table entry: CLI_OPT("threads", 0, CLI_UINT, &threads, .max = 1024) */
#define CLI_OPT(name_, letter_, type_, ...) \
	{ .name = (name_), .letter = (letter_), .type = (type_), .dest = __VA_ARGS__ }
#define CLI_HELP (-1)
/* Parse the options of argv (argv[0] is the command), permuting operands
 * to the end: 0 with the operands from optind on, CLI_HELP for -h or
 * --help (after help(stdout)), or CLI_EXIT_USAGE. */
int cli_parse(int argc, char **argv, const struct cli_opt *opts, size_t n_opts,
	      void (*help)(FILE *out));

/* fopen(path, "r") of a regular file, opened without blocking so that a
 * FIFO in its place never hangs; prints "PROG: PATH: why" and returns
 * NULL on failure. */
FILE *cli_fopen_regular(const char *path);
/* The names of a list file (layer names, one per line; '#' starts a
 * comment; blank lines are skipped): *names (n strings, then NULL: free
 * with cli_free_names) and *lines (each name's line number).  At least one
 * name.  0, or CLI_EXIT_FAIL with the message printed. */
int cli_read_names(const char *path, char ***names, unsigned **lines, size_t *n);
void cli_free_names(char **names, unsigned *lines);

/* A progress line on stderr when it is a terminal: "LABEL  42%  1.2 GiB /
 * 3.0 GiB", redrawn when the percentage changes.  Safe from several
 * threads (the library reports from its workers). */
struct cli_progress {
	const char *label;
	pthread_mutex_t lock;
	int on, last, shown;
};
/* Returns the callback to hand the library (NULL when stderr is not a
 * terminal); ctx = p. */
wsp_progress_fn cli_progress_begin(struct cli_progress *p, const char *label);
void cli_progress_update(struct cli_progress *p, uint64_t done, uint64_t total);
/* "PROG: note: message" on a line of its own, also while the line shows. */
void cli_progress_note(struct cli_progress *p, const char *message);
void cli_progress_end(struct cli_progress *p);

#endif
