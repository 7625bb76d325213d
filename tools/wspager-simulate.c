/*
 * wspager simulate: replay an access trace against the pager's eviction
 * policies (LRU, PREDICT) and Belady's offline optimum, without disk or GPU.
 *
 * Trace: one access per line, "NAME" or "NAME SIZE"; '#' starts a comment.
 * With --pack, names are the pack's layers and sizes come from it; without,
 * each distinct name is a layer whose size is its SIZE column or --layer-size.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>

#include "wspager-tool.h"

struct sim_cfg {
	const char *trace, *pack;
	uint64_t host_cache, layer_size;
	bool host_cache_set, layer_size_set, json;
	unsigned gpu_slots;
};

struct sim_trace {
	uint32_t *acc;         /* layer index per access */
	size_t n;
	uint64_t *bytes;       /* per layer */
	char **names;          /* per layer (no pack) */
	uint32_t n_layers;
};

static void trace_free(struct sim_trace *t)
{
	for (uint32_t i = 0; t->names && i < t->n_layers; i++)
		free(t->names[i]);
	free(t->names);
	free(t->bytes);
	free(t->acc);
}

/* Split a line into name and optional size column; returns 0 on blank. */
static int split(char *line, char **name, char **size)
{
	char *hash = strchr(line, '#');
	if (hash)
		*hash = '\0';
	char *save = NULL;
	*name = strtok_r(line, " \t\r\n", &save);
	*size = *name ? strtok_r(NULL, " \t\r\n", &save) : NULL;
	if (*size && strtok_r(NULL, " \t\r\n", &save))
		return -1;
	return *name ? 1 : 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
	if (need <= *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 1024;
	while (nc < need)
		nc *= 2;
	void *n = realloc(*p, nc * elem);
	if (!n)
		return -1;
	*p = n;
	*cap = nc;
	return 0;
}

static int read_trace(const struct sim_cfg *c, const wsp_pack *pk, struct sim_trace *t)
{
	FILE *f = cli_fopen_regular(c->trace);
	if (!f)
		return CLI_EXIT_FAIL;
	/* Names to layers without a pack: glibc's hash table, sized for the
	 * worst case of one new name per line (counted first). */
	size_t lines = 0, cap_acc = 0, cap_l = 0, cap_names = 0;
	char *line = NULL;
	size_t lcap = 0;
	while (getline(&line, &lcap, f) >= 0)
		lines++;
	rewind(f);
	struct hsearch_data ht;
	memset(&ht, 0, sizeof(ht));
	bool ht_ok = pk || hcreate_r(lines * 2 + 16, &ht);
	int rc = ht_ok ? 0 : CLI_EXIT_FAIL;
	if (!ht_ok)
		cli_error("out of memory");
	unsigned lineno = 0;
	while (!rc && getline(&line, &lcap, f) >= 0) {
		char *name, *size;
		lineno++;
		int k = split(line, &name, &size);
		if (k < 0) {
			cli_error("%s:%u: expected 'NAME' or 'NAME SIZE'", c->trace, lineno);
			rc = CLI_EXIT_FAIL;
			break;
		}
		if (!k)
			continue;
		uint64_t sz = c->layer_size;
		if (size && wsp_parse_size(size, &sz) < 0) {
			cli_error("%s:%u: invalid size '%s'", c->trace, lineno, size);
			rc = CLI_EXIT_FAIL;
			break;
		}
		uint32_t idx;
		if (pk) {
			const struct wsp_layer *L = wsp_pack_find_layer(pk, name);
			if (!L) {
				cli_error("%s:%u: no layer named '%s' in %s", c->trace, lineno, name, c->pack);
				rc = CLI_EXIT_FAIL;
				break;
			}
			idx = L->index;
		} else {
			ENTRY e = {.key = name, .data = NULL}, *found = NULL;
			hsearch_r(e, FIND, &found, &ht);
			if (found) {
				idx = (uint32_t)(uintptr_t)found->data;
				if (size && sz != t->bytes[idx]) {
					cli_error("%s:%u: layer '%s' has size %" PRIu64 " here but %" PRIu64 " before",
						 c->trace, lineno, name, sz, t->bytes[idx]);
					rc = CLI_EXIT_FAIL;
					break;
				}
			} else {
				if (!size && !c->layer_size_set) {
					cli_error("%s:%u: no size for layer '%s' (give 'NAME SIZE', --layer-size or --pack)",
						 c->trace, lineno, name);
					rc = CLI_EXIT_FAIL;
					break;
				}
				if (t->n_layers == UINT32_MAX ||
				    grow((void **)&t->names, &cap_names, t->n_layers + 1, sizeof(*t->names)) ||
				    grow((void **)&t->bytes, &cap_l, t->n_layers + 1, sizeof(*t->bytes)) ||
				    !(t->names[t->n_layers] = strdup(name))) {
					cli_error("out of memory");
					rc = CLI_EXIT_FAIL;
					break;
				}
				idx = t->n_layers;
				t->bytes[idx] = sz;
				e.key = t->names[idx];
				e.data = (void *)(uintptr_t)idx;
				t->n_layers++;
				if (!hsearch_r(e, ENTER, &found, &ht)) {
					cli_error("out of memory");
					rc = CLI_EXIT_FAIL;
					break;
				}
			}
		}
		if (grow((void **)&t->acc, &cap_acc, t->n + 1, sizeof(*t->acc))) {
			cli_error("out of memory");
			rc = CLI_EXIT_FAIL;
			break;
		}
		t->acc[t->n++] = idx;
	}
	if (!rc && ferror(f)) {
		cli_error("%s: read error", c->trace);
		rc = CLI_EXIT_FAIL;
	}
	if (!rc && t->n == 0) {
		cli_error("%s: the trace has no accesses", c->trace);
		rc = CLI_EXIT_FAIL;
	}
	if (!pk && ht_ok)
		hdestroy_r(&ht);
	free(line);
	fclose(f);
	if (!rc && pk) {
		struct wsp_pack_summary s;
		wsp_pack_summary(pk, &s);
		t->n_layers = s.n_layers;
		t->bytes = calloc(s.n_layers ? s.n_layers : 1, sizeof(*t->bytes));
		if (!t->bytes) {
			cli_error("out of memory");
			return CLI_EXIT_FAIL;
		}
		for (uint32_t i = 0; i < s.n_layers; i++)
			t->bytes[i] = wsp_pack_layer(pk, i)->raw_bytes;
	}
	return rc;
}

static const char *const pol_names[3] = {"LRU", "PREDICT", "BELADY"};
static const char *const pol_keys[3] = {"lru", "predict", "belady"};
static const enum wsp_sim_policy pols[3] = {WSP_SIM_LRU, WSP_SIM_PREDICT, WSP_SIM_BELADY};

static int simulate3(const struct sim_trace *t, const uint64_t *bytes, uint64_t cache, struct wsp_sim_result r[3])
{
	for (int k = 0; k < 3; k++) {
		int rc = wsp_simulate(bytes, t->n_layers, t->acc, t->n, cache, pols[k], &r[k]);
		if (rc < 0) {
			cli_error("simulate %s: %s", pol_names[k], wsp_strerror(rc));
			return CLI_EXIT_FAIL;
		}
	}
	return 0;
}

/* Hits as a percentage of the optimum's hits (100 when both are 0). */
static double vs_belady(const struct wsp_sim_result *r, const struct wsp_sim_result *b)
{
	return b->hits ? 100.0 * (double)r->hits / (double)b->hits : 100.0;
}

static void print_tier(const char *title, const struct wsp_sim_result r[3], bool show_bytes)
{
	printf("%s\n", title);
	printf("  %-8s %12s %12s %9s %14s %12s\n", "policy", "hits", "misses", "hit rate", show_bytes ? "bytes read" : "loads",
	       "% of BELADY");
	for (int k = 0; k < 3; k++) {
		char b[32];
		printf("  %-8s %12" PRIu64 " %12" PRIu64 " %8.1f%% %14s %11.1f%%\n", pol_names[k], r[k].hits, r[k].misses,
		       r[k].accesses ? 100.0 * (double)r[k].hits / (double)r[k].accesses : 0.0,
		       show_bytes ? wt_size(r[k].bytes_read, b, sizeof(b)) : (snprintf(b, sizeof(b), "%" PRIu64, r[k].misses), b),
		       vs_belady(&r[k], &r[2]));
	}
}

static json_t *tier_json(const struct wsp_sim_result r[3], uint64_t cache, const char *unit)
{
	json_t *o = json_pack("{s:I,s:s}", "capacity", (json_int_t)cache, "capacity_unit", unit);
	for (int k = 0; o && k < 3; k++)
		json_object_set_new(o, pol_keys[k],
				    json_pack("{s:I,s:I,s:I,s:f,s:I,s:f}", "accesses", (json_int_t)r[k].accesses,
					      "hits", (json_int_t)r[k].hits, "misses", (json_int_t)r[k].misses,
					      "hit_rate", r[k].accesses ? (double)r[k].hits / (double)r[k].accesses : 0.0,
					      "bytes_read", (json_int_t)r[k].bytes_read, "percent_of_belady",
					      vs_belady(&r[k], &r[2])));
	return o;
}

static int parse(int argc, char **argv, struct sim_cfg *c)
{
	memset(c, 0, sizeof(*c));
	const struct cli_opt opts[] = {
		CLI_OPT("trace", 0, CLI_STRING, &c->trace),
		CLI_OPT("host-cache", 0, CLI_SIZE, &c->host_cache, .given = &c->host_cache_set),
		CLI_OPT("pack", 0, CLI_STRING, &c->pack),
		CLI_OPT("layer-size", 0, CLI_SIZE, &c->layer_size, .nonzero = true,
			.given = &c->layer_size_set),
		CLI_OPT("gpu-slots", 0, CLI_UINT, &c->gpu_slots, .min = 1, .max = 1u << 20),
		CLI_OPT("json", 0, CLI_TRUE, &c->json),
	};
	int rc = cli_parse(argc, argv, opts, sizeof(opts) / sizeof(opts[0]), wt_help);
	if (rc == CLI_HELP)
		return -1;
	if (rc)
		return rc;
	if (optind < argc)
		return cli_usage("unexpected argument '%s'", argv[optind]);
	if (!c->trace)
		return cli_usage("--trace FILE is required");
	if (!c->host_cache_set)
		return cli_usage("--host-cache SIZE is required");
	if (c->pack && c->layer_size_set)
		return cli_usage("give --pack or --layer-size, not both");
	return 0;
}

int wt_cmd_simulate(int argc, char **argv)
{
	struct sim_cfg c;
	int rc = parse(argc, argv, &c);
	if (rc)
		return rc < 0 ? CLI_EXIT_OK : rc;
	wsp_pack *pk = NULL;
	if (c.pack && (rc = wt_pack_open(c.pack, &pk)))
		return rc;
	struct sim_trace t;
	memset(&t, 0, sizeof(t));
	struct wsp_sim_result host[3], gpu[3];
	uint64_t *ones = NULL;
	rc = read_trace(&c, pk, &t);
	if (!rc)
		rc = simulate3(&t, t.bytes, c.host_cache, host);
	if (!rc && c.gpu_slots) {
		/* Every slot holds any one layer: a cache of N equal entries. */
		ones = malloc((t.n_layers ? t.n_layers : 1) * sizeof(*ones));
		if (!ones) {
			cli_error("out of memory");
			rc = CLI_EXIT_FAIL;
		} else {
			for (uint32_t i = 0; i < t.n_layers; i++)
				ones[i] = 1;
			rc = simulate3(&t, ones, c.gpu_slots, gpu);
		}
	}
	if (!rc && c.json) {
		json_t *root = json_pack("{s:s,s:I,s:i,s:o}", "trace", c.trace, "accesses", (json_int_t)t.n, "layers",
					 (int)t.n_layers, "host", tier_json(host, c.host_cache, "bytes"));
		if (root && c.gpu_slots)
			json_object_set_new(root, "gpu", tier_json(gpu, c.gpu_slots, "slots"));
		if (!root) {
			cli_error("out of memory building JSON");
			rc = CLI_EXIT_FAIL;
		} else {
			rc = wt_json_print(root);
			json_decref(root);
		}
	} else if (!rc) {
		char a[32], b[32];
		uint64_t distinct = 0;
		for (uint32_t i = 0; i < t.n_layers; i++)
			distinct += t.bytes[i];
		printf("trace %s: %zu accesses over %" PRIu32 " layers (%s in all)\n", c.trace, t.n, t.n_layers,
		       wt_size(distinct, a, sizeof(a)));
		char title[128];
		snprintf(title, sizeof(title), "host tier, %s:", wt_size(c.host_cache, b, sizeof(b)));
		print_tier(title, host, true);
		if (c.gpu_slots) {
			snprintf(title, sizeof(title), "GPU tier, %u slots:", c.gpu_slots);
			print_tier(title, gpu, false);
		}
		rc = fflush(stdout) == EOF ? CLI_EXIT_FAIL : 0;
	}
	free(ones);
	trace_free(&t);
	wsp_pack_close(pk);
	return rc;
}
