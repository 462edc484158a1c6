#!/usr/bin/env bash
# `make fuzz`: runs the libFuzzer target for a bounded time from a seed corpus made of the golden
# cases, under ASan + UBSan. Usage: fuzz.sh BUILD FUZZ_BUILD SECONDS [JOBS]
# BUILD is the release build (its dynattn golden and fuzz_seed_corpus make the seeds); the
# fuzzer's own corpus grows in FUZZ_BUILD/fuzz-corpus and is kept between runs. Any input that
# breaks the contract is saved as FUZZ_BUILD/crash-* (replay it with fuzz_replay or op_fuzzer).
# Leaves "1 0" (passed) or "0 1" in FUZZ_BUILD/fuzz-counts for .ci/run (FUZZ_BUILD may be a
# build whose suites leave their own test-counts).
set -uo pipefail
build=$1 fuzz_build=$2 seconds=$3 jobs=${4:-1}
seeds="$fuzz_build/fuzz-seeds" corpus="$fuzz_build/fuzz-corpus"
echo "0 1" > "$fuzz_build/fuzz-counts"
if [ ! -d "$seeds" ]; then
  work=$(mktemp -d)
  "$build/tools/dynattn" golden --outputs "$work/golden" >/dev/null &&
    "$build/tools/fuzz_seed_corpus" "$work/golden" "$seeds" || { rm -rf "$work"; exit 1; }
  rm -rf "$work"
fi
mkdir -p "$corpus"
regressions=()
[ -d fuzz/corpus ] && regressions=(fuzz/corpus)
log="$fuzz_build/fuzz.log"
parallel=()  # libFuzzer's -jobs writes one fuzz-N.log per job in the working directory
[ "$jobs" -gt 1 ] && parallel=(-jobs="$jobs" -workers="$jobs")
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  "$fuzz_build/fuzz/op_fuzzer" -max_total_time="$seconds" -timeout=60 -rss_limit_mb=4096 \
  -max_len=4096 -print_final_stats=1 -artifact_prefix="$fuzz_build/" "${parallel[@]}" \
  "$corpus" "$seeds" "${regressions[@]}" >"$log" 2>&1
status=$?
if [ "$jobs" -gt 1 ]; then cat fuzz-*.log >>"$log" 2>/dev/null; rm -f fuzz-*.log; fi
grep -E "^stat::number_of_executed_units|Done [0-9]+ runs|ERROR|SUMMARY|contract broken" "$log" | tail -n 8
if [ "$status" -eq 0 ]; then
  echo "1 0" > "$fuzz_build/fuzz-counts"
  echo "fuzz: no contract broken in ${seconds}s"
else
  echo "fuzz: FAILED (exit $status), see $log and $fuzz_build/crash-*"
fi
exit "$status"
