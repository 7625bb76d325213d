# Shared by the wspager(1) tests: paths, a scratch directory, a tiny pack,
# and `expect NAME CMD...`, which runs CMD and compares its stdout, stderr
# and exit status with NAME.stdout, NAME.stderr and NAME.exit beside the
# tests (each one present is compared, and at least one must be; the
# scratch path reads as @TMP@).
# Exit codes: 0 pass, 1 fail, 77 skip.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
: "${PYTHON3:=python3}"
WSPAGER=$top_builddir/tools/wspager
WSPACK=$top_builddir/tools/wspack
EXP=$top_srcdir/tests/cli
# Never drop the page cache of the machine running the tests.
WSPAGER_NO_DROP_CACHES=1
export WSPAGER_NO_DROP_CACHES

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }

[ -x "$WSPAGER" ] || fail "$WSPAGER not built"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/wsp-cli-XXXXXX") || fail "mktemp"
trap 'rm -rf "$TMP"' EXIT

need_python() {
	[ -n "$PYTHON3" ] && "$PYTHON3" -c 'import json' 2>/dev/null || skip "python3 not available"
}

# make_pack DIR [CONVERT-OPTION...]: a ~5 MiB Llama-shaped bf16 pack (4
# blocks, hidden 256).
make_pack() {
	[ -x "$WSPACK" ] || fail "$WSPACK not built"
	out=$1
	shift
	"$WSPACK" generate --layers 4 --hidden 256 --intermediate 512 --vocab 1024 \
		"$TMP/model.safetensors" >/dev/null 2>"$TMP/gen.err" ||
		{ cat "$TMP/gen.err" >&2; fail "wspack generate"; }
	"$WSPACK" convert "$TMP/model.safetensors" -o "$out" "$@" >/dev/null 2>"$TMP/conv.err" ||
		{ cat "$TMP/conv.err" >&2; fail "wspack convert"; }
}

# expect NAME CMD...: run and compare with the expected files; a case with
# none of them is a mistake in the test, not a pass.
expect() {
	name=$1
	shift
	[ -f "$EXP/$name.stdout" ] || [ -f "$EXP/$name.stderr" ] || [ -f "$EXP/$name.exit" ] ||
		fail "$name: no expected stdout, stderr or exit file in $EXP"
	rc=0
	"$@" >"$TMP/$name.out" 2>"$TMP/$name.err" || rc=$?
	for kind in stdout stderr; do
		f=$EXP/$name.$kind
		got=$TMP/$name.out
		[ $kind = stderr ] && got=$TMP/$name.err
		sed "s|$TMP|@TMP@|g" "$got" >"$got.norm"
		[ -f "$f" ] || continue
		if ! cmp -s "$f" "$got.norm"; then
			echo "--- $name: $kind differs (expected, got):" >&2
			diff -u "$f" "$got.norm" >&2
			fail "$name: $kind"
		fi
	done
	if [ -f "$EXP/$name.exit" ]; then
		want=$(cat "$EXP/$name.exit")
		[ "$rc" = "$want" ] || { cat "$TMP/$name.err" >&2; fail "$name: exit $rc, want $want"; }
	fi
	return 0
}
