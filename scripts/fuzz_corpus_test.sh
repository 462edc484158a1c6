#!/usr/bin/env bash
# The fuzz_corpus test: every `dynattn golden` case, as a fuzz input, through the fuzz harness
# (fuzz/harness.h: refused calls touch nothing, accepted ones write every output), plus the
# committed regression inputs of fuzz/corpus/ (inputs that once broke a rule).
# Usage: fuzz_corpus_test.sh DYNATTN FUZZ_SEED_CORPUS FUZZ_REPLAY REGRESSION_DIR
set -euo pipefail
dynattn=$1 seed_corpus=$2 replay=$3 regressions=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$dynattn" golden --outputs "$work/golden" >/dev/null
"$seed_corpus" "$work/golden" "$work/corpus"
if [ -d "$regressions" ]; then
  "$replay" "$work/corpus" "$regressions"
else
  "$replay" "$work/corpus"
fi
