/* The tools' shared command line (see cli.h). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

static const char *prog = "wspager";
static const char *subcmd;

void cli_name(const char *p, const char *cmd)
{
	prog = p;
	subcmd = cmd;
}

/* Messages quote names, paths and lines from input files: escaped, so
 * that an input can never write control sequences to the terminal. */
static void say(int with_cmd, const char *fmt, va_list ap)
{
	char raw[2048], safe[4 * sizeof(raw)];
	vsnprintf(raw, sizeof(raw), fmt, ap);
	fflush(stdout);
	fprintf(stderr, "%s%s%s: %s\n", prog, with_cmd && subcmd ? " " : "",
		with_cmd && subcmd ? subcmd : "", wsp_escape_text(raw, safe, sizeof(safe)));
}

void cli_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	say(0, fmt, ap);
	va_end(ap);
}

int cli_usage(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	say(1, fmt, ap);
	va_end(ap);
	fprintf(stderr, "Try '%s --help' for more information.\n", prog);
	return CLI_EXIT_USAGE;
}

int cli_bad_option(int c, int argc, char **argv)
{
	const char *arg = optind > 0 && optind - 1 < argc ? argv[optind - 1] : "?";
	if (c == ':')
		return cli_usage("option '%s' needs a value", arg);
	if (optopt && !(arg[0] == '-' && arg[1] == '-'))
		return cli_usage("unknown option '-%c'", optopt);
	return cli_usage("unknown option '%s'", arg);
}

int cli_opt_size(const char *opt, const char *arg, uint64_t min, uint64_t *out)
{
	int rc = wsp_parse_size(arg, out);
	char a[32];
	if (rc == -ERANGE)
		return cli_usage("%s: size too large: '%s'", opt, arg);
	if (rc < 0)
		return cli_usage("%s: invalid size '%s' (a number with an optional K, M, G or T "
				 "suffix)", opt, arg);
	if (*out < min)
		return cli_usage("%s: size '%s' below the least allowed, %s", opt, arg,
				 wsp_format_size(min, a, sizeof(a)));
	return 0;
}

int cli_opt_uint(const char *opt, const char *arg, unsigned long long min,
		 unsigned long long max, unsigned long long *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(arg, &end, 10);
	if (!*arg || *end || errno || arg[0] == '-' || arg[0] == '+' || v < min || v > max)
		return cli_usage("%s: invalid number '%s' (an integer from %llu to %llu)", opt, arg,
				 min, max);
	*out = v;
	return 0;
}

int cli_opt_unsigned(const char *opt, const char *arg, unsigned min, unsigned max,
		     unsigned *out)
{
	unsigned long long v;
	int rc = cli_opt_uint(opt, arg, min, max, &v);
	if (rc == 0)
		*out = (unsigned)v;
	return rc;
}

#define CLI_MAX_OPTS 48

/* One option's value, stored as its table entry says. */
static int store(const struct cli_opt *o, const char *opt, const char *arg)
{
	unsigned long long v;
	uint64_t size;
	int rc = 0;
	switch (o->type) {
	case CLI_TRUE: *(bool *)o->dest = true; break;
	case CLI_BITS: *(unsigned *)o->dest |= o->bits; break;
	case CLI_STRING: *(const char **)o->dest = arg; break;
	case CLI_UINT:
	case CLI_ULL:
		if ((rc = cli_opt_uint(opt, arg, o->min, o->max, &v)))
			return rc;
		if (o->nonzero && !v)
			return cli_usage("%s: must be more than 0", opt);
		if (o->type == CLI_UINT)
			*(unsigned *)o->dest = (unsigned)v;
		else
			*(unsigned long long *)o->dest = v;
		break;
	case CLI_SIZE:
		if ((rc = cli_opt_size(opt, arg, o->min, &size)))
			return rc;
		if (o->nonzero && !size)
			return cli_usage("%s: must be more than 0", opt);
		*(uint64_t *)o->dest = size;
		break;
	case CLI_CHOICE: {
		char list[256] = "";
		size_t k = 0;
		for (; o->names[k]; k++)
			if (strcasecmp(arg, o->names[k]) == 0) {
				*(int *)o->dest = o->values[k];
				return 0;
			}
		for (size_t i = 0; i < k; i++)   /* "a, b or c" */
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
				 i == 0 ? "" : i + 1 == k ? " or " : ", ", o->names[i]);
		return cli_usage("%s: must be %s, not '%s'", opt, list, arg);
	}
	case CLI_CALL: return o->call(opt, arg, o->dest);
	}
	return 0;
}

