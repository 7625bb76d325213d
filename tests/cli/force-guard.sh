#!/bin/sh
# wspack's --force replaces only a previous output of the same command, and
# no output may be, lie inside or contain an input, with or without --force.
# Every refusal comes before any work and leaves everything as it was.
. "${top_srcdir:-$(dirname "$0")/../..}/tests/cli/lib.sh"
cd "$TMP" || fail "cd"
mkdir hf notes
"$WSPACK" generate --layers 2 --hidden 128 --intermediate 256 --vocab 256 \
	hf/model.safetensors >/dev/null 2>&1 || fail "generate"
echo '{"model_type": "llama"}' >hf/config.json
mkdir hf/sub && echo tok >hf/sub/tokenizer.json
echo mine >notes/todo.txt
echo text >file.txt
snapshot() { find hf notes file.txt -type f | sort | xargs cat | cksum; }
before=$(snapshot)
refused() {   # refused WHY CMD...: exit 1, message, nothing changed
	why=$1; shift
	rc=0
	"$@" >out 2>err || rc=$?
	[ $rc = 1 ] || { cat err >&2; fail "$why: exit $rc, want 1"; }
	[ -s err ] || fail "$why: no message"
	[ "$(snapshot)" = "$before" ] || fail "$why: files changed"
	ls -a | grep -q '\.tmp-' && fail "$why: temporary left behind"
	return 0
}
refused "convert onto its input" "$WSPACK" convert hf -o hf --force
grep -q "is the input" err || fail "convert onto its input: message"
refused "convert into its input" "$WSPACK" convert hf -o hf/pack.wsp --force
grep -q "inside the input" err || fail "convert into its input: message"
refused "convert over a file input's directory" "$WSPACK" convert hf/model.safetensors -o hf --force
grep -q "contains the input" err || fail "output containing an input: message"
refused "convert onto an unrelated tree" "$WSPACK" convert hf -o notes --force
grep -q '"todo.txt"' err || fail "unexpected entries not named"
refused "convert onto a regular file" "$WSPACK" convert hf -o file.txt --force
refused "convert to .." "$WSPACK" convert hf -o .. --force
refused "convert to ." "$WSPACK" convert hf -o . --force
# a real previous output is replaced; an empty directory too
"$WSPACK" convert hf -o m.wsp >/dev/null 2>&1 || fail "convert"
"$WSPACK" convert hf -o m.wsp --force >/dev/null 2>err || { cat err >&2; fail "replace a pack"; }
mkdir empty && "$WSPACK" convert hf -o empty --force >/dev/null 2>err ||
	{ cat err >&2; fail "replace an empty directory"; }
# a pack directory with a foreign file is not ours to remove
echo x >m.wsp/README && before=$(snapshot; cat m.wsp/README)
snapshot_old=$before
snapshot() { find hf notes file.txt -type f | sort | xargs cat | cksum; cat m.wsp/README; }
refused "convert onto a pack holding a foreign file" "$WSPACK" convert hf -o m.wsp --force
rm m.wsp/README
snapshot() { find hf notes file.txt -type f | sort | xargs cat | cksum; }
before=$(snapshot)
# a directory of shard-looking names without a valid manifest is refused
mkdir fake && echo x >fake/manifest.wspm
refused "convert onto a fake pack" "$WSPACK" convert hf -o fake --force
# unpack
refused "unpack onto its pack" "$WSPACK" unpack m.wsp -o m.wsp --force
refused "unpack into its pack" "$WSPACK" unpack m.wsp -o m.wsp/out --force
refused "unpack onto a checkpoint with config" "$WSPACK" unpack m.wsp -o hf --force
grep -q '"config.json"' err || fail "unpack: unexpected entries not named"
refused "unpack to .." "$WSPACK" unpack m.wsp -o .. --force
"$WSPACK" unpack m.wsp -o restored >/dev/null 2>&1 || fail "unpack"
"$WSPACK" unpack m.wsp -o restored --force >/dev/null 2>err || { cat err >&2; fail "replace an unpack"; }
cmp restored/model.safetensors hf/model.safetensors || fail "unpack output differs"
# generate
refused "generate over a foreign file" "$WSPACK" generate --layers 1 --hidden 128 \
	--intermediate 256 --vocab 256 file.txt --force
"$WSPACK" generate --layers 1 --hidden 128 --intermediate 256 --vocab 256 g.safetensors \
	>/dev/null 2>&1 || fail "generate"
"$WSPACK" generate --layers 1 --hidden 128 --intermediate 256 --vocab 256 g.safetensors \
	--force >/dev/null 2>err || { cat err >&2; fail "generate --force over its own output"; }
exit 0
