#!/usr/bin/env bash
# Compiles the CUDA kernels (cuda/*.cu) for sm_90 with `ptxas -v` and fails when a kernel (an
# entry function) spills registers to local memory. Prints each kernel's registers and spills.
#   scripts/check_spills.sh [NVCC] [EXTRA_NVCC_FLAGS...]
# (the meson test nvcc_spills runs it; nvcc_spills_detects runs it with -maxrregcount=16, which
# forces spills, and expects it to fail, so the check itself is known to work)
set -uo pipefail
cd "$(dirname "$0")/.."
nvcc=${1:-nvcc}
shift || true
log=$(mktemp)
objects=$(mktemp -d)
trap 'rm -rf "$log" "$objects"' EXIT
for source in cuda/attention.cu cuda/cache_io.cu; do
  if ! "$nvcc" -std=c++17 -I. -Iinclude -gencode arch=compute_90,code=sm_90 -Xptxas -v "$@" \
      -c "$source" -o "$objects/$(basename "$source").o" >>"$log" 2>&1; then
    cat "$log"
    echo "check_spills: nvcc failed on $source"
    exit 1
  fi
done
# ptxas prints, per kernel: "Compiling entry function 'NAME'", "Function properties for NAME"
# (also for any device function it calls), "N bytes stack frame, S bytes spill stores, L bytes
# spill loads", then "Used R registers".
awk '
  /Compiling entry function/ { match($0, /'"'"'[^'"'"']+'"'"'/); name = substr($0, RSTART + 1, RLENGTH - 2); entry = 1; next }
  /Function properties for/ { entry = ($NF == name); next }
  entry && /spill stores/ { stores = $5; loads = $9 }
  entry && /Used [0-9]+ registers/ {
    cmd = "c++filt " name; cmd | getline pretty; close(cmd)
    sub(/\(dynattn::internal::.*$/, "", pretty); sub(/^void /, "", pretty)
    sub(/^dynattn::gpu::\(anonymous namespace\)::/, "", pretty)
    printf "%-40s %4d registers, %s B spill stores, %s B spill loads\n", pretty, $5, stores, loads
    if (stores + 0 > 0 || loads + 0 > 0) spilled++
    kernels++; entry = 0
  }
  END {
    if (kernels == 0) { print "check_spills: no kernel found in the ptxas output"; exit 1 }
    if (spilled > 0) { printf "check_spills: %d of %d kernels spill on sm_90\n", spilled, kernels; exit 1 }
    printf "check_spills: none of %d kernels spills on sm_90\n", kernels
  }' "$log"
