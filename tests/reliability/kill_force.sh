#!/bin/sh
# `wspack convert --force` over an existing pack, killed at each rename it
# makes (strace's fault injection), and with the file system's atomic swap
# refused (the two-rename fallback): m.wsp is always there, the old pack or
# the new one, and the next run leaves nothing beside it (no m.wsp.old-*,
# no m.wsp.tmp-*).  Skips (77) without strace.
set -u
bin=$top_builddir/tools
command -v strace >/dev/null 2>&1 || { echo "SKIP: no strace"; exit 77; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/wsp-force-XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; ls -la "$dir"; exit 1; }
strace -f -o /dev/null true 2>/dev/null || { echo "SKIP: strace cannot trace here"; exit 77; }
# LeakSanitizer cannot run under ptrace: off for the traced runs (a
# sanitizer build), on for the others.
traced() { ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" strace -f -o /dev/null "$@"; }
gen() { "$bin/wspack" generate "$dir/$1" --layers 2 --hidden 64 --intermediate 128 --vocab 256 \
	--seed "$2" >/dev/null 2>&1 || fail "generate $1"; }
gen old 1
gen new 2
"$bin/wspack" convert "$dir/new" -o "$dir/new.wsp" >/dev/null 2>&1 || fail "convert new"
"$bin/wspack" convert "$dir/old" -o "$dir/old.wsp" >/dev/null 2>&1 || fail "convert old"
sum() { cat "$1"/manifest.wspm "$1"/shard-* 2>/dev/null | md5sum | cut -c1-32; }
old_sum=$(sum "$dir/old.wsp")
new_sum=$(sum "$dir/new.wsp")
[ "$old_sum" != "$new_sum" ] || fail "the two packs are alike"

# m.wsp must be a whole pack, the old or the new one
check_whole() {
	[ -d "$dir/m.wsp" ] || fail "$1: no m.wsp at all"
	"$bin/wspack" verify "$dir/m.wsp" >/dev/null 2>&1 || fail "$1: m.wsp does not verify"
	s=$(sum "$dir/m.wsp")
	[ "$s" = "$old_sum" ] || [ "$s" = "$new_sum" ] || fail "$1: m.wsp is neither pack"
}
leftovers() { ls "$dir" | grep -E '^m\.wsp\.(old|tmp)-' ; }

for how in "" "renameat2:error=EINVAL"; do
	n=1
	while [ $n -le 8 ]; do
		rm -rf "$dir"/m.wsp*
		cp -r "$dir/old.wsp" "$dir/m.wsp"
		extra=
		[ -n "$how" ] && extra="-e inject=$how"
		# kill at the n-th rename-family call of the run
		traced $extra -e inject=rename,renameat,renameat2:signal=SIGKILL:when=$n \
			"$bin/wspack" convert "$dir/new" -o "$dir/m.wsp" --force >/dev/null 2>&1
		check_whole "kill at rename $n${how:+ ($how)}"
		# the next run cleans up whatever the kill left
		"$bin/wspack" convert "$dir/new" -o "$dir/m.wsp" --force >/dev/null 2>&1 ||
			fail "the run after a kill at rename $n${how:+ ($how)} failed"
		check_whole "after the run that followed rename $n"
		[ "$(sum "$dir/m.wsp")" = "$new_sum" ] || fail "the run after rename $n: not the new pack"
		[ -z "$(leftovers)" ] || fail "left beside m.wsp after the next run: $(leftovers)"
		n=$((n + 1))
	done
	echo "force${how:+ ($how)}: m.wsp whole after a kill at each of 8 renames; the next run left nothing"
done
# A run that is not killed leaves nothing either, with the swap refused too.
traced -e inject=renameat2:error=EINVAL "$bin/wspack" convert "$dir/old" \
	-o "$dir/m.wsp" --force >/dev/null 2>&1 || fail "fallback convert"
[ "$(sum "$dir/m.wsp")" = "$old_sum" ] && [ -z "$(leftovers)" ] || fail "fallback: $(leftovers)"
echo "PASS"
