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
	mkdir -p "$lane/bin" "$lane/tests" "$lane/bench"
	cp tools/wspack tools/wspager "$lane/bin/"
	for t in tests/gpu/* examples/*; do
		[ -f "$t" ] && [ -x "$t" ] && cp "$t" "$lane/tests/"
	done
	for t in bench/*; do
		[ -f "$t" ] && [ -x "$t" ] && cp "$t" "$lane/bench/"
	done
	# Nothing may still need a shared library the GPU machine lacks.
	if ldd "$lane/bin/wspager" | grep -E 'liburing|libzstd|jansson|xxhash'; then
		echo "gpu-lane: a dependency is still linked dynamically" >&2
		exit 1
	fi
	du -sh "$lane"
}

run() {
	local out=${OUT:-$lane/out}
	mkdir -p "$out"
	export PATH=$lane/bin:$PATH
	local work=${WSP_LANE_WORK:-/tmp/wsp-lane}
	rm -rf "$work"
	mkdir -p "$work"
	nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt"
	echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpus: $(nproc)  kernel: $(uname -r)" | tee -a "$out/gpu.txt"
	local summary=$out/summary.txt
	: >"$summary"
	# 1. GPU tests: 0 pass, 77 skip, anything else fails.
	for t in "$lane"/tests/*; do
		local name=$(basename "$t") rc=0
		(cd "$work" && timeout 300 "$t") >"$out/test-$name.log" 2>&1 || rc=$?
		case $rc in 0) r=PASS ;; 77) r=SKIP ;; *) r="FAIL($rc)" ;; esac
		echo "test  $name  $r" | tee -a "$summary"
	done
	# 2. Benchmarks of the areas.
	for b in "$lane"/bench/*; do
		local name=$(basename "$b")
		(cd "$work" && timeout 400 "$b") >"$out/bench-$name.log" 2>&1
		echo "bench $name  rc=$?" | tee -a "$summary"
	done
	# 3. The CLI bench on a generated model, cold and warm.
	if [ -z "${WSP_LANE_SKIP_CLI:-}" ]; then
		wspack generate "$work/model" --layers "${WSP_LANE_LAYERS:-32}" --hidden 4096 \
			--intermediate 11008 --vocab 32000 --shard-size 2G --force >"$out/generate.log" 2>&1 &&
		wspack convert "$work/model" -o "$work/model.wsp" --force >"$out/convert.log" 2>&1 &&
		rm -rf "$work/model" &&
		wspack info "$work/model.wsp" >"$out/info.log" 2>&1 &&
		wspager bench "$work/model.wsp" --host-cache "${WSP_LANE_HOST_CACHE:-4G}" >"$out/cli-bench.log" 2>&1
		echo "cli   wspager bench  rc=$?" | tee -a "$summary"
	fi
	echo
	for f in "$out"/bench-*.log "$out"/cli-bench.log; do
		[ -f "$f" ] && { echo "== $(basename "$f")"; tail -n 25 "$f"; }
	done
	echo "== summary"
	cat "$summary"
}

case "${1:-}" in
build) build ;;
run) run ;;
*) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
