#!/bin/bash
# The GPU test lane.  Two halves, because the GPU machine has the CUDA driver,
# toolkit and cuBLAS but no liburing, no autotools and no package registry:
#
#   scripts/gpu-lane.sh build   on the development machine: a --disable-shared
#                               build with liburing, zstd, jansson, xxHash and
#                               the CUDA runtime linked statically; copies the
#                               tools, GPU tests and benchmarks to .gpu-lane/
#                               Also a shared libwspager.so (CUDA runtime
#                               static) with the .so files it needs, for the
#                               Python package on that machine's own torch.
#   scripts/gpu-lane.sh pack    the lane again as build-carry/gpu-lane.tar.xz
#                               (build does it last; again after adding
#                               .gpu-lane/base): the one path to carry to
#                               the GPU machine, whatever .gpu-lane weighs.
#   scripts/gpu-lane.sh run [PART...]
#                               on the GPU machine, from the repository root
#                               with .gpu-lane/ (or its archive) beside it; PART is tests (the
#                               C GPU tests), python (the Python tests on CUDA
#                               and on the host backend), bench (the C
#                               benchmarks and `wspager bench`), torch-bench
#                               (bench/torch_offload.py, torch_rss.py, torch_train.py),
#                               torch-rss (only the latter), ttft
#                               (bench/torch_ttft.py: the first token,
#                               cold), lora-bench
#                               (bench/torch_train.py --lora), decode-bench
#                               (bench/torch_train.py --lora: who decodes,
#                               chosen by the pager against each fixed
#                               choice, batch 4 and 16), train-bench
#                               (bench/torch_train.py), multi-gpu (a
#                               model over two GPUs: tests/python/
#                               test_devices.py and bench/torch_devices.py;
#                               a machine with two), run-devices
#                               (`wspager run --devices 0,1` against one
#                               GPU; a machine with two), dist (data
#                               parallel: tests/python/test_dist.py,
#                               test_ddp.py and test_fsdp.py on NCCL and
#                               bench/torch_dist.py;
#                               two GPUs; dist-test: the tests only),
#                               exprans-bench
#                               (bench/exprans_bench and the host decoders
#                               in bench/codec_bench), adamw-bench
#                               (bench/adamw_bench: the host AdamW step
#                               against memory bandwidth), landing-bench
#                               (bench/landing_bench: where landed
#                               gradients are widened), copy-bench
#                               (bench/copy_interference.py: GEMMs beside
#                               the link's copies), codec-bench
#                               (bench/exprans_bench, gpu_bench with zstd
#                               and exprans packs, bench/stream_profile.py
#                               on both), cold-bench (`wspager
#                               bench` on an exprans pack larger than the
#                               host cache), small-bench (LoRA at batch 4
#                               with the small layers kept and paged,
#                               taking turns), py-train (the training tests
#                               of python), py-families (the transformers
#                               families of python), ab (before and after:
#                               streaming, cold and training with an earlier
#                               build's binaries in .gpu-lane/base against
#                               this lane's, in one run); tests, python, bench and
#                               torch-bench when none is named.  Logs go to $OUT (or
#                               .gpu-lane/out); a table is printed last.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
lane=$top/.gpu-lane

