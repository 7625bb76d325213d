# Shared by the Python tests: a virtual environment under the build tree
# with numpy, safetensors, torch, transformers and peft from PyPI (made once, kept
# between runs; `make clean` removes it), or the interpreter named by
# WSP_PYTHON (the GPU lane: a machine's own torch).  Skips (77) when neither
# can be had.  Sets PY, and WSPAGER_LIBRARY to the library just built.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${top_builddir:=$top_srcdir}"
HERE=$top_srcdir/tests/python
skip() { echo "SKIP: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# A sanitizer build's library cannot be loaded into a Python that was not
# started with the sanitizer's runtime; these tests run in the plain build.
if [ -z "${WSPAGER_LIBRARY:-}" ] && [ -f "$top_builddir/.libs/libwspager.so" ] &&
	ldd "$top_builddir/.libs/libwspager.so" 2>/dev/null | grep -qE 'lib(a|t|ub)san'; then
	skip "the library is built with sanitizers; the Python tests run in the plain build"
fi

if [ -n "${WSP_PYTHON:-}" ]; then
	PY=$WSP_PYTHON
else
	VENV=$top_builddir/tests/python/venv
	PY=$VENV/bin/python
	if ! "$PY" -c 'import numpy, safetensors, torch, transformers, peft' 2>/dev/null; then
		# one test builds it at a time; the others wait for it
		mkdir -p "$top_builddir/tests/python"
		exec 9>"$top_builddir/tests/python/venv.lock"
		flock 9
		if ! "$PY" -c 'import numpy, safetensors, torch, transformers, peft' 2>/dev/null; then
			rm -rf "$VENV"
			[ -n "${PYTHON3:-}" ] || PYTHON3=$(command -v python3) || skip "no python3"
			"$PYTHON3" -m venv "$VENV" || skip "python3 -m venv failed"
			if ! timeout 1200 "$VENV/bin/pip" install -q --no-cache-dir numpy safetensors torch \
				transformers peft >"$top_builddir/tests/python/pip.log" 2>&1; then
				tail -5 "$top_builddir/tests/python/pip.log" >&2
				rm -rf "$VENV"
				skip "pip cannot install numpy, safetensors, torch, transformers and peft (no registry?)"
			fi
		fi
		flock -u 9
	fi
fi
if [ -z "${WSPAGER_LIBRARY:-}" ]; then
	WSPAGER_LIBRARY=$top_builddir/.libs/libwspager.so
	[ -f "$WSPAGER_LIBRARY" ] || skip "$WSPAGER_LIBRARY not built (a --disable-shared build?)"
fi
export WSPAGER_LIBRARY
PYTHONPATH=$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}
PYTHONUNBUFFERED=1
export PYTHONPATH PYTHONUNBUFFERED
T=$(mktemp -d "${TMPDIR:-/tmp}/wsp-py-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
export WSP_TEST_TMP=$T
