#!/usr/bin/env bash
# Runs every meson test suite of build folder $1 and ends with the line "N passed, M failed"
# (a pytest file counts as the tests it ran).
# The counts are also left in $1/test-counts for .ci/run to add up, and the lines that say why
# tests failed in $1/failure-digest (scripts/failure_digest.py). A skipped suite (exit status
# 77: the gpu suite without a CUDA device) counts as neither; a line before the last says so.
set -uo pipefail
build=${1:-build}
log=$(mktemp)
meson test -C "$build" --print-errorlogs --num-processes 2 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
count() {  # the number on meson's summary line "$1:", 0 when there is none
  local n
  n=$(sed -n "s/^$1:[[:space:]]*\([0-9]*\).*/\1/p" "$log" | tail -n 1)
  echo "${n:-0}"
}
passed=$(( $(count Ok) + $(count 'Expected Fail') ))  # should_fail tests that failed pass
failed=$(( $(count Fail) + $(count Timeout) + $(count 'Unexpected Pass') ))
skipped=$(count Skipped)
# The same, with each pytest file counted as the tests it ran (scripts/count_tests.py).
if counts=$(python3 "$(dirname "$0")/count_tests.py" "$build/meson-logs/testlog.json" 2>/dev/null); then
  read -r passed failed skipped <<<"$counts"
fi
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then failed=1; fi  # meson itself failed
rm -f "$log"
echo "$passed $failed" > "$build/test-counts"
# Why the failed tests failed (their seeds with it), in a few lines: .ci/run prints it again last.
python3 "$(dirname "$0")/failure_digest.py" "$build/meson-logs/testlog.json" \
  > "$build/failure-digest" 2>/dev/null || true
cat "$build/failure-digest"
if [ "$skipped" -gt 0 ]; then echo "$skipped skipped (not counted: see the suites' logs)"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
