#!/bin/sh
# wspack convert killed with SIGKILL at random points never leaves a pack
# that looks valid but is not, and the next run succeeds and removes the
# temporaries the killed runs left.
set -u
bin=$top_builddir/tools
dir=$(mktemp -d "${TMPDIR:-/tmp}/wsp-kill-XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$bin/wspack" generate "$dir/src" --layers 8 --hidden 512 --intermediate 1408 \
	--vocab 8192 --shard-size 16M >/dev/null 2>&1 || { echo "generate failed"; exit 1; }
# How long a whole convert takes here, so kills spread over all of it,
# the final fsync and rename included.
start=$(date +%s.%N)
"$bin/wspack" convert "$dir/src" -o "$dir/probe.wsp" --threads 2 >/dev/null 2>&1 || { echo "convert failed"; exit 1; }
span=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", (b - a) * 1.2 }')
rm -rf "$dir/probe.wsp"
echo "a convert takes about ${span}s / 1.2; killing at random points in [0, ${span}s]"
seed=${WSP_KILL_SEED:-$$}
i=0
while [ $i -lt 12 ]; do
	rm -rf "$dir/out.wsp"
	"$bin/wspack" convert "$dir/src" -o "$dir/out.wsp" --threads 2 >/dev/null 2>&1 &
	pid=$!
	delay=$(awk -v s="$seed" -v i="$i" -v span="$span" 'BEGIN { srand(s + i); printf "%.3f", rand() * span }')
	sleep "$delay"
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	if [ -e "$dir/out.wsp" ]; then
		# it finished before the kill, or the rename happened: it must verify
		if ! "$bin/wspack" verify "$dir/out.wsp" >/dev/null 2>&1; then
			echo "after a kill at ${delay}s: out.wsp exists but does not verify"
			exit 1
		fi
		echo "kill at ${delay}s: complete pack, verified"
	else
		echo "kill at ${delay}s: no pack left ($(ls "$dir" | grep -c tmp) temporary)"
	fi
	i=$((i + 1))
done
ntmp() { ls "$dir" | grep -c '^out\.wsp\.tmp-'; }
nlocked() { ls -d "$dir"/out.wsp.tmp-*/.lock 2>/dev/null | wc -l; }
# One kill that surely leaves a temporary with its lock: once the lock file
# is there.  (A lockless temporary, from a kill between mkdtemp and the
# lock, does not count: no cleanup may take it.)
i=0
while [ "$(nlocked)" -eq 0 ] && [ $i -lt 5 ]; do
	rm -rf "$dir/out.wsp"
	"$bin/wspack" convert "$dir/src" -o "$dir/out.wsp" --threads 2 >/dev/null 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null && ! ls "$dir"/out.wsp.tmp-*/.lock >/dev/null 2>&1; do
		sleep 0.01
	done
	kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	i=$((i + 1))
done
rm -rf "$dir/out.wsp"
# A kill in the microseconds between mkdtemp and the lock file leaves a
# temporary that no cleanup may take for a dead one: a live writer's looks
# the same.  Counted apart, so that the test says so instead of failing.
before=$(nlocked)
lockless=$(($(ntmp) - before))
echo "temporaries before the final convert: $before (and $lockless without a lock file)"
[ "$before" -ge 1 ] || { echo "no kill left a temporary to clean up"; exit 1; }
"$bin/wspack" convert "$dir/src" -o "$dir/out.wsp" >/dev/null 2>"$dir/notes" ||
	{ cat "$dir/notes"; echo "next run failed"; exit 1; }
after=$(ntmp)
echo "temporaries after it: $after"
grep 'note:' "$dir/notes"
[ "$after" -eq "$lockless" ] && [ "$(nlocked)" -eq 0 ] ||
	{ ls -a "$dir" "$dir"/out.wsp.tmp-*; echo "temporaries left after the final convert"; exit 1; }
[ "$(grep -c 'note: removed the temporary .*/out\.wsp\.tmp-.* left by an interrupted run' "$dir/notes")" -eq "$before" ] ||
	{ echo "the notes do not name each temporary removed"; exit 1; }
"$bin/wspack" verify "$dir/out.wsp" >/dev/null 2>&1 || { echo "next run's pack does not verify"; exit 1; }
[ ! -e "$dir/out.wsp/.lock" ] || { echo "the pack holds the writer's lock file"; exit 1; }
echo "final convert after the kills: verified"
