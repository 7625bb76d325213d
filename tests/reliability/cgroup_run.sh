#!/bin/sh
# A run inside a memory cgroup smaller than the pack completes, every layer
# verified.  Needs root and a writable memory cgroup (v1 or v2); skips (77)
# otherwise.  Reproduce by hand:
#   mkdir /sys/fs/cgroup/memory/wsp && echo 160M > /sys/fs/cgroup/memory/wsp/memory.limit_in_bytes
#   echo $$ > /sys/fs/cgroup/memory/wsp/cgroup.procs
#   wspager run model.wsp --device host --host-cache 32M
set -u
bin=$top_builddir/tools
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root for a memory cgroup"; exit 77; }
name=wsp-test-$$
if [ -d /sys/fs/cgroup/memory ] && [ ! -f /sys/fs/cgroup/cgroup.controllers ]; then
	cg=/sys/fs/cgroup/memory/$name; limit_file=memory.limit_in_bytes
elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
	cg=/sys/fs/cgroup/$name; limit_file=memory.max
else
	echo "skip: no memory cgroup controller available"; exit 77
fi
mkdir "$cg" 2>/dev/null || { echo "skip: cannot create $cg"; exit 77; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/wsp-cg-XXXXXX")
trap 'rm -rf "$dir"; rmdir "$cg" 2>/dev/null' EXIT
# Largest layer ~14 MiB, so host-backend slots (3 of them) + host budget +
# staging + decode scratch come to ~130 MiB, under a limit smaller than the pack.
"$bin/wspack" generate "$dir/src" --layers 24 --hidden 768 --intermediate 2048 \
	--vocab 8192 --shard-size 64M >/dev/null 2>&1 || { echo "generate failed"; exit 1; }
"$bin/wspack" convert "$dir/src" -o "$dir/m.wsp" >/dev/null 2>&1 || { echo "convert failed"; exit 1; }
rm -rf "$dir/src"
raw=$(du -sb "$dir/m.wsp" | cut -f1)
limit=$((160 << 20))
echo "pack on disk: $((raw >> 20)) MiB; memory limit: $((limit >> 20)) MiB"
[ "$raw" -gt "$limit" ] || { echo "test setup: the pack must be larger than the limit"; exit 1; }
echo $limit >"$cg/$limit_file" || { echo "skip: cannot set $limit_file"; exit 77; }
# Write back the pack's dirty pages now, so that writeback is not charged to
# the run inside the limit.
sync
# Twice: with a budget that fits, and with one far above the limit, which the
# pager must clamp (net of staging, decode buffers and slots) instead of
# being killed by the OOM killer.
for cache in 32M 1G; do
	sh -c "echo \$\$ >'$cg/cgroup.procs' && exec '$bin/wspager' run '$dir/m.wsp' --device host \
		--host-cache $cache --passes 2 --json" >"$dir/run.json" 2>"$dir/run.err"
	rc=$?
	cat "$dir/run.err"
	if [ $rc -ne 0 ]; then
		echo "--host-cache $cache inside the cgroup failed with $rc (137 = killed by the OOM killer)"
		exit 1
	fi
	if [ $cache = 1G ] && ! grep -q "above the memory available" "$dir/run.err"; then
		echo "--host-cache 1G: no notice that the budget was clamped"
		exit 1
	fi
	echo "--host-cache $cache: completed inside the $((limit >> 20)) MiB cgroup, every tensor verified"
done
head -c 400 "$dir/run.json"; echo
