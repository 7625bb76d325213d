#!/bin/sh
# The main job on a built-in default: install dependencies, build, generate a
# Llama-shaped model (~0.5 GB of bf16 weights), pack it, and stream it through
# the pager with a host cache smaller than the model — on the GPU when there
# is one, through the host device backend otherwise — printing the report.
# Environment: WSP_DEMO_DIR (default ./demo), WSP_DEMO_LAYERS (16),
# WSP_DEMO_HOST_CACHE (256M), WSP_DEMO_PASSES (3).
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/deps.sh"
build=$(BUILD_DIR="$top/build" "$top/scripts/build.sh")
dir=${WSP_DEMO_DIR:-$top/demo}
layers=${WSP_DEMO_LAYERS:-16}
mkdir -p "$dir"
if [ ! -d "$dir/model.wsp" ]; then
	echo "== generating a $layers-layer Llama-shaped checkpoint"
	"$build/tools/wspack" generate "$dir/model" --layers "$layers" --hidden 1024 \
		--intermediate 2816 --vocab 32000 --shard-size 256M --force
	echo "== packing it"
	"$build/tools/wspack" convert "$dir/model" -o "$dir/model.wsp" --force
fi
"$build/tools/wspack" info "$dir/model.wsp"
device=host
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then device=0; fi
echo "== streaming it through the pager (device: $device)"
exec "$build/tools/wspager" run "$dir/model.wsp" --device "$device" \
	--host-cache "${WSP_DEMO_HOST_CACHE:-256M}" --passes "${WSP_DEMO_PASSES:-3}"
