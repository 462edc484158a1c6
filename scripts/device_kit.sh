#!/usr/bin/env bash
# Builds the device kit: what a machine with an NVIDIA GPU (and only its driver, glibc, libstdc++,
# python3 with PyTorch and the CUDA toolkit) needs to check libdynattn's CUDA module in one
# command, DIR/run.sh. See README.md, "Checking on a real GPU".
#
#   scripts/device_kit.sh [DIR]             build it (default DIR: device-kit/, git-ignored)
#   scripts/device_kit.sh --dry-run BUILD DIR
#       what `make test` runs (it cannot afford a second compile): configures the kit's build and
#       checks that it has every target the kit needs, then assembles DIR from the stand-ins that
#       BUILD (the test build) compiled under the same names, checks the kit's contents, library
#       closure and size, and runs DIR/run.sh, which must stop with 77 on a machine without a GPU.
#       Then it rehearses the whole of run.sh on the CUDA emulator in DIR-rehearsal (see below).
#
# The kit's build (build-device-kit/, or $DEVICE_KIT_BUILD) is separate from the test build: the
# gpu suite runs on the device (-Dgpu_suite=device), the CUDA runtime is linked statically, only
# sm_90 machine code plus its PTX is compiled, and nothing that needs oneDNN or Python is built.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi

dry_run=0
standins=""
if [ "${1:-}" = "--dry-run" ]; then
  dry_run=1
  standins="$(cd "$2" && pwd)"
  shift 2
fi
kit="${1:-$root/device-kit}"
build="${DEVICE_KIT_BUILD:-$root/build-device-kit}"
max_bytes=$((60 * 1024 * 1024))

# The kit: its binaries (build path -> name in bin/), the shared library, the scripts.
binaries=(tests/gpu_tests tools/dynattn bench/dynattn_device_bench)
scripts=(run.sh sdpa_peer.py summarize.py)
options=(-Dcuda=enabled -Dgpu_suite=device -Dgpu_runtime=static -Dgpu_archs=90
         -Dtests=enabled -Dtool=enabled -Dbench=disabled -Dpython=disabled
         -Demulator_tsan=disabled --buildtype=release)
# What the device machine has: glibc's libraries and the C++ runtime (lib/fallback carries this
# machine's C++ runtime in case the device's is older). libcuda.so comes with its driver.
system_libs='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s)\.so'

configure() {
  if [ -f "$build/build.ninja" ]; then
    meson configure "$build" "${options[@]}" >/dev/null
  else
    meson setup "$build" "$root" "${options[@]}" >/dev/null
  fi
  local targets
  targets="$(meson introspect --targets "$build" | python3 -c '
import json, os, sys
for t in json.load(sys.stdin):
    for f in t["filename"]:
        print(os.path.relpath(f, sys.argv[1]))' "$build")"
  for binary in "${binaries[@]}" src/libdynattn.so.0; do
    if ! grep -qx "$binary\(\.[0-9.]*\)\?" <<<"$targets"; then
      echo "device_kit: the kit's build has no target $binary" >&2
      exit 1
    fi
  done
  grep -q "cudart_static" "$build/build.ninja" || {
    echo "device_kit: the kit's build does not link the static CUDA runtime" >&2
    exit 1
  }
}

# Whether the kit's own build links library `soname` (libfoo.so.N: -lfoo or a path to libfoo.so).
kit_links() {
  local base="${1%%.so*}"
  grep -qE -- "(-l${base#lib}( |$)|/${base}\.so)" "$build/build.ninja"
}

