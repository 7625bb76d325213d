#!/bin/sh
# The whole test suite, from a fresh clone: install dependencies, build, run
# `make check`, then the same suite again under ASan+UBSan (host backend),
# then the multi-threaded tests under ThreadSanitizer.
# CI calls this (.ci/run). Set WSP_SKIP_SANITIZERS=1 to run only the first.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/deps.sh"
jobs=$(nproc)

# The tests that run several threads through the library (TSan's lane).
THREADED_TESTS="tests/gpu/test_threads tests/gpu/test_contention tests/gpu/test_thread_errors \
tests/gpu/test_acquire_wait tests/gpu/test_acquire_held tests/train/test_grads tests/train/test_grad_rows \
tests/train/test_clear_ahead tests/train/test_widen_ahead tests/train/test_grad_f32 tests/train/test_ring \
tests/gpu/test_passes tests/gpu/test_landed tests/gpu/test_one_copier tests/gpu/test_slots tests/writeback/test_update_readahead \
tests/cache/test_cache_threads tests/cache/test_cache_stream tests/cache/test_cache_inbox \
tests/predict/test_predict_threads tests/io/test_io_stress tests/io/test_io_read tests/io/test_io_write"

# run_suite DIR TESTS [CONFIGURE ARGS...]: TESTS "" runs them all.
run_suite() {
	dir=$1 tests=$2; shift 2
	BUILD_DIR=$dir "$top/scripts/build.sh" "$@" >/dev/null
	status=0
	if [ -n "$tests" ]; then
		make -C "$dir" -j"$jobs" check TESTS="$tests" >"$dir/check.out" 2>&1 || status=$?
	else
		make -C "$dir" -j"$jobs" check >"$dir/check.out" 2>&1 || status=$?
	fi
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
run_suite "$top/build-check" ""
outs="$top/build-check/check.out"
if [ -z "$WSP_SKIP_SANITIZERS" ]; then
	echo "== make check under ASan+UBSan"
	ASAN_OPTIONS=detect_leaks=1 run_suite "$top/build-sanitize" "" --enable-sanitizers --without-cuda
	outs="$outs $top/build-sanitize/check.out"
	echo "== threaded tests under ThreadSanitizer"
	# halt_on_error: any report fails the test that caused it.
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
		run_suite "$top/build-tsan" "$THREADED_TESTS" --enable-tsan --without-cuda
	outs="$outs $top/build-tsan/check.out"
fi
# One plain closing line over the suites.
count() { cat $outs | sed -n "s/^# $1: *//p" | awk '{s+=$1} END {print s+0}'; }
echo "check: $(count PASS) passed, $(( $(count FAIL) + $(count ERROR) + $(count XPASS) )) failed, $(count SKIP) skipped"
