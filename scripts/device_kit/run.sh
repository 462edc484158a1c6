#!/usr/bin/env bash
# The device kit's one command (built by scripts/device_kit.sh): checks libdynattn's CUDA module
# on this machine's GPU. Needs only the driver, glibc, libstdc++, python3 (PyTorch for the peer
# timings) and the CUDA toolkit's compute-sanitizer; everything else is in the kit.
#
#   1. ldd of every kit binary (what is missing is printed);
#   2. nvidia-smi and the device's properties, driver and runtime versions;
#   3. at once: the gpu suite (the golden matrix and the feature cases, cache bytes equal to the
#      CPU's, outputs and LSE within tolerance of the float64 reference) with two seeds, and
#      compute-sanitizer memcheck, racecheck and synccheck over the reduced matrix;
#   4. alone on the device: timings (CUDA events, median of 20) and PyTorch's SDPA on the same
#      shapes.
# Writes run.log, the per-check logs and summary.json to $OUT when set, else to <kit>/out.
# Exit: 0 when every check holds; 77 when there is no GPU (nothing else runs); 1 otherwise.
# Ends within about 6 minutes on an H100 (each step has a timeout).
set -uo pipefail
kit="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$kit/out}"
mkdir -p "$out"
exec > >(tee "$out/run.log") 2>&1
export LD_LIBRARY_PATH="$kit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
: > "$out/checks.tsv"
cp "$kit/MANIFEST.txt" "$out/kit.txt" 2>/dev/null
failed=0

record() {  # record NAME RESULT SECONDS DETAIL
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$out/checks.tsv"
  if [ "$2" = fail ]; then failed=1; fi
}

finish() {  # finish EXIT_STATUS WORD
  python3 "$kit/summarize.py" "$out" "$2" || echo "run.sh: summarize.py failed"
  exit "$1"
}

echo "== libdynattn device kit: $(head -n 1 "$kit/MANIFEST.txt" 2>/dev/null) on $(hostname)"