# Copies the binaries (stripped), the shared library, every non-system library they need
# (following DT_NEEDED from each copied file) and the scripts. In a dry run a stand-in may need
# libraries the kit's build does not link (the test build's tool links oneDNN for `dynattn bench`,
# its gpu suite Boost.Context for the emulator): those are listed, not copied.
assemble() {
  local from="$1" file soname path
  rm -rf "$kit"
  mkdir -p "$kit/bin" "$kit/lib/fallback"
  for binary in "${binaries[@]}"; do cp -L "$from/$binary" "$kit/bin/"; done
  cp -L "$from/src/libdynattn.so.0.1.0" "$kit/lib/libdynattn.so.0"
  strip --strip-unneeded "$kit"/bin/* "$kit/lib/libdynattn.so.0"
  for script in "${scripts[@]}"; do cp "$root/scripts/device_kit/$script" "$kit/"; done
  chmod +x "$kit/run.sh"
  local queue=("$kit"/bin/* "$kit/lib/libdynattn.so.0")
  left_out=""
  while [ ${#queue[@]} -gt 0 ]; do
    file="${queue[0]}"
    queue=("${queue[@]:1}")
    for soname in $(readelf -d "$file" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      [[ "$soname" =~ $system_libs ]] && continue
      [ -f "$kit/lib/$soname" ] && continue
      if [ "$dry_run" -eq 1 ] && ! kit_links "$soname"; then
        [[ " $left_out " == *" $soname "* ]] || left_out+=" $soname"
        continue
      fi
      path="$(LD_LIBRARY_PATH="$kit/lib" ldd "$file" | awk -v so="$soname" '$1 == so {print $3}')"
      if [ ! -f "$path" ]; then
        echo "device_kit: $(basename "$file") needs $soname, which is not on this machine" >&2
        exit 1
      fi
      cp -L "$path" "$kit/lib/$soname"
      queue+=("$kit/lib/$soname")
    done
  done
  [ -z "$left_out" ] || echo "device_kit: stand-ins need what the kit's build does not link:$left_out"
  for soname in libstdc++.so.6 libgcc_s.so.1; do
    cp -L "$(gcc -print-file-name="$soname")" "$kit/lib/fallback/$soname"
  done
  write_manifest
}

# The newest symbol version each binary needs from glibc and from the C++ runtime.
newest_version() {  # newest_version PREFIX FILE...
  objdump -T "${@:2}" 2>/dev/null | grep -o "$1_[0-9][0-9.]*" | sort -uV | tail -n 1
}

write_manifest() {
  {
    echo "libdynattn $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)," \
      "built $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME")" \
      "$([ "$dry_run" -eq 1 ] && echo "(DRY RUN: stand-ins from the test build)")"
    echo "build options: ${options[*]}"
    echo "needs: $(newest_version GLIBC "$kit"/bin/* "$kit"/lib/*.so*)," \
      "$(newest_version GLIBCXX "$kit"/bin/* "$kit"/lib/*.so*)"
    echo "files:"
    (cd "$kit" && find . -type f ! -name MANIFEST.txt | sort | xargs stat -c '  %n %s')
  } > "$kit/MANIFEST.txt"
}

# Every file the kit must have, nothing resolved outside it but system libraries, under 60 MiB.
verify() {
  local binary missing bytes
  for binary in "${binaries[@]}"; do
    [ -x "$kit/bin/$(basename "$binary")" ] || { echo "device_kit: bin/$(basename "$binary") missing" >&2; exit 1; }
  done
  for script in "${scripts[@]}" MANIFEST.txt lib/libdynattn.so.0; do
    [ -f "$kit/$script" ] || { echo "device_kit: $script missing" >&2; exit 1; }
  done
  local soname
  for binary in "$kit"/bin/* "$kit"/lib/*.so*; do
    for soname in $(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      [[ "$soname" =~ $system_libs || -f "$kit/lib/$soname" || " $left_out " == *" $soname "* ]] &&
        continue
      echo "device_kit: $(basename "$binary") needs $soname, which the kit does not carry" >&2
      exit 1
    done
  done
  if ls "$kit/lib" | grep -q libdnnl; then
    echo "device_kit: the kit carries oneDNN, which the device check does not need" >&2
    exit 1
  fi
  bytes="$(du -sb "$kit" | cut -f1)"
  if [ "$bytes" -ge "$max_bytes" ]; then
    echo "device_kit: the kit takes $bytes bytes, over 60 MiB" >&2
    exit 1
  fi
  echo "device_kit: $kit: $(find "$kit" -type f | wc -l) files, $((bytes / 1024 / 1024)) MiB"
}

configure
if [ "$dry_run" -eq 0 ]; then
  ninja -C "$build" "${binaries[@]}" src/libdynattn.so.0.1.0
  assemble "$build"
  verify
  echo "device_kit: run it on a GPU machine as $kit/run.sh (summary in \$OUT or $kit/out)"
  exit 0
fi

assemble "$standins"
verify
if nvidia-smi -L >/dev/null 2>&1; then
  echo "device_kit: dry run on a machine with a GPU: run.sh is not run here"
  exit 0
fi
status=0
OUT="$kit/out" "$kit/run.sh" > "$kit/dry-run.log" 2>&1 || status=$?
if [ "$status" -ne 77 ] || ! grep -q '"status": "no_gpu"' "$kit/out/summary.json" ||
   ! grep -q 'libraries.pass' "$kit/out/checks.tsv"; then
  echo "device_kit: run.sh without a GPU exited $status (expected 77 after its library check):" >&2
  cat "$kit/dry-run.log" >&2
  exit 1
fi
echo "device_kit: run.sh resolved every library and stopped with 77 (no GPU)"

# The rehearsal: the whole of run.sh on the CUDA emulator. The stand-ins' gpu suite already runs
# there, the emulated timing program replaces the device one, and two scripts stand in for
# nvidia-smi and compute-sanitizer (which runs the program as it is). Every check runs two cases
# of the gpu suite on the reduced matrix and the timings tiny steps, so that it fits a test run
# (the whole suite runs on the emulator in the gpu tests beside it; the checks get four times the
# device's timeouts: five emulated runs share two cores with the other tests); it proves what the
# dry run above cannot: the parallel checks, their logs, the timings, the peer and the summary.
emulated_bench="$standins/bench/dynattn_device_bench_emulated"
if [ ! -x "$emulated_bench" ]; then
  echo "device_kit: no emulated timing program in $standins: no rehearsal"
  exit 0
fi
rehearsal="$kit-rehearsal"
rm -rf "$rehearsal"
cp -r "$kit" "$rehearsal"
rm -rf "$rehearsal/out"
cp -L "$emulated_bench" "$rehearsal/bin/dynattn_device_bench"
mkdir -p "$rehearsal/stand-ins"
printf '#!/bin/sh\necho "GPU 0: the CUDA emulator (device kit rehearsal)"\n' \
  > "$rehearsal/stand-ins/nvidia-smi"
printf '#!/bin/sh\nwhile [ $# -gt 0 ]; do case "$1" in --*) shift 2 ;; *) break ;; esac; done\nexec "$@"\n' \
  > "$rehearsal/stand-ins/compute-sanitizer"
chmod +x "$rehearsal/stand-ins/"*
status=0
PATH="$rehearsal/stand-ins:$PATH" DYNATTN_GPU_REDUCED=1 DYNATTN_KIT_TIMEOUT_SCALE=4 \
  DYNATTN_KIT_SUITE_FILTER="key_value_cache on the device*,a launch the device refuses*" \
  OUT="$rehearsal/out" \
  DYNATTN_KIT_BENCH_ARGS="--small --iters 2 --warmup 1" "$rehearsal/run.sh" \
  > "$rehearsal/rehearsal.log" 2>&1 || status=$?
checks_passed="$(grep -cE $'^(libraries|gpu_suite_seed[12]|sanitizer_(mem|race|sync)check|timings)\tpass\t' \
  "$rehearsal/out/checks.tsv")"
if [ "$status" -ne 0 ] || [ "$checks_passed" -ne 7 ] ||
   ! grep -q '"status": "passed"' "$rehearsal/out/summary.json"; then
  echo "device_kit: the rehearsal of run.sh on the CUDA emulator exited $status, $checks_passed" \
    "of 7 checks passed:" >&2
  cat "$rehearsal/rehearsal.log" >&2
  exit 1
fi
echo "device_kit: dry run passed: run.sh stops with 77 without a GPU, and its rehearsal on the" \
  "CUDA emulator passed every check"
