#!/bin/bash
# The GPU test lane.  Two halves, because the GPU machine has the CUDA driver,
# toolkit and cuBLAS but no liburing, no autotools and no package registry:
#
#   scripts/gpu-lane.sh build   on the development machine: a --disable-shared
#                               build with liburing, zstd, jansson, xxHash and
#                               the CUDA runtime linked statically; copies the
#                               tools, GPU tests and benchmarks to .gpu-lane/
#   scripts/gpu-lane.sh run     on the GPU machine, from the repository root
#                               with .gpu-lane/ beside it: runs the GPU tests,
#                               the benchmarks and `wspager bench`, writes logs
#                               to $OUT (or .gpu-lane/out) and prints a table.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
lane=$top/.gpu-lane

build() {
	set -e
	"$top/scripts/deps.sh"
	local b=$top/build-gpu-lane
	[ -x "$top/configure" ] || (cd "$top" && ./autogen.sh >/dev/null)
	mkdir -p "$b"
	cd "$b"
	if [ ! -f Makefile ]; then
		"$top/configure" -q --disable-shared --enable-static-cudart \
			LIBURING_LIBS="-l:liburing.a" ZSTD_LIBS="-l:libzstd.a" \
			JANSSON_LIBS="-l:libjansson.a" XXHASH_LIBS="-l:libxxhash.a"
	fi
	make -j"$(nproc)" >/dev/null
	make -j"$(nproc)" check TESTS= >/dev/null     # build the test programs, run none
	make -j"$(nproc)" bench >/dev/null
	rm -rf "$lane"
	mkdir -p "$lane/tools" "$lane/tests" "$lane/bench"
	cp tools/wspack tools/wspager "$lane/tools/"
	for t in tests/gpu/* examples/stream; do
		[ -f "$t" ] && [ -x "$t" ] && cp "$t" "$lane/tests/"
	done
	for t in bench/*_bench tests/io/io_bench; do
		[ -f "$t" ] && [ -x "$t" ] && cp "$t" "$lane/bench/"
	done
	# Nothing may still need a shared library the GPU machine lacks.
	if ldd "$lane/tools/wspager" | grep -E 'liburing|libzstd|jansson|xxhash|cudart'; then
		echo "gpu-lane: a dependency is still linked dynamically" >&2
		exit 1
	fi
	du -sh "$lane"
}

# step NAME TIMEOUT CMD...: run CMD with its output in $out/NAME.log and one
# summary line: PASS (0), SKIP (77) or FAIL(rc), and its wall time.
step() {
	local name=$1 limit=$2 rc=0 r t0 t1
	shift 2
	t0=$(date +%s.%N)
	timeout "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
	t1=$(date +%s.%N)
	case $rc in 0) r=PASS ;; 77) r=SKIP ;; *) r="FAIL($rc)" ;; esac
	printf '%-28s %-9s %8.2f s\n' "$name" "$r" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" | tee -a "$summary"
}

run() {
	out=${OUT:-$lane/out}
	mkdir -p "$out"
	export PATH=$lane/tools:$PATH
	local work=${WSP_LANE_WORK:-/var/tmp/wsp-lane}
	rm -rf "$work"
	mkdir -p "$work"
	{
		nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
		echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpus: $(nproc)  kernel: $(uname -r)"
		grep -m1 'model name' /proc/cpuinfo
		df -h "$work" | tail -1
	} | tee "$out/machine.txt"
	summary=$out/summary.txt
	: >"$summary"
	# 1. Tests: the CUDA ones and the pager tests, then the CLI's GPU test.
	for t in "$lane"/tests/*; do
		local name=$(basename "$t")
		[ "$name" = stream ] && continue
		(cd "$work" && step "test-$name" 300 "$t")
	done
	(cd "$work" && step test-example-stream-gpu 300 "$lane/tests/stream" --gpu 0)
	step test-cli-gpu-run 300 env top_srcdir="$top" top_builddir="$lane" sh "$top/tests/cli/gpu-run.sh"
	# 2. A model larger than the host budget used below (~6.5 GB of bf16).
	step generate 300 wspack generate "$work/model" --layers "${WSP_LANE_LAYERS:-32}" --hidden 4096 \
		--intermediate 11008 --vocab 32000 --shard-size 2G --force
	step convert 300 wspack convert "$work/model" -o "$work/model.wsp" --force
	rm -rf "$work/model"
	step info 60 wspack info "$work/model.wsp"
	# 3. Benchmarks: each prints its ceilings and ratios.
	mkdir -p "$work/gpu"
	step bench-gpu 400 "$lane/bench/gpu_bench" --dir "$work/gpu"
	step bench-codec 300 "$lane/bench/codec_bench" --levels 1 --reps 3
	step bench-cache 400 "$lane/bench/cache_bench" --pack "$work/model.wsp" --rounds 3
	step bench-wspager 600 wspager bench "$work/model.wsp" --host-cache "${WSP_LANE_HOST_CACHE:-4G}"
	step run-trace 300 wspager run "$work/model.wsp" --host-cache "${WSP_LANE_HOST_CACHE:-4G}" \
		--passes 2 --trace-json "$out/trace.json"
	echo
	for f in bench-gpu bench-codec bench-cache bench-wspager run-trace; do
		[ -f "$out/$f.log" ] && { echo "== $f"; tail -n 22 "$out/$f.log"; }
	done
	echo "== summary"
	cat "$summary"
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
