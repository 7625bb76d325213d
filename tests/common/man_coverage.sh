#!/bin/sh
# Every function of the public header has a section-3 man page (its own, or
# a .so link to its group's) that is installed, and the shared library, when
# built, exports exactly those functions: no internal helper leaks.
set -u
fail=0
funcs=$(sed -n 's/^[a-z].*[ *]\(wsp_[a-z0-9_]*\)(.*/\1/p' "$top_srcdir/include/wspager.h" | sort -u)
[ -n "$funcs" ] || { echo "no functions found in wspager.h"; exit 1; }
n=0
for f in $funcs; do
	n=$((n + 1))
	if [ ! -f "$top_srcdir/man/$f.3" ]; then
		echo "missing man page: man/$f.3"
		fail=1
	fi
	grep -q "man/$f.3" "$top_srcdir/man/lib.am" || { echo "man/$f.3 not in man/lib.am"; fail=1; }
done
echo "$n public functions, each with a man page: $([ $fail = 0 ] && echo yes || echo no)"
so=$top_builddir/.libs/libwspager.so
if [ -f "$so" ] && command -v nm >/dev/null; then
	exported=$(nm -D --defined-only "$so" | awk '$2 == "T" { sub(/@.*/, "", $3); print $3 }' | sort -u)
	extra=$(printf '%s\n' "$exported" | grep -vxF "$funcs")
	missing=$(printf '%s\n' "$funcs" | grep -vxF "$exported")
	[ -z "$extra" ] || { echo "exported but not in wspager.h:" $extra; fail=1; }
	[ -z "$missing" ] || { echo "in wspager.h but not exported:" $missing; fail=1; }
	echo "libwspager.so exports $(printf '%s\n' "$exported" | wc -l) functions"
fi
exit $fail
