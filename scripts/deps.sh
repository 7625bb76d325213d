#!/bin/sh
# Install the Debian packages wspager builds with, if any is missing.
# Used by scripts/demo.sh and scripts/test.sh; safe to run repeatedly.
set -e
pkgs="build-essential autoconf automake libtool pkg-config autoconf-archive \
liburing-dev libzstd-dev libjansson-dev libxxhash-dev python3 python3-venv"
missing=
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "installing:$missing" >&2
if [ "$(id -u)" -eq 0 ]; then sudo=; else sudo=sudo; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
