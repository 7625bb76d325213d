#!/bin/sh
# A decompression bomb made by wspack itself: a pack of a few hundred KB
# whose one layer decodes to 1 GiB of zeros.  wspack verify and unpack
# stream it a chunk at a time, within a 512 MiB address-space limit (they
# used to allocate the whole layer), and unpack still writes the
# checkpoint back byte for byte.
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
# 512 MiB of address space: less than the layer, plenty for a few chunks
(ulimit -v 524288 && "$bin/wspack" verify "$dir/bomb.wsp" --threads 2) ||
	fail "verify inside 512 MiB"
(ulimit -v 524288 && "$bin/wspack" unpack "$dir/bomb.wsp" -o "$dir/out") ||
	fail "unpack inside 512 MiB"
cmp "$dir/ck.safetensors" "$dir/out/ck.safetensors" || fail "unpack is not byte-identical"
echo "verify and unpack streamed the layer inside 512 MiB; unpack byte-identical"