int cli_parse(int argc, char **argv, const struct cli_opt *opts, size_t n_opts,
	      void (*help)(FILE *out))
{
	struct option lo[CLI_MAX_OPTS + 2];
	char shorts[2 * CLI_MAX_OPTS + 4] = ":h", *sp = shorts + 2;
	if (n_opts > CLI_MAX_OPTS)
		return cli_usage("internal error: %zu options, at most %u", n_opts, CLI_MAX_OPTS);
	for (size_t i = 0; i < n_opts; i++) {
		int takes = opts[i].type != CLI_TRUE && opts[i].type != CLI_BITS;
		lo[i] = (struct option){ opts[i].name, takes ? required_argument : no_argument, NULL,
					 256 + (int)i };
		if (opts[i].letter) {
			*sp++ = opts[i].letter;
			if (takes)
				*sp++ = ':';
		}
	}
	*sp = '\0';
	lo[n_opts] = (struct option){ "help", no_argument, NULL, 'h' };
	lo[n_opts + 1] = (struct option){ 0 };
	opterr = 0;
	optind = 1;
	int c;
	while ((c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
		if (c == 'h') {
			help(stdout);
			return CLI_HELP;
		}
		size_t i = n_opts;
		if (c >= 256)
			i = (size_t)(c - 256);
		else
			for (i = 0; i < n_opts && opts[i].letter != c; i++)
				;
		if (c == '?' || c == ':' || i >= n_opts)
			return cli_bad_option(c, argc, argv);
		char opt[64];
		snprintf(opt, sizeof(opt), "--%s", opts[i].name);
		if (opts[i].given)
			*opts[i].given = true;
		int rc = store(&opts[i], opt, optarg);
		if (rc)
			return rc;
	}
	return 0;
}

FILE *cli_fopen_regular(const char *path)
{
	struct stat st;
	FILE *f;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0) {
		cli_error("%s: %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		cli_error("%s: not a regular file", path);
		close(fd);
		return NULL;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	f = fdopen(fd, "r");
	if (!f) {
		cli_error("%s: %s", path, strerror(errno));
		close(fd);
	}
	return f;
}

void cli_free_names(char **names, unsigned *lines)
{
	for (size_t i = 0; names && names[i]; i++)
		free(names[i]);
	free(names);
	free(lines);
}

int cli_read_names(const char *path, char ***names_out, unsigned **lines_out, size_t *n_out)
{
	FILE *f = cli_fopen_regular(path);
	if (!f)
		return CLI_EXIT_FAIL;
	char *line = NULL, **names = NULL;
	unsigned *lines = NULL, lineno = 0;
	size_t cap = 0, n = 0, alloc = 0;
	int rc = 0;
	while (getline(&line, &cap, f) >= 0) {
		lineno++;
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char *s = line, *e;
		while (*s == ' ' || *s == '\t')
			s++;
		e = s + strlen(s);
		while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t'))
			*--e = '\0';
		if (!*s)
			continue;
		if (n + 1 >= alloc) {   /* room for the NULL after the last */
			size_t na = alloc ? alloc * 2 : 64;
			char **nn = realloc(names, na * sizeof(*nn));
			unsigned *nl = nn ? realloc(lines, na * sizeof(*nl)) : NULL;
			if (nn)
				names = nn;
			if (!nn || !nl) {
				rc = CLI_EXIT_FAIL;
				break;
			}
			lines = nl;
			alloc = na;
		}
		if (!(names[n] = strdup(s))) {
			rc = CLI_EXIT_FAIL;
			break;
		}
		lines[n++] = lineno;
		names[n] = NULL;
	}
	if (rc)
		cli_error("out of memory reading %s", path);
	else if (ferror(f))
		cli_error("%s: read error", path), rc = CLI_EXIT_FAIL;
	else if (n == 0)
		cli_error("%s: no layer names in the file", path), rc = CLI_EXIT_FAIL;
	free(line);
	fclose(f);
	if (rc) {
		if (names)
			names[n] = NULL;
		cli_free_names(names, lines);
		return rc;
	}
	*names_out = names;
	*lines_out = lines;
	*n_out = n;
	return 0;
}

static int progress_cb(void *ctx, uint64_t done, uint64_t total)
{
	cli_progress_update(ctx, done, total);
	return 0;
}

wsp_progress_fn cli_progress_begin(struct cli_progress *p, const char *label)
{
	p->label = label;
	p->on = isatty(STDERR_FILENO);
	p->last = -1;
	p->shown = 0;
	pthread_mutex_init(&p->lock, NULL);
	return p->on ? progress_cb : NULL;
}

void cli_progress_update(struct cli_progress *p, uint64_t done, uint64_t total)
{
	if (!p->on || !p->label)
		return;
	int pct = total ? (int)(done >= total ? 100 : done * 100 / total) : 100;
	pthread_mutex_lock(&p->lock);
	if (pct != p->last) {
		char a[32], b[32];
		p->last = pct;
		p->shown = 1;
		fprintf(stderr, "\r%s %3d%%  %s / %s   ", p->label, pct,
			wsp_format_size(done, a, sizeof(a)), wsp_format_size(total, b, sizeof(b)));
		fflush(stderr);
	}
	pthread_mutex_unlock(&p->lock);
}

void cli_progress_note(struct cli_progress *p, const char *message)
{
	pthread_mutex_lock(&p->lock);
	if (p->shown) {
		fputc('\n', stderr);
		p->shown = 0;
		p->last = -1;   /* redraw the progress line on the next report */
	}
	fprintf(stderr, "%s: note: %s\n", prog, message);
	pthread_mutex_unlock(&p->lock);
}

void cli_progress_end(struct cli_progress *p)
{
	if (!p->label)
		return;   /* ended already (error paths end it early) */
	if (p->shown)
		fputc('\n', stderr);
	p->shown = 0;
	p->label = NULL;
	pthread_mutex_destroy(&p->lock);
}
