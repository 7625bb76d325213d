/*
 * wspager(1) --trace-json: a timeline in Chrome's trace-event format, which
 * Perfetto and chrome://tracing open.  The pager's workers report their stage
 * events through wsp_options.trace from several threads at once, so events
 * are appended to one locked, growing array; the tool adds its own compute
 * events after each pass.
 *
 * Rows ("tid"): 1xx disk reads, 2xx decode (one per worker), 3xx H2D copies,
 * 4xx acquire waits, 500 compute; named by "thread_name" metadata events.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wspager-tool.h"

#define WT_STAGE_COMPUTE 100   /* ours, after the library's enum wsp_stage */

struct wt_ev {
	uint64_t begin_ns, end_ns, bytes;
	uint32_t layer;
	int stage, thread;
	unsigned pass;
};

struct wt_trace {
	pthread_mutex_t lock;
	struct wt_ev *ev;
	size_t n, cap;
	bool oom;                 /* an event was dropped: say so when writing */
	char *path, *tmp;
	FILE *f;                  /* the temporary file, until renamed */
};

/* 1 when (dev, ino) is the directory `fd` or one of its ancestors; takes fd. */
static int dir_within(int fd, dev_t dev, ino_t ino)
{
	struct stat st, up;

	for (int depth = 0; depth < 4096 && fstat(fd, &st) == 0; depth++) {
		if (st.st_dev == dev && st.st_ino == ino)
			break;
		int parent = openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (parent < 0 || fstat(parent, &up) < 0 ||
		    (up.st_dev == st.st_dev && up.st_ino == st.st_ino)) {
			if (parent >= 0)
				close(parent);
			close(fd);
			return 0;
		}
		close(fd);
		fd = parent;
	}
	close(fd);
	return 1;
}

/* The trace is written over PATH by a rename: never over something the run
 * reads (the pack, or any file inside it), a directory or a special file,
 * and over a file only with --force. */
static int check_output(const char *path, const char *pack, bool force)
{
	char *copy = strdup(path);
	struct stat st, pst;
	int fd;

	if (!copy) {
		cli_error("out of memory");
		return CLI_EXIT_FAIL;
	}
	fd = open(dirname(copy), O_PATH | O_DIRECTORY | O_CLOEXEC);
	free(copy);
	if (fd >= 0 && stat(pack, &pst) == 0 && dir_within(fd, pst.st_dev, pst.st_ino)) {
		cli_error("--trace-json %s: lies inside the pack %s; write the trace elsewhere", path,
			 pack);
		return CLI_EXIT_USAGE;
	}
	if (lstat(path, &st) < 0)
		return 0;
	if (!S_ISREG(st.st_mode)) {
		cli_error("--trace-json %s: exists and is not a regular file", path);
		return CLI_EXIT_USAGE;
	}
	if (!force) {
		cli_error("--trace-json %s: exists (use --force to replace it)", path);
		return CLI_EXIT_USAGE;
	}
	return 0;
}

int wt_trace_new(const char *path, const char *pack, bool force, struct wt_trace **out)
{
	int rc = check_output(path, pack, force);
	if (rc)
		return rc;
	struct wt_trace *t = calloc(1, sizeof(*t));
	if (!t || !(t->path = strdup(path)) || asprintf(&t->tmp, "%s.tmp%ld", path, (long)getpid()) < 0) {
		if (t)
			free(t->path);
		free(t);
		cli_error("out of memory");
		return CLI_EXIT_FAIL;
	}
	/* Create the file now, so that a bad path fails before the run, under
	 * a temporary name so that a failed run leaves no truncated JSON. */
	t->f = fopen(t->tmp, "w");
	if (!t->f) {
		cli_error("%s: %s", t->tmp, strerror(errno));
		free(t->tmp);
		free(t->path);
		free(t);
		return CLI_EXIT_FAIL;
	}
	pthread_mutex_init(&t->lock, NULL);
	*out = t;
	return 0;
}

void wt_trace_free(struct wt_trace *t)
{
	if (!t)
		return;
	if (t->f) {
		fclose(t->f);
		unlink(t->tmp);
	}
	pthread_mutex_destroy(&t->lock);
	free(t->ev);
	free(t->tmp);
	free(t->path);
	free(t);
}

static void push(struct wt_trace *t, const struct wt_ev *e)
{
	pthread_mutex_lock(&t->lock);
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 4096;
		struct wt_ev *n = realloc(t->ev, cap * sizeof(*n));
		if (!n) {
			t->oom = true;
			pthread_mutex_unlock(&t->lock);
			return;
		}
		t->ev = n;
		t->cap = cap;
	}
	t->ev[t->n++] = *e;
	pthread_mutex_unlock(&t->lock);
}

void wt_trace_cb(void *ctx, const struct wsp_trace_event *ev)
{
	struct wt_ev e = {
		.begin_ns = ev->begin_ns, .end_ns = ev->end_ns, .bytes = ev->bytes,
		.layer = ev->layer, .stage = (int)ev->stage, .thread = ev->thread,
	};
	push(ctx, &e);
}

void wt_trace_compute(struct wt_trace *t, const struct wt_pass_result *res, unsigned pass)
{
	for (size_t i = 0; i < res->steps; i++) {
		struct wt_ev e = {
			.begin_ns = res->times[i].begin_ns, .end_ns = res->times[i].end_ns,
			.layer = res->times[i].layer, .stage = WT_STAGE_COMPUTE, .pass = pass,
		};
		push(t, &e);
	}
}

