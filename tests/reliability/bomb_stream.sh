#!/bin/sh
# A decompression bomb made by wspack itself: a pack of a few dozen KB
# whose one layer decodes to 1 GiB of zeros.  wspack verify and unpack
# stream it a chunk at a time, their peak resident memory under 512 MiB
# (they used to allocate, and fill, the whole layer), and unpack still
# writes the checkpoint back byte for byte.
set -u
bin=$top_builddir/tools
dir=$(mktemp -d "${TMPDIR:-/tmp}/wsp-bomb-XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
size=$((1 << 30))
python3 - "$dir/ck.safetensors" "$size" <<'PY' || fail "cannot write the checkpoint"
import json, os, struct, sys
path, n = sys.argv[1], int(sys.argv[2])
head = json.dumps({"model.layers.0.w": {"dtype": "U8", "shape": [n],
                                         "data_offsets": [0, n]}}).encode()
head += b" " * (-len(head) % 8)
with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(head)) + head)
    f.truncate(8 + len(head) + n)          # zeros, sparse
PY
"$bin/wspack" convert "$dir/ck.safetensors" -o "$dir/bomb.wsp" --threads 2 >/dev/null ||
	fail "convert"
stored=$(du -sk "$dir/bomb.wsp" | cut -f1)
echo "a pack of ${stored} KiB for a layer of $((size >> 20)) MiB"
# peak RSS of a command, in KiB (what the kernel counted for the child)
peak() {
	python3 -c 'import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if rc == 0 else -1)' "$@"
}
v=$(peak "$bin/wspack" verify "$dir/bomb.wsp" --threads 2)
[ "$v" -ge 0 ] || fail "verify failed"
u=$(peak "$bin/wspack" unpack "$dir/bomb.wsp" -o "$dir/out")
[ "$u" -ge 0 ] || fail "unpack failed"
echo "peak resident memory: verify ${v} KiB, unpack ${u} KiB (the layer: $((size >> 10)) KiB)"
# less than half the layer: plenty for a few chunks (and a sanitizer's own)
[ "$v" -lt 524288 ] || fail "verify held ${v} KiB"
[ "$u" -lt 524288 ] || fail "unpack held ${u} KiB"
cmp "$dir/ck.safetensors" "$dir/out/ck.safetensors" || fail "unpack is not byte-identical"
echo "verify and unpack streamed the layer in under 512 MiB; unpack byte-identical"
