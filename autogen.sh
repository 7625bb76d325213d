#!/bin/sh
# Generate configure and Makefile.in from a git checkout.
set -e
cd "$(dirname "$0")"
mkdir -p m4 build-aux
exec autoreconf --install --force