static const char *stage_name(int stage)
{
	switch (stage) {
	case WSP_STAGE_READ: return "read";
	case WSP_STAGE_DECODE: return "decode";
	case WSP_STAGE_H2D: return "h2d";
	case WSP_STAGE_WAIT: return "wait";
	case WSP_STAGE_D2H: return "d2h";
	case WT_STAGE_COMPUTE: return "compute";
	default: return "other";
	}
}

static int stage_tid(int stage, int thread)
{
	int w = thread < 0 ? 0 : thread % 100;
	switch (stage) {
	case WSP_STAGE_READ: return 100 + w;
	case WSP_STAGE_DECODE: return 200 + w;
	case WSP_STAGE_H2D: return 300 + w;
	case WSP_STAGE_WAIT: return 400 + w;
	case WT_STAGE_COMPUTE: return 500;
	case WSP_STAGE_D2H: return 600;
	default: return 900;
	}
}

static const char *row_name(int tid, char *buf, size_t len)
{
	static const char *const rows[] = {"disk read", "decode", "H2D copy", "acquire wait", "compute",
					   "D2H gradients"};
	int k = tid / 100 - 1;
	if (k < 0 || k > 5) {
		snprintf(buf, len, "other");
		return buf;
	}
	if (k >= 4)
		snprintf(buf, len, "%s", rows[k]);
	else
		snprintf(buf, len, "%s %d", rows[k], tid % 100);
	return buf;
}

static int add(json_t *arr, json_t *obj)
{
	return obj ? json_array_append_new(arr, obj) : -1;
}

static json_t *build(struct wt_trace *t)
{
	json_t *root = json_object(), *evs = json_array();
	bool seen[1000] = {false};
	uint64_t t0 = UINT64_MAX;
	char name[64];
	int bad = !root || !evs;

	for (size_t i = 0; i < t->n; i++)
		if (t->ev[i].begin_ns < t0)
			t0 = t->ev[i].begin_ns;
	for (size_t i = 0; i < t->n && !bad; i++) {
		const struct wt_ev *e = &t->ev[i];
		int tid = stage_tid(e->stage, e->thread);
		uint64_t dur = e->end_ns > e->begin_ns ? e->end_ns - e->begin_ns : 0;
		seen[tid] = true;
		json_t *args = json_pack("{s:i}", "layer", (json_int_t)e->layer);
		if (args && e->bytes)
			json_object_set_new(args, "bytes", json_integer((json_int_t)e->bytes));
		if (args && e->stage == WT_STAGE_COMPUTE)
			json_object_set_new(args, "pass", json_integer(e->pass));
		/* Microseconds, as the format wants; fractions keep sub-us events. */
		bad |= add(evs, json_pack("{s:s,s:s,s:s,s:f,s:f,s:i,s:i,s:o}", "name", stage_name(e->stage), "cat",
					  stage_name(e->stage), "ph", "X", "ts", (double)(e->begin_ns - t0) / 1e3,
					  "dur", (double)dur / 1e3, "pid", 1, "tid", tid, "args", args));
	}
	bad |= add(evs, json_pack("{s:s,s:s,s:i,s:i,s:{s:s}}", "name", "process_name", "ph", "M", "pid", 1, "tid", 0,
				  "args", "name", "wspager"));
	for (int tid = 0; tid < 1000 && !bad; tid++) {
		if (!seen[tid])
			continue;
		bad |= add(evs, json_pack("{s:s,s:s,s:i,s:i,s:{s:s}}", "name", "thread_name", "ph", "M", "pid", 1,
					  "tid", tid, "args", "name", row_name(tid, name, sizeof(name))));
		bad |= add(evs, json_pack("{s:s,s:s,s:i,s:i,s:{s:i}}", "name", "thread_sort_index", "ph", "M", "pid",
					  1, "tid", tid, "args", "sort_index", tid));
	}
	if (bad || json_object_set_new(root, "traceEvents", evs)) {
		json_decref(root);
		if (bad)
			json_decref(evs);
		return NULL;
	}
	json_object_set_new(root, "displayTimeUnit", json_string("ms"));
	return root;
}

int wt_trace_write(struct wt_trace *t)
{
	pthread_mutex_lock(&t->lock);
	json_t *root = build(t);
	bool oom = t->oom;
	pthread_mutex_unlock(&t->lock);
	if (!root) {
		cli_error("%s: out of memory building the trace", t->path);
		return CLI_EXIT_FAIL;
	}
	if (oom)
		cli_error("%s: warning: some trace events were dropped (out of memory)", t->path);
	FILE *f = t->f;
	t->f = NULL;
	int bad = json_dumpf(root, f, JSON_COMPACT) < 0 || fputc('\n', f) == EOF;
	bad |= fflush(f) == EOF || fsync(fileno(f)) < 0;
	int e = errno;
	bad |= fclose(f) == EOF;
	json_decref(root);
	if (bad || rename(t->tmp, t->path) < 0) {
		cli_error("%s: %s", bad ? t->tmp : t->path, strerror(bad ? e : errno));
		unlink(t->tmp);
		return CLI_EXIT_FAIL;
	}
	return 0;
}
