/* The tools' shared command line (see cli.h). */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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