build() {
	set -e
	"$top/scripts/deps.sh"
	local b=$top/build-gpu-lane
	[ -x "$top/configure" ] || (cd "$top" && ./autogen.sh >/dev/null)
	mkdir -p "$b"
	cd "$b"
	if [ ! -f Makefile ]; then
		"$top/configure" -q --disable-shared --enable-static-cudart \
			LIBURING_LIBS="-l:liburing.a" ZSTD_LIBS="-l:libzstd.a" \
			JANSSON_LIBS="-l:libjansson.a" XXHASH_LIBS="-l:libxxhash.a"
	fi
	make -j"$(nproc)" >/dev/null
	make -j"$(nproc)" check TESTS= >/dev/null     # build the test programs, run none
	make -j"$(nproc)" bench >/dev/null
	rm -rf "$lane"
	mkdir -p "$lane/tools" "$lane/tests" "$lane/bench"
	cp tools/wspack tools/wspager "$lane/tools/"
	for t in tests/gpu/* examples/stream; do
		[ -f "$t" ] && [ -x "$t" ] && cp "$t" "$lane/tests/"
	done
	for t in bench/*_bench tests/io/io_bench; do
		[ -f "$t" ] && [ -x "$t" ] && cp "$t" "$lane/bench/"
	done
	# Debug info off: the lane travels to the GPU machine.
	strip --strip-debug "$lane"/tools/* "$lane"/tests/* "$lane"/bench/*
	# Nothing may still need a shared library the GPU machine lacks.
	if ldd "$lane/tools/wspager" | grep -E 'liburing|libzstd|jansson|xxhash|cudart'; then
		echo "gpu-lane: a dependency is still linked dynamically" >&2
		exit 1
	fi
	# The shared library for Python.  Debian's static jansson is not
	# position-independent, so the dependencies travel as .so files.
	local s=$top/build-gpu-lane-so
	mkdir -p "$s" "$lane/lib" "$lane/py/tests/python"
	(cd "$s" && { [ -f Makefile ] || "$top/configure" -q --enable-static-cudart; } &&
		make -j"$(nproc)" libwspager.la tests/python/struct_layout >/dev/null)
	cp -L "$s/.libs/libwspager.so" "$lane/lib/libwspager.so"
	cp "$s/tests/python/struct_layout" "$lane/py/tests/python/"
	for dep in $(ldd "$lane/lib/libwspager.so" | awk '/liburing|libzstd|jansson|xxhash/ { print $3 }'); do
		cp -L "$dep" "$lane/lib/"
	done
	if ldd "$lane/lib/libwspager.so" | grep -q cudart; then
		echo "gpu-lane: libwspager.so needs libcudart" >&2
		exit 1
	fi
	# The Python package as a user installs it (pip wheel ./python): there
	# it is installed with no registry and must work with no WSPAGER_LIBRARY.
	local v=$top/build-gpu-lane-venv
	[ -x "$v/bin/pip" ] || python3 -m venv "$v"
	rm -rf "$lane/wheel"
	"$v/bin/pip" wheel -q --no-deps -w "$lane/wheel" "$top/python" >/dev/null
	# peft (pure Python) for the LoRA test: the GPU machine has its other
	# dependencies (torch, transformers, accelerate) but no registry
	rm -rf "$lane/pydeps"
	"$v/bin/pip" download -q --no-deps -d "$lane/pydeps" peft >/dev/null
	du -sh "$lane"
	# The static binaries compress ~10x: the lane also travels as one
	# archive, which `run` unpacks where .gpu-lane/ is missing.  Binaries
	# of an earlier build for part ab go in .gpu-lane/base/ before this.
	pack
}

pack() {
	mkdir -p "$top/build-carry"
	tar cJf "$top/build-carry/gpu-lane.tar.xz" -C "$top" .gpu-lane
	du -sh "$top/build-carry/gpu-lane.tar.xz"
}

# The Python tests and the torch bench run on the machine's own python3
# (its torch and transformers), with this environment: "${py_env[@]}" CMD.
py_env=(env WSP_PYTHON=python3 "WSPAGER_LIBRARY=$lane/lib/libwspager.so"
	"LD_LIBRARY_PATH=$lane/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	"PYTHONPATH=$top/python:$lane/pydeps/site" PYTHONUNBUFFERED=1 "top_srcdir=$top" "top_builddir=$lane/py")

# step NAME TIMEOUT CMD...: run CMD with its output in $out/NAME.log and one
# summary line: PASS (0), SKIP (77) or FAIL(rc), and its wall time.
step() {
	local name=$1 limit=$2 rc=0 r t0 t1
	shift 2
	t0=$(date +%s.%N)
	timeout "$limit" "$@" >"$out/$name.log" 2>&1 || rc=$?
	t1=$(date +%s.%N)
	case $rc in 0) r=PASS ;; 77) r=SKIP ;; *) r="FAIL($rc)" ;; esac
	printf '%-28s %-9s %8.2f s\n' "$name" "$r" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" | tee -a "$summary"
}

run() {
	if [ ! -d "$lane" ] && [ -f "$top/build-carry/gpu-lane.tar.xz" ]; then
		tar xJf "$top/build-carry/gpu-lane.tar.xz" -C "$top"
	fi
	out=${OUT:-$lane/out}
	mkdir -p "$out"
	export PATH=$lane/tools:$PATH
	local work=${WSP_LANE_WORK:-/var/tmp/wsp-lane}
	rm -rf "$work"
	mkdir -p "$work"
	{
		nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
		echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpus: $(nproc)  kernel: $(uname -r)"
		grep -m1 'model name' /proc/cpuinfo
		df -h "$work" | tail -1
	} | tee "$out/machine.txt"
	summary=$out/summary.txt
	: >"$summary"
	# the carried wheels (peft), installed where py_env looks
	ls "$lane"/pydeps/*.whl >/dev/null 2>&1 && [ ! -d "$lane/pydeps/site" ] &&
		python3 -m pip install -q --no-index --no-deps --target "$lane/pydeps/site" "$lane"/pydeps/*.whl
	local parts=" ${*:-tests python bench torch-bench} "
	case $parts in *" tests "*) lane_tests ;; esac
	case $parts in *" python "*) lane_python ;; *)
		case $parts in *" py-train "*) lane_py_train ;; esac
		case $parts in *" py-families "*) lane_py_families ;; esac ;;
	esac
	case $parts in *" bench "*) lane_bench ;; esac
	case $parts in *" multi-gpu "*)
		# needs a machine with two GPUs: the model over both
		step py-devices-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_devices.py" cuda'
		step py-devices-cpu 300 "${py_env[@]}" sh "$top/tests/python/torch_devices.sh"
		step bench-devices 400 "${py_env[@]}" python3 "$top/bench/torch_devices.py" --dir "$work/devices"
		for f in py-devices-cuda py-devices-cpu bench-devices; do
			echo "== $f"; grep -avE 'Loading|Writing|Packing' "$out/$f.log" | tail -n 14
		done ;;
	esac
	case $parts in *" dist "*|*" dist-test "*)
		# data parallel over two GPUs: the test on NCCL, then (dist) the bench
		step py-dist-cuda 400 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_dist.py" cuda'
		step py-ddp-cuda 400 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_ddp.py" cuda'
		step py-fsdp-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_fsdp.py" cuda'
		for f in py-dist-cuda py-ddp-cuda py-fsdp-cuda; do
			echo "== $f"; grep -avE 'Loading|Writing|Packing|warn' "$out/$f.log" | tail -n 16
		done
		case $parts in *" dist "*)
			step bench-dist 600 "${py_env[@]}" python3 "$top/bench/torch_dist.py" --dir "$work/dist"
			echo "== bench-dist"; grep -avE 'Loading|Writing|Packing' "$out/bench-dist.log" | tail -n 16 ;;
		esac ;;
	esac
	case $parts in *" run-devices "*)
		# the C API's pager over both GPUs against one, host tier warm
		step run-devices-gen 300 wspack generate "$work/run-dev-model" --layers 16 --hidden 4096 \
			--intermediate 11008 --vocab 32000 --force
		step run-devices-convert 300 wspack convert "$work/run-dev-model" -o "$work/run-dev.wsp" --force
		rm -rf "$work/run-dev-model"
		step run-devices-one 300 wspager run "$work/run-dev.wsp" --device 0 --passes 6 \
			--host-cache 12G --gpu-slots 8
		step run-devices-two 300 wspager run "$work/run-dev.wsp" --devices 0,1 --passes 6 \
			--host-cache 12G --gpu-slots 8
		step run-devices-one-again 300 wspager run "$work/run-dev.wsp" --device 0 --passes 6 \
			--host-cache 12G --gpu-slots 8
		for f in run-devices-one run-devices-two run-devices-one-again; do
			echo "== $f"; tail -n 13 "$out/$f.log"
		done ;;
	esac
	case $parts in *" exprans-bench "*)
		step bench-exprans 400 "$lane/bench/exprans_bench"
		# the host decoders on one thread, exprans beside zstd on one data set
		step bench-codec-cpu 400 "$lane/bench/codec_bench" --levels 1,3 --size 256 --threads 1
		# what a user meets: `wspack verify --threads 1` of one checkpoint
		# packed with exprans and with zstd, taking turns (CPU seconds)
		step verify-generate 300 wspack generate "$work/verify-model" --layers 4 --hidden 2048 \
			--intermediate 5632 --vocab 32000 --force
		step verify-convert-exprans 300 wspack convert "$work/verify-model" -o "$work/verify-ex.wsp" \
			--codec exprans --force
		step verify-convert-zstd 300 wspack convert "$work/verify-model" -o "$work/verify-zstd.wsp" \
			--codec zstd --force
		for k in 1 2; do
			for c in ex zstd; do
				step verify-$c-$k 300 bash -c 'TIMEFORMAT="%U s user, %R s wall"; time wspack verify "$1" --threads 1' \
					_ "$work/verify-$c.wsp"
			done
		done
		for f in bench-exprans bench-codec-cpu; do echo "== $f"; tail -n 20 "$out/$f.log"; done
		for f in "$out"/verify-ex-*.log "$out"/verify-zstd-*.log; do
			echo "== $(basename "$f" .log)"; tail -n 2 "$f"
		done ;;
	esac
	case $parts in *" adamw-bench "*|*" train-bench "*)
		step bench-adamw 300 "$lane/bench/adamw_bench"
		step bench-adamw-1 300 "$lane/bench/adamw_bench" --threads 1 --params 67108864
		for f in bench-adamw bench-adamw-1; do echo "== $f"; cat "$out/$f.log"; done ;;
	esac
	case $parts in *" landing-bench "*)
		# where landed gradients are widened: whole layers against rings of
		# chunks, the write-back's own ring among them; WSP_LANE_LANDING
		# adds options (--chunk, --rings, --threads, --lib-chunks)
		step bench-landing 300 "$lane/bench/landing_bench" ${WSP_LANE_LANDING:-}
		step bench-landing-1m 300 "$lane/bench/landing_bench" --chunk 1024 --rings 4,8,16,32 --threads 12
		for f in bench-landing bench-landing-1m; do echo "== $f"; cat "$out/$f.log"; done ;;
	esac
	case $parts in *" copy-bench "*)
		# GEMMs beside the link's copies, no pager: the compute-bound
		# ceiling of paged training (bench/copy_interference.py)
		for b in 12 4; do
			step bench-copy-b$b 300 "${py_env[@]}" python3 "$top/bench/copy_interference.py" --batch $b
			echo "== bench-copy-b$b"; cat "$out/bench-copy-b$b.log"
		done ;;
	esac
	case $parts in *" bench "*|*" codec-bench "*)
		step bench-exprans 400 "$lane/bench/exprans_bench"
		mkdir -p "$work/gpu-exprans" "$work/gpu-zstd"
		# three runs each: the link's rate varies from run to run here
		for k in 1 2 3; do
			step bench-gpu-zstd-$k 400 "$lane/bench/gpu_bench" --dir "$work/gpu-zstd"
			step bench-gpu-exprans-$k 400 "$lane/bench/gpu_bench" --codec exprans \
				--dir "$work/gpu-exprans"
		done
		# the same pack with a GPU tier that holds all of it packed
		step bench-gpu-exprans-tier 400 "$lane/bench/gpu_bench" --codec exprans \
			--dir "$work/gpu-exprans" --gpu-packed 1200M
		# a model 1.4x the device memory left to the pager (a ballast
		# holds the rest), served by the GPU tier without the link
		mkdir -p "$work/gpu-larger"
		step bench-gpu-larger 500 "$lane/bench/gpu_bench" --codec exprans --layers 240 \
			--hidden 1024 --dir "$work/gpu-larger" --gpu-free "${WSP_LANE_GPU_FREE:-3650M}" \
			--gpu-packed 3650M
		# where the time goes when the host tier streams each pack
		for c in exprans zstd; do
			step stream-profile-$c 300 "${py_env[@]}" python3 "$top/bench/stream_profile.py" \
				"$work/gpu-$c/pack-$c" --trace "$out/stream-$c.json"
		done
		echo "== bench-exprans"; tail -n 16 "$out/bench-exprans.log"
		for c in exprans zstd; do
			echo "== stream-profile-$c"; tail -n 12 "$out/stream-profile-$c.log"
		done
		for f in "$out"/bench-gpu-*.log; do
			echo "== $(basename "$f" .log)"
			grep -E "^gpu_bench|cudaMemcpyAsync|free when|streaming|rounds' GB/s|all rounds|over the link|GPU tier|overlap" "$f"
		done ;;
	esac
	case $parts in *" ab "*)
		# Before and after in one run: the binaries of an earlier lane
		# build, copied by hand to .gpu-lane/base/ (tools/wspager,
		# bench/gpu_bench, lib/), against this lane's, taking turns:
		# streaming from the host tier, the cold path, a training step
		# and what an acquire costs its caller (bench/acquire_bench)
		# and the host decoders on one thread (bench/codec_bench)
		# (WSP_LANE_AB: which of "stream cold train acquire codec", all by
		# default; or "train-fb": full training's forward+backward alone at
		# batch 4 and 12, twice each; WSP_LANE_FB_BATCHES: other batches).
		local base=$lane/base ab=" ${WSP_LANE_AB:-stream cold train acquire codec} "
		if [ ! -x "$base/bench/gpu_bench" ] || [ ! -f "$base/lib/libwspager.so" ]; then
			echo "ab: no earlier build in $base"
		else
			mkdir -p "$work/gpu-exprans"
			case $ab in *" stream "*) for k in 1 2; do
				step ab-stream-base-$k 400 "$base/bench/gpu_bench" --codec exprans --dir "$work/gpu-exprans"
				step ab-stream-new-$k 400 "$lane/bench/gpu_bench" --codec exprans --dir "$work/gpu-exprans"
			done ;; esac
			case $ab in *" cold "*)
			step ab-cold-generate 300 wspack generate "$work/ab-cold-model" --layers 16 --hidden 4096 \
				--intermediate 11008 --vocab 32000 --shard-size 2G --force
			step ab-cold-convert 300 wspack convert "$work/ab-cold-model" -o "$work/ab-cold.wsp" --force
			rm -rf "$work/ab-cold-model"
			step ab-cold-base 300 "$base/tools/wspager" bench "$work/ab-cold.wsp" --host-cache 2G
			step ab-cold-new 300 "$lane/tools/wspager" bench "$work/ab-cold.wsp" --host-cache 2G ;; esac
			case $ab in *" acquire "*)
			# what an acquire costs its caller, on a pack of tiny layers
			step ab-acquire-generate 120 wspack generate "$work/ab-tiny-model" --layers 8 --hidden 64 \
				--intermediate 128 --vocab 256 --heads 4 --kv-heads 4 --force
			step ab-acquire-convert 120 wspack convert "$work/ab-tiny-model" -o "$work/ab-tiny.wsp" --force
			for k in 1 2; do
				[ -x "$base/bench/acquire_bench" ] &&
					step ab-acquire-base-$k 120 "$base/bench/acquire_bench" "$work/ab-tiny.wsp" --device 0
				step ab-acquire-new-$k 120 "$lane/bench/acquire_bench" "$work/ab-tiny.wsp" --device 0
			done ;; esac
			case $ab in *" codec "*) for k in 1 2; do
				[ -x "$base/bench/codec_bench" ] &&
					step ab-codec-base-$k 300 "$base/bench/codec_bench" --levels 1,3 --size 256 --threads 1
				step ab-codec-new-$k 300 "$lane/bench/codec_bench" --levels 1,3 --size 256 --threads 1
			done ;; esac
			local base_env=(env "WSPAGER_LIBRARY=$base/lib/libwspager.so" "LD_LIBRARY_PATH=$base/lib")
			case $ab in *" train "*)
			step ab-train-base 500 "${py_env[@]}" "${base_env[@]}" python3 "$top/bench/torch_train.py" --dir "$work/train"
			step ab-train-new 500 "${py_env[@]}" python3 "$top/bench/torch_train.py" --dir "$work/train" ;; esac
			# forward+backward of full training only, at a link-bound and
			# a compute-bound batch, the two builds taking turns
			# (WSP_LANE_FB_BASE=0: the new build alone, where this
			# tree's Python needs calls the base library lacks;
			# WSP_LANE_FB_RUNS: the runs' names, "1 2" by default;
			# WSP_LANE_FB_ARGS: more arguments, e.g. --accumulate)
			case $ab in *" train-fb "*) for b in ${WSP_LANE_FB_BATCHES:-4 12}; do for k in ${WSP_LANE_FB_RUNS:-1 2}; do
				[ "${WSP_LANE_FB_BASE:-1}" = 0 ] ||
				step ab-train-fb-b$b-base-$k 300 "${py_env[@]}" "${base_env[@]}" python3 \
					"$top/bench/torch_train.py" --dir "$work/train" --fwd-bwd-only --batch $b --reps 5 \
					${WSP_LANE_FB_ARGS:-}
				step ab-train-fb-b$b-new-$k 300 "${py_env[@]}" python3 \
					"$top/bench/torch_train.py" --dir "$work/train" --fwd-bwd-only --batch $b --reps 5 \
					${WSP_LANE_FB_ARGS:-}
				# WSP_LANE_FB_SHARES: the new build again, taking turns
				# with the others, with the share of gradients sent as
				# fp32 fixed at each of these
				for x in ${WSP_LANE_FB_SHARES:-}; do
					step ab-train-fb-b$b-share$x-$k 300 "${py_env[@]}" env \
						WSPAGER_GRAD_F32_SHARE=$x python3 "$top/bench/torch_train.py" \
						--dir "$work/train" --fwd-bwd-only --batch $b --reps 5
				done
			done; done ;; esac
			for f in "$out"/ab-stream-*.log; do
				echo "== $(basename "$f" .log)"; grep -E "streaming|rounds' GB/s|all rounds" "$f"
			done
			for f in "$out"/ab-acquire-base-*.log "$out"/ab-acquire-new-*.log; do
				[ -f "$f" ] && { echo "== $(basename "$f" .log)"; cat "$f"; }
			done
			for f in "$out"/ab-codec-*.log; do
				[ -f "$f" ] && { echo "== $(basename "$f" .log)"; grep -E "memcpy|exp |exprans|ex-top" "$f"; }
			done
			for f in ab-cold-base ab-cold-new; do
				[ -f "$out/$f.log" ] && { echo "== $f"; tail -n 12 "$out/$f.log"; }
			done
			for f in ab-train-base ab-train-new; do
				[ -f "$out/$f.log" ] && { echo "== $f"; grep -v "Loading weights" "$out/$f.log" | tail -n 16; }
			done
			for f in "$out"/ab-train-fb-*.log; do
				[ -f "$f" ] && { echo "== $(basename "$f" .log)"; grep -E "resident forward|paged forward|adding|last kernel|efficiency|GPU waited|chose|decod|accumulating" "$f"; }
			done
		fi ;;
	esac
	case $parts in *" cold-bench "*)
		# the cold path on an exprans pack larger than the host cache
		step cold-generate 300 wspack generate "$work/cold-model" --layers 32 --hidden 4096 \
			--intermediate 11008 --vocab 32000 --shard-size 2G --force
		step cold-convert 300 wspack convert "$work/cold-model" -o "$work/cold.wsp" --force
		rm -rf "$work/cold-model"
		step bench-cold 600 wspager bench "$work/cold.wsp" --host-cache 4G
		echo "== bench-cold"; tail -n 20 "$out/bench-cold.log" ;;
	esac
	case $parts in *" torch-bench "*)
		step bench-torch 540 "${py_env[@]}" python3 "$top/bench/torch_offload.py" --dir "$work/torch" \
			--json "$out/torch_offload.json"
		echo "== bench-torch"; tail -n 16 "$out/bench-torch.log" ;;
	esac
	case $parts in *" torch-bench "*|*" train-bench "*)
		step bench-train 500 "${py_env[@]}" python3 "$top/bench/torch_train.py" --dir "$work/train"
		step bench-train-hd 300 "${py_env[@]}" python3 "$top/bench/torch_train.py" --dir "$work/train" \
			--host-decode --fwd-bwd-only
		# compute >= 1.2x the transfer: the GPU's wait should be small;
		# with the GPU decoding and with the host decoding, each profiled
		# (WSP_LANE_TRAIN_HEAVY=0 leaves them out)
		if [ "${WSP_LANE_TRAIN_HEAVY:-1}" != 0 ]; then
			step bench-train-heavy 300 "${py_env[@]}" python3 "$top/bench/torch_train.py" \
				--dir "$work/train" --batch 12 --reps 5 --fwd-bwd-only --profile "$out"
			step bench-train-heavy-hd 300 "${py_env[@]}" python3 "$top/bench/torch_train.py" \
				--dir "$work/train" --batch 12 --reps 5 --fwd-bwd-only --host-decode --profile "$out"
		fi
		for f in bench-train bench-train-hd bench-train-heavy bench-train-heavy-hd; do
			[ -f "$out/$f.log" ] || continue
			echo "== $f"; grep -v "Loading weights" "$out/$f.log" | tail -n 24
		done ;;
	esac
	case $parts in *" decode-bench "*)
		# who decodes (wsp_who_decodes): the pager's own choice against
		# each fixed one, on LoRA over the paged model (no gradient of
		# the base leaves: the link carries weights only), link-bound
		# (batch 4) and compute-bound (WSP_LANE_DECODE_BATCH, 16); the
		# resident and paged steps taking turns, as the host's speed
		# drifts between runs here
		local heavy=${WSP_LANE_DECODE_BATCH:-16}
		for b in 4 $heavy; do
			for d in auto gpu host; do
				step bench-decode-b$b-$d 300 "${py_env[@]}" python3 "$top/bench/torch_train.py" \
					--dir "$work/train" --batch $b --reps 9 --lora --interleave --decode $d
			done
		done
		for b in 4 $heavy; do
			for d in auto gpu host; do
				echo "== bench-decode-b$b-$d"
				grep -aE "^decode|who decodes|LoRA|weights in" "$out/bench-decode-b$b-$d.log"
			done
		done ;;
	esac
	case $parts in *" small-bench "*)
		# the small layers (the final norm) kept on the device or paged,
		# taking turns, on LoRA at batch 4 (host-paced, 4 slots)
		for k in 1 2; do
			for v in kept paged; do
				local flag=
				[ $v = paged ] && flag=--no-keep-small
				step bench-small-$v-$k 300 "${py_env[@]}" python3 "$top/bench/torch_train.py" \
					--dir "$work/train" --batch 4 --reps 9 --lora --interleave --decode gpu $flag
			done
		done
		for f in "$out"/bench-small-*.log; do
			echo "== $(basename "$f" .log)"; grep -aE "LoRA|weights in" "$f"
		done ;;
	esac
	case $parts in *" torch-bench "*|*" lora-bench "*)
		step bench-lora 500 "${py_env[@]}" python3 "$top/bench/torch_train.py" --dir "$work/train" --lora
		echo "== bench-lora"; grep -v "Loading weights" "$out/bench-lora.log" | tail -n 8 ;;
	esac
	case $parts in *" ttft "*)
		# time to the first token, cold, beside transformers and Accelerate
		step bench-ttft 600 "${py_env[@]}" python3 "$top/bench/torch_ttft.py" --dir "$work/torch" \
			--json "$out/torch_ttft.json"
		echo "== bench-ttft"; grep -avE 'Loading|Writing|Packing' "$out/bench-ttft.log" | tail -n 10 ;;
	esac
	case $parts in *" torch-bench "*|*" torch-rss "*)
		step bench-torch-rss 400 "${py_env[@]}" python3 "$top/bench/torch_rss.py" --dir "$work/torch"
		echo "== bench-torch-rss"; tail -n 20 "$out/bench-torch-rss.log" ;;
	esac
	echo "== summary"
	cat "$summary"
}

lane_tests() {
	# The CUDA tests and the pager tests, then the CLI's GPU test.
	for t in "$lane"/tests/*; do
		local name=$(basename "$t")
		[ "$name" = stream ] && continue
		(cd "$work" && step "test-$name" 300 "$t")
	done
	(cd "$work" && step test-example-stream-gpu 300 "$lane/tests/stream" --gpu 0)
	step test-cli-gpu-run 300 env top_srcdir="$top" top_builddir="$lane" sh "$top/tests/cli/gpu-run.sh"
}

lane_python() {
	step py-api 300 "${py_env[@]}" sh "$top/tests/python/api.sh"
	step py-misuse-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_misuse.py" cuda'
	step py-weights-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_weights.py" cuda'
	step py-weights-cpu 300 "${py_env[@]}" sh "$top/tests/python/torch_weights.sh"
	step py-first-contact 300 "${py_env[@]}" sh "$top/tests/python/torch_first_contact.sh"
	# the wheel, installed with pip and no registry, nothing pointing at the clone
	rm -rf "$work/wheel" && mkdir -p "$work/wheel/scratch"
	step py-wheel 300 sh -c 'python3 -m pip install -q --no-index --no-deps --target "$1/site" "$2"/wspager-*.whl &&
		cd / && env -u WSPAGER_LIBRARY -u LD_LIBRARY_PATH PYTHONPATH="$1/site" python3 "$3" "$1/scratch"' \
		_ "$work/wheel" "$lane/wheel" "$top/tests/python/wheel_check.py"
	step py-offload-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_offload.py" cuda'
	step py-offload-cpu 300 "${py_env[@]}" sh "$top/tests/python/torch_offload.sh"
	step py-mismatch 300 "${py_env[@]}" sh "$top/tests/python/torch_mismatch.sh"
	step py-from-pretrained-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_from_pretrained.py" cuda'
	lane_py_families
	step py-multitask 300 "${py_env[@]}" sh "$top/tests/python/multitask.sh"
	step py-example 300 "${py_env[@]}" sh "$top/tests/python/example.sh"
	lane_py_train
	step py-adamw 300 "${py_env[@]}" sh "$top/tests/python/torch_adamw.sh"
	for f in py-offload-cuda py-offload-cpu; do
		echo "== $f"; grep -E 'torch|diff|failures' "$out/$f.log"
	done
}

lane_py_families() {
	step py-families-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_families.py" cuda'
	step py-families-cpu 300 "${py_env[@]}" sh "$top/tests/python/torch_families.sh"
	step py-frozen-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_frozen.py" cuda'
	step py-small-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_small.py" cuda'
	for f in py-families-cuda py-families-cpu py-frozen-cuda py-small-cuda; do
		echo "== $f"; grep -E 'torch|FAIL|Error|failures' "$out/$f.log"
	done
}

lane_py_train() {
	step py-lora-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_lora.py" cuda'
	step py-lora-cpu 300 "${py_env[@]}" sh "$top/tests/python/torch_lora.sh"
	step py-experts-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_train_experts.py" cuda'
	step py-grad-loop-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_grad_loop.py" cuda'
	step py-hf-trainer-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_hf_trainer.py" cuda'
	step py-train-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_train.py" cuda'
	step py-train-cpu 300 "${py_env[@]}" sh "$top/tests/python/torch_train.sh"
	step py-step-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_step_in_backward.py" cuda'
	step py-step-cpu 300 "${py_env[@]}" sh "$top/tests/python/torch_step_in_backward.sh"
	step py-bounded-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_train_bounded.py" cuda'
	step py-grad-f32-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_grad_f32.py" cuda'
	step py-grad-f32-cpu 300 "${py_env[@]}" sh "$top/tests/python/torch_grad_f32.sh"
	step py-grad-f16-cuda 300 "${py_env[@]}" sh -c '. "$top_srcdir/tests/python/lib.sh"; "$PY" "$HERE/test_grad_f16.py" cuda'
	step py-grad-f16-cpu 300 "${py_env[@]}" sh "$top/tests/python/torch_grad_f16.sh"
	for f in py-lora-cuda py-lora-cpu py-experts-cuda py-grad-loop-cuda py-hf-trainer-cuda py-train-cuda py-step-cuda py-step-cpu py-bounded-cuda py-grad-f32-cuda py-grad-f32-cpu py-grad-f16-cuda py-grad-f16-cpu; do
		echo "== $f"; grep -E 'torch|diff|failures|FAIL|Error|share' "$out/$f.log"
	done
}

lane_bench() {
	# A model larger than the host budget used below (~6.5 GB of bf16).
	step generate 300 wspack generate "$work/model" --layers "${WSP_LANE_LAYERS:-32}" --hidden 4096 \
		--intermediate 11008 --vocab 32000 --shard-size 2G --force
	step convert 300 wspack convert "$work/model" -o "$work/model.wsp" --force
	rm -rf "$work/model"
	step info 60 wspack info "$work/model.wsp"
	# 3. Benchmarks: each prints its ceilings and ratios.
	mkdir -p "$work/gpu"
	step bench-gpu 400 "$lane/bench/gpu_bench" --dir "$work/gpu"
	step bench-codec 300 "$lane/bench/codec_bench" --levels 1 --reps 3
	step bench-cache 400 "$lane/bench/cache_bench" --pack "$work/model.wsp" --rounds 3
	step bench-wspager 600 wspager bench "$work/model.wsp" --host-cache "${WSP_LANE_HOST_CACHE:-4G}"
	step run-trace 300 wspager run "$work/model.wsp" --host-cache "${WSP_LANE_HOST_CACHE:-4G}" \
		--passes 2 --trace-json "$out/trace.json"
	echo
	for f in bench-gpu bench-codec bench-cache bench-wspager run-trace; do
		[ -f "$out/$f.log" ] && { echo "== $f"; tail -n 22 "$out/$f.log"; }
	done
}

case "${1:-}" in
build) build ;;
pack) pack ;;
run) shift; run "$@" ;;
*) echo "usage: $0 build|pack|run" >&2; exit 2 ;;
esac
