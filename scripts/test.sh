#!/bin/sh
# The whole test suite, from a fresh clone: install dependencies, build, run
# `make check`, then the same suite again under ASan+UBSan (host backend).
# CI calls this (.ci/run). Set WSP_SKIP_SANITIZERS=1 to run only the first.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/deps.sh"
jobs=$(nproc)

run_suite() {
	dir=$1; shift
	BUILD_DIR=$dir "$top/scripts/build.sh" "$@" >/dev/null
	status=0
	make -C "$dir" -j"$jobs" check >"$dir/check.out" 2>&1 || status=$?
	grep -E '^(PASS|FAIL|SKIP|XFAIL|XPASS|ERROR):' "$dir/check.out" || true
	if [ $status -ne 0 ]; then
		for log in $(grep -lE '^:test-result: (FAIL|ERROR)' $(find "$dir" -name '*.trs') 2>/dev/null); do
			echo "---- ${log%.trs}.log"; tail -n 40 "${log%.trs}.log"
		done
		tail -n 20 "$dir/check.out"
		return $status
	fi
	sed -n '/^# TOTAL/,/^# ERROR/p' "$dir/check.out"
}

echo "== make check"
run_suite "$top/build-check"
outs="$top/build-check/check.out"
if [ -z "$WSP_SKIP_SANITIZERS" ]; then
	echo "== make check under ASan+UBSan"
	ASAN_OPTIONS=detect_leaks=1 run_suite "$top/build-sanitize" --enable-sanitizers --without-cuda
	outs="$outs $top/build-sanitize/check.out"
fi
# One plain closing line over both suites.
count() { cat $outs | sed -n "s/^# $1: *//p" | awk '{s+=$1} END {print s+0}'; }
echo "check: $(count PASS) passed, $(( $(count FAIL) + $(count ERROR) + $(count XPASS) )) failed, $(count SKIP) skipped"
