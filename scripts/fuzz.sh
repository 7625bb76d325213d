#!/bin/sh
# Build the libFuzzer targets with clang (ASan + UBSan, CUDA off) in their own
# build directory and run each for a fixed number of executions, starting
# from a scratch copy of its saved corpus so that the inputs the fuzzer adds
# do not land in the repository.  On a crash, leak or timeout the input that
# caused it is copied into the saved corpus (where the corpus replay tests of
# `make check` will fail on it until the bug is fixed) and the script exits 1.
#
#   scripts/fuzz.sh [TARGET...]      TARGET: safetensors manifest chunk
#
# Environment:
#   WSP_FUZZ_RUNS       executions per target (default 200000)
#   WSP_FUZZ_BUILD_DIR  build directory (default ./build-fuzz)
#   WSP_FUZZ_MAX_LEN    largest input tried (default 65536; without it libFuzzer
#                       takes the largest seed, 270 KB, and runs ~100x slower)
#   WSP_FUZZ_ARGS       extra libFuzzer flags, e.g. "-max_total_time=600"
#
# Exit: 0 no finding, 1 a finding (input saved), 2 bad arguments or build failure.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
build=${WSP_FUZZ_BUILD_DIR:-$top/build-fuzz}
runs=${WSP_FUZZ_RUNS:-200000}
max_len=${WSP_FUZZ_MAX_LEN:-65536}
targets=${*:-safetensors manifest chunk}

for n in "$runs" "$max_len"; do
	case $n in
	'' | *[!0-9]*) echo "fuzz.sh: WSP_FUZZ_RUNS and WSP_FUZZ_MAX_LEN must be numbers, not '$n'" >&2; exit 2 ;;
	esac
done
command -v clang >/dev/null || { echo "fuzz.sh: clang is needed for libFuzzer" >&2; exit 2; }

# target name -> binary (relative to the build), saved corpus, dictionary
bin_of() {
	case $1 in
	safetensors) echo tests/fuzz/fuzz_safetensors ;;
	manifest) echo tests/fuzz/fuzz_manifest ;;
	chunk) echo tests/codec/fuzz_chunk ;;
	*) return 1 ;;
	esac
}
corpus_of() {
	case $1 in
	chunk) echo "$top/tests/codec/corpus" ;;
	*) echo "$top/tests/fuzz/corpus/$1" ;;
	esac
}
dict_of() {
	[ "$1" = safetensors ] && echo "-dict=$top/tests/fuzz/safetensors.dict"
	return 0
}

bins=
for t in $targets; do
	b=$(bin_of "$t") || { echo "fuzz.sh: unknown target '$t' (safetensors, manifest, chunk)" >&2; exit 2; }
	bins="$bins $b"
done

# The library is built with -fsanitize=fuzzer-no-link so that the fuzzer
# sees coverage inside it; the targets add -fsanitize=fuzzer themselves.
# A static library keeps the sanitizer runtimes out of a shared object.
# UBSan findings must abort, or libFuzzer would not notice them.
[ -x "$top/configure" ] || (cd "$top" && ./autogen.sh >/dev/null)
mkdir -p "$build"
if [ ! -f "$build/Makefile" ]; then
	echo "== configure $build"
	(cd "$build" && CC=clang "$top/configure" -q --enable-fuzzers --without-cuda --disable-shared \
		CFLAGS='-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined' \
		LDFLAGS='-fsanitize=address,undefined') >"$build/fuzz-configure.log" 2>&1 ||
		{ tail -n 20 "$build/fuzz-configure.log"; echo "fuzz.sh: configure failed" >&2; exit 2; }
fi
echo "== build$bins"
# shellcheck disable=SC2086  # one word per target
make -C "$build" -j"$(nproc)" $bins >"$build/fuzz-build.log" 2>&1 ||
	{ tail -n 30 "$build/fuzz-build.log"; echo "fuzz.sh: build failed (log: $build/fuzz-build.log)" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/wsp-fuzz-XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
status=0
summary=
for t in $targets; do
	b=$build/$(bin_of "$t")
	saved=$(corpus_of "$t")
	mkdir -p "$work/$t/corpus" "$work/$t/artifacts"
	cp "$saved"/* "$work/$t/corpus/" 2>/dev/null
	seeds=$(find "$work/$t/corpus" -type f | wc -l)
	echo "== fuzz_$t: $runs executions from $seeds saved inputs ($saved)"
	start=$(date +%s)
	# shellcheck disable=SC2046,SC2086  # the dictionary flag and extra args split into words
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
	"$b" -runs="$runs" -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$work/$t/artifacts/" \
		$(dict_of "$t") ${WSP_FUZZ_ARGS:-} "$work/$t/corpus" >"$work/$t/log" 2>&1
	rc=$?
	secs=$(($(date +%s) - start))
	cp "$work/$t/log" "$build/fuzz-$t.log"
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t/log" | tail -n 1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/$t/log" | tail -n 1)
	cov=$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*/[0-9a-zA-Z]*' "$work/$t/log" | tail -n 1)
	found=
	for a in "$work/$t/artifacts"/crash-* "$work/$t/artifacts"/leak-* "$work/$t/artifacts"/timeout-* \
		"$work/$t/artifacts"/oom-* "$work/$t/artifacts"/slow-unit-*; do
		[ -f "$a" ] && found="$found ${a##*/}"
	done
	# libFuzzer reports 0/s for runs shorter than a second
	[ "${rate:-0}" -gt 0 ] 2>/dev/null || rate="over ${execs:-?}"
	line="fuzz_$t: ${execs:-?} executions in ${secs}s (${rate}/s), ${cov:-cov: ?}, exit $rc"
	if [ -n "$found" ] || [ $rc -ne 0 ]; then
		status=1
		line="$line: FINDING"
		for a in $found; do
			cp "$work/$t/artifacts/$a" "$saved/$a"
			echo "fuzz_$t: input saved as $saved/$a"
			echo "  reproduce: $b $saved/$a"
		done
		[ -n "$found" ] || echo "fuzz_$t: exited $rc without an input file; see $build/fuzz-$t.log"
		grep -E '^(==[0-9]+==ERROR|SUMMARY|.*runtime error)' "$work/$t/log" | head -n 5
	fi
	summary="$summary$line
"
done
echo "== summary (logs: $build/fuzz-*.log)"
printf '%s' "$summary"
[ $status -eq 0 ] || echo "fuzz.sh: a fuzzer found a failing input; it is now in the saved corpus" >&2
exit $status
