#!/bin/sh
# `pip install ./python` from a clone that was never built gives a working
# package with no environment variable (the wheel carries the libwspager it
# built), and `pip wheel ./python` a wheel that still works once the clone
# is gone.  Needs PyPI (numpy, setuptools); skips (77) without it.
set -u
: "${top_srcdir:=$(cd "$(dirname "$0")/../.." && pwd)}"
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

# Each venv, from elsewhere, with no hint where a library might be: a
# checkpoint written by hand (no safetensors package there), converted,
# paged on the host backend, its values read back.
for v in v1 v2; do
	(cd / && env -u WSPAGER_LIBRARY -u PYTHONPATH -u LD_LIBRARY_PATH "$T/$v/bin/python" - "$T/$v" <<'PY'
import json, os, struct, sys
import numpy as np
import wspager
from wspager import _lib
here = os.path.dirname(wspager.__file__)
assert os.path.exists(os.path.join(here, "py.typed")), "no py.typed"
loaded = _lib.lib()._name
assert os.path.dirname(loaded) == os.path.join(here, "_native"), f"loaded {loaded}"
w = np.arange(48, dtype=np.float32).reshape(6, 8)
head = json.dumps({"model.layers.0.w": {"dtype": "F32", "shape": [6, 8],
                                         "data_offsets": [0, w.nbytes]}}).encode()
ck = os.path.join(sys.argv[1], "ckpt.safetensors")
with open(ck, "wb") as f:
    f.write(struct.pack("<Q", len(head)) + head + w.tobytes())
pack = wspager.convert(ck, os.path.join(sys.argv[1], "m.wsp"))
with wspager.Pager(pack.path, device="host") as pg, pg.acquire(0) as layer:
    assert np.array_equal(layer["w"], w), "values differ"
print(f"{sys.argv[1]}: wspager {wspager.version()} from {loaded}")
PY
	) || fail "$v: the installed package does not work"
done
