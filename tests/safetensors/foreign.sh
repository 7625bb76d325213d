#!/bin/sh
# wspack convert on checkpoints of other formats says what each file is and
# how to get safetensors from it (not "header length ... above the limit").
set -u
WSPACK=${top_builddir:-.}/tools/wspack
[ -x "$WSPACK" ] || { echo "skip: $WSPACK not built"; exit 77; }
[ -n "${PYTHON3:-}" ] || PYTHON3=$(command -v python3) || { echo "skip: no python3"; exit 77; }
T=$(mktemp -d "${TMPDIR:-/tmp}/wsp-foreign-XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
"$PYTHON3" - <<'PY' || exit 1
import io, pickle, struct, zipfile
zipfile.ZipFile("pytorch_model.bin", "w").writestr("archive/data.pkl", pickle.dumps({"w": 1}))
open("legacy.pt", "wb").write(pickle.dumps({"w": 1}, protocol=2))
open("model.gguf", "wb").write(b"GGUF" + struct.pack("<I", 3) + bytes(64))
npy = b"\x93NUMPY\x01\x00" + struct.pack("<H", 118) + b"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }".ljust(117) + b"\n" + bytes(8)
open("a.npy", "wb").write(npy)
zipfile.ZipFile("b.npz", "w").writestr("x.npy", npy)
open("model.onnx", "wb").write(b"\x08\x07\x12\x07pytorch" + bytes(64))
open("model.safetensors.index.json", "w").write('{"metadata": {}, "weight_map": {"a": "model-00001-of-00001.safetensors"}}')
PY
mkdir bin && cp pytorch_model.bin bin/
fail=0
check() {   # check INPUT TEXT: exit 1 and TEXT in the message
	rc=0
	"$WSPACK" convert "$1" -o "$T/out.wsp" >"$T/out" 2>"$T/err" || rc=$?
	if [ $rc != 1 ] || ! grep -qF "$2" "$T/err"; then
		echo "FAIL: $1: exit $rc: $(cat "$T/err")"
		fail=1
	else
		echo "ok: $1: $(cat "$T/err")"
	fi
	grep -q "header length" "$T/err" && { echo "FAIL: $1: still a header-length message"; fail=1; }
}
check pytorch_model.bin "a PyTorch checkpoint (torch.save)"
check legacy.pt "a PyTorch checkpoint (torch.save)"
check model.gguf "a GGUF file"
check a.npy "a NumPy .npy array"
check b.npz "a NumPy .npz archive"
check model.onnx "an ONNX model"
check model.safetensors.index.json "give the directory that holds it"
check bin "pytorch_model.bin is a PyTorch checkpoint"
exit $fail