# 1. Libraries.
echo "== ldd of every kit binary (LD_LIBRARY_PATH=$kit/lib)"
missing=""
for binary in "$kit"/bin/* "$kit"/lib/*.so*; do
  lines="$(ldd "$binary" 2>&1 | grep -E 'not found|version .* not found')"
  [ -n "$lines" ] && missing+="$(basename "$binary"): $lines"$'\n'
done
if [ -n "$missing" ] && [ -d "$kit/lib/fallback" ]; then
  # An older libstdc++ than the build machine's: the kit carries the build machine's.
  echo "missing with the system's C++ runtime, retrying with the kit's lib/fallback:"
  echo "$missing"
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$kit/lib/fallback"
  missing=""
  for binary in "$kit"/bin/* "$kit"/lib/*.so*; do
    lines="$(ldd "$binary" 2>&1 | grep -E 'not found')"
    [ -n "$lines" ] && missing+="$(basename "$binary"): $lines"$'\n'
  done
fi
if [ -n "$missing" ]; then
  echo "MISSING:"
  echo "$missing"
  record libraries fail 0 "$(echo "$missing" | tr '\n\t' '  ')"
  finish 1 failed
fi
record libraries pass 0 "every kit binary resolves its libraries"

# 2. The device.
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "run.sh: no NVIDIA GPU on this machine (nvidia-smi absent or sees no device): nothing to check"
  record gpu skipped 0 "no GPU"
  finish 77 no_gpu
fi
echo "== nvidia-smi"
nvidia-smi
"$kit/bin/dynattn_device_bench" info > "$out/device.json"
status=$?
cat "$out/device.json"
if [ "$status" -eq 77 ]; then
  echo "run.sh: nvidia-smi lists a GPU but the CUDA runtime sees none"
  record gpu skipped 0 "no device for the CUDA runtime"
  finish 77 no_gpu
fi

# 3. Correctness, in parallel (each a process of its own; the CPU side is single-threaded).
seed1="${DYNATTN_KIT_SEED:-$(date +%s)}"
seed2=$((seed1 + 1))
sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
checks=()  # the background checks' process ids
# DYNATTN_KIT_TIMEOUT_SCALE multiplies each check's timeout: the rehearsal on the CUDA emulator
# (scripts/device_kit.sh --dry-run) runs the five checks on a loaded CPU, not on a device.
check() {  # check NAME TIMEOUT COMMAND...: runs in the background, logs to NAME.log
  local name="$1" limit=$(($2 * ${DYNATTN_KIT_TIMEOUT_SCALE:-1}))
  shift 2
  (
    start=$SECONDS
    timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
    echo "$? $((SECONDS - start))" > "$out/$name.status"
  ) &
  checks+=($!)
}
# DYNATTN_KIT_SUITE_FILTER: a doctest test-case filter (the rehearsal runs two cases: it proves
# the plumbing; the whole gpu suite runs on the emulator in the test suites beside it).
suite=("$kit/bin/gpu_tests" -ts=gpu ${DYNATTN_KIT_SUITE_FILTER:+"-tc=$DYNATTN_KIT_SUITE_FILTER"})
echo "== gpu suite (seeds $seed1, $seed2) and compute-sanitizer (reduced matrix), in parallel"
DYNATTN_TEST_SEED=$seed1 check gpu_suite_seed1 150 "${suite[@]}"
DYNATTN_TEST_SEED=$seed2 check gpu_suite_seed2 150 "${suite[@]}"
sanitizer_checks=()
if [ -x "$sanitizer" ]; then
  for tool in memcheck racecheck synccheck; do
    DYNATTN_GPU_REDUCED=1 DYNATTN_TEST_SEED=$seed1 check "sanitizer_$tool" 150 \
      "$sanitizer" --tool "$tool" --error-exitcode 86 "${suite[@]}"
    sanitizer_checks+=("sanitizer_$tool")
  done
else
  record compute_sanitizer fail 0 "compute-sanitizer not found"
fi
wait "${checks[@]}"  # not a bare wait: bash 5.1+ would wait for the log's tee as well
for name in gpu_suite_seed1 gpu_suite_seed2 "${sanitizer_checks[@]}"; do
  read -r code seconds < "$out/$name.status"
  echo "== $name: exit $code after $seconds s (log: $name.log)"
  tail -n 25 "$out/$name.log"
  summary_line="$(grep -E '\[doctest\] (test cases|assertions)' "$out/$name.log" | tr '\n|' ' ,')"
  case "$code" in
    0) record "$name" pass "$seconds" "$summary_line" ;;
    86) record "$name" fail "$seconds" "compute-sanitizer reported errors" ;;
    124 | 137) record "$name" fail "$seconds" "timed out" ;;
    *) record "$name" fail "$seconds" "exit $code; $summary_line" ;;
  esac
done

# 4. Speed, alone on the device.
echo "== timings (CUDA events, median of 20 after 5 warm-up calls)"
start=$SECONDS
# DYNATTN_KIT_BENCH_ARGS: extra flags (--small when run.sh itself is tested on the emulator).
# shellcheck disable=SC2086
timeout -k 10 100 "$kit/bin/dynattn_device_bench" timings ${DYNATTN_KIT_BENCH_ARGS:-} \
  > "$out/timings.json"
code=$?
cat "$out/timings.json"
if [ "$code" -eq 0 ]; then
  record timings pass $((SECONDS - start)) "every step ran and agrees with the CPU library"
else
  record timings fail $((SECONDS - start)) "exit $code"
fi
echo "== PyTorch scaled_dot_product_attention on the same shapes"
start=$SECONDS
timeout -k 10 60 python3 "$kit/sdpa_peer.py" > "$out/peer.json"
code=$?
cat "$out/peer.json"
case "$code" in
  0) record torch_sdpa pass $((SECONDS - start)) "peer timed" ;;
  77) record torch_sdpa skipped $((SECONDS - start)) "no PyTorch with CUDA" ;;
  *) record torch_sdpa fail $((SECONDS - start)) "exit $code" ;;
esac

if [ "$failed" -eq 0 ]; then finish 0 passed; else finish 1 failed; fi
