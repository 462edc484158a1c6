#!/usr/bin/env bash
# Installs libdynattn's build and test dependencies from Debian 12's archive. As root it runs
# apt-get itself; otherwise it prints the exact apt-get line to run and stops.
set -euo pipefail

packages=(
  g++ meson ninja-build pkg-config cmake  # compiler and build (meson finds doctest via CMake)
  libhwy-dev                        # Highway: SIMD kernels with dynamic dispatch
  libtbb-dev                        # oneTBB: parallelism over work items
  doctest-dev                       # doctest: the test suites
  libcli11-dev                      # CLI11: the dynattn command line
  libdnnl-dev libeigen3-dev         # oneDNN and Eigen: the baselines of `dynattn bench`
  nlohmann-json3-dev                # nlohmann/json: the JSON report of `dynattn bench`
  libboost-context-dev              # Boost.Context: fibers of the CUDA emulator (gpu suite only)
  clang libclang-rt-14-dev          # clang, its sanitizers and libFuzzer: make test-sanitize, make fuzz
  python3-dev pybind11-dev          # the dynattn Python package (python/): headers, bindings
  python3-numpy python3-torch       # its tensors (NumPy arrays, PyTorch tensors) and tests
  python3-pytest python3-mesonpy    # its tests; `pip install .` (pyproject.toml, meson-python)
  python3-sentencepiece             # the serving example's tokenizer (examples/serve/)
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$package")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: missing Debian packages; run this, then retry:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
