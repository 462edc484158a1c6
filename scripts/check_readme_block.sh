#!/bin/sh
# Usage: check_readme_block.sh README FILE NAME
# Passes when README shows FILE exactly: the fenced code block right after the line
# "<!-- NAME -->" must equal the file, so that the README's example is the one the tests run.
set -eu
readme=$1
file=$2
name=$3
block=$(mktemp)
trap 'rm -f "$block"' EXIT
awk -v marker="<!-- $name -->" '
  $0 == marker { state = 1; next }
  state == 1 && /^```/ { state = 2; next }
  state == 2 && /^```$/ { exit }
  state == 2 { print }' "$readme" > "$block"
if ! [ -s "$block" ]; then
  echo "$readme: no code block after <!-- $name -->" >&2
  exit 1
fi
if ! diff -u "$file" "$block"; then
  echo "$readme: the block after <!-- $name --> differs from $file (diff above)" >&2
  exit 1
fi
echo "$readme shows $name exactly"
