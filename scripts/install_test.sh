#!/usr/bin/env bash
# The `install` test: installs build folder $1 into a temporary DESTDIR, then builds
# examples/quickstart.cc ($2) against the installed headers and library alone, through the
# installed pkg-config file, runs it, and runs the installed dynattn tool ($5 = 1 when built) with
# no library path set, which only its RPATH can make work. $3, $4: the build's prefix and libdir.
# $6 (optional): examples/c_api_example.c, built with the C compiler against the same files.
set -euo pipefail
build=$1 quickstart=$2 prefix=$3 libdir=$4 have_tool=$5 c_api_example=${6:-}
[[ $libdir = /* ]] || libdir=$prefix/$libdir
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --destdir "$tmp" --no-rebuild --quiet
export PKG_CONFIG_PATH=$tmp$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$tmp
flags=$(pkg-config --cflags --libs dynattn)
echo "pkg-config --cflags --libs dynattn: $flags"
# Outside the source tree, with nothing but what pkg-config says: a header that reaches into the
# repository (src/, cpu/) or needs Highway would not compile here.
cd "$tmp"
cp "$quickstart" quickstart.cc
# shellcheck disable=SC2086  # the flags are words
g++ -std=c++17 -o quickstart quickstart.cc $flags
LD_LIBRARY_PATH=$tmp$libdir ./quickstart
if [ -n "$c_api_example" ]; then
  cp "$c_api_example" c_api_example.c
  # shellcheck disable=SC2086  # the flags are words
  cc -std=c11 -o c_api_example c_api_example.c $flags
  LD_LIBRARY_PATH=$tmp$libdir ./c_api_example
fi
if [ "$have_tool" = 1 ]; then
  tool=$tmp$prefix/bin/dynattn
  env -u LD_LIBRARY_PATH "$tool" --version
  # The tool must use the installed library (through $ORIGIN), not the one in the build folder.
  env -u LD_LIBRARY_PATH ldd "$tool" | grep -F libdynattn.so | tee /dev/stderr | grep -qF "$tmp"
fi
echo "install: ok"
