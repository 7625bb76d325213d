#!/bin/sh
# `pip install ./python` from a clone that was never built gives a working
# package with no environment variable (the wheel carries the libwspager it
# built), and `pip wheel ./python` a wheel that still works once the clone
# is gone.  Needs PyPI (numpy, setuptools); skips (77) without it.
set -u
: "${top_srcdir:=$(dirname "$0")/../..}"
top_srcdir=$(cd "$top_srcdir" && pwd)
skip() { echo "SKIP: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
# It builds its own library: once, in the plain suite, is enough.
if ldd "${top_builddir:-.}/.libs/libwspager.so" 2>/dev/null | grep -qE 'lib(a|t|ub)san'; then
	skip "runs in the plain build"
fi
PYTHON3=${PYTHON3:-$(command -v python3)} || skip "no python3"
T=$(mktemp -d "${TMPDIR:-/tmp}/wsp-pip-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT

# A clone as it comes: tracked files only, nothing configured or built.
git -C "$top_srcdir" ls-files -z >"$T/files" 2>/dev/null && [ -s "$T/files" ] ||
	skip "not a git checkout"
mkdir "$T/clone"
(cd "$top_srcdir" && xargs -0 cp --parents -t "$T/clone" <"$T/files") || fail "copy of the clone"
[ ! -e "$T/clone/configure" ] || fail "the copy has a configure script"

"$PYTHON3" -m venv "$T/v1" || skip "python3 -m venv failed"
"$T/v1/bin/pip" install -q numpy >"$T/pip.log" 2>&1 || { tail -3 "$T/pip.log"; skip "no PyPI"; }
"$T/v1/bin/pip" install "$T/clone/python" >"$T/install.log" 2>&1 ||
	{ tail -20 "$T/install.log"; fail "pip install ./python"; }
"$T/v1/bin/pip" wheel --no-deps -w "$T/wheels" "$T/clone/python" >"$T/wheel.log" 2>&1 ||
	{ tail -20 "$T/wheel.log"; fail "pip wheel ./python"; }
rm -rf "$T/clone"

"$PYTHON3" -m venv "$T/v2" || fail "second venv"
"$T/v2/bin/pip" install -q "$T"/wheels/wspager-*.whl >"$T/pip2.log" 2>&1 ||
	{ tail -5 "$T/pip2.log"; fail "pip install of the wheel"; }

# Each venv, from elsewhere, with no hint where a library might be.
for v in v1 v2; do
	(cd / && env -u WSPAGER_LIBRARY -u PYTHONPATH -u LD_LIBRARY_PATH "$T/$v/bin/python" \
		"$top_srcdir/tests/python/wheel_check.py" "$T/$v") ||
		fail "$v: the installed package does not work"
done
echo "pip install ./python and its wheel work without WSPAGER_LIBRARY"
