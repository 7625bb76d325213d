/*
 * wspager(1): run, benchmark, simulate, verify and describe packs with the
 * wspager library.  Each subcommand lives in its own wspager-*.c file; this
 * one dispatches and holds the help text.
 */
#include "config.h"

#include <string.h>

#include "wspager-tool.h"

void wt_help(FILE *f)
{
	fputs("usage: wspager COMMAND [options]\n"
	      "\n"
	      "Commands:\n"
	      "  run PACK        stream the pack through the pager, run a GEMM workload, report\n"
	      "      --passes P        passes over the model (default 3)\n"
	      "      --order FILE      layer names in execution order, one per line\n"
	      "      --batch B         activation rows per GEMM (default 16)\n"
	      "      --host-cache SIZE pinned host tier budget (K, M, G, T suffixes)\n"
	      "      --gpu-slots N     GPU slots of the largest layer (default 3)\n"
	      "      --device N|host   CUDA device, or the host backend (default 0)\n"
	      "      --devices LIST    several (0,1): consecutive layers on each, one pager\n"
	      "      --io auto|uring|pread|mmap   I/O backend (default auto)\n"
	      "      --policy lru|predict         eviction policy (default predict)\n"
	      "      --lookahead K     layers to prefetch ahead (default: as the tiers hold)\n"
	      "      --threads N       decode threads (default: one per core)\n"
	      "      --no-prefetch     load only what is acquired\n"
	      "      --json            print one JSON object instead of the table\n"
	      "      --trace-json FILE write a Chrome/Perfetto trace of the run\n"
	      "      --force           replace an existing trace file\n"
	      "  bench PACK      measure the machine's ceilings, naive loaders and the pager\n"
	      "      --device N|host, --host-cache SIZE, --json\n"
	      "  simulate        replay an access trace against LRU, PREDICT and BELADY\n"
	      "      --trace FILE --host-cache SIZE [--pack PACK | --layer-size SIZE]\n"
	      "      [--gpu-slots N] [--json]\n"
	      "  verify PACK     decode and check every chunk (and, on a GPU, every tensor)\n"
	      "      --device N|host, --threads N\n"
	      "  info PACK       describe a pack  [--layers] [--json]\n"
	      "\n"
	      "  --help, --version\n"
	      "\n"
	      "Exit status: 0 success, 1 runtime error (bad pack, I/O, CUDA, checksum),\n"
	      "2 bad command line.  See wspager(1).\n",
	      f);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(int, char **);
	} cmds[] = {
		{"run", wt_cmd_run}, {"bench", wt_cmd_bench}, {"simulate", wt_cmd_simulate},
		{"verify", wt_cmd_verify}, {"info", wt_cmd_info},
	};
	cli_name("wspager", NULL);
	if (argc < 2)
		return cli_usage("missing command");
	const char *cmd = argv[1];
	if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
		wt_help(stdout);
		return fflush(stdout) == EOF ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	}
	if (!strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
		printf("wspager %s (library %s)\n", PACKAGE_VERSION, wsp_version_string());
		return fflush(stdout) == EOF ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (!strcmp(cmd, cmds[i].name)) {
			cli_name("wspager", cmds[i].name);
			return cmds[i].fn(argc - 1, argv + 1);
		}
	if (cmd[0] == '-')
		return cli_usage("unknown option '%s'", cmd);
	return cli_usage("unknown command '%s'", cmd);
}
