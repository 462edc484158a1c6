#!/bin/sh
# Usage: check_readme_block.sh README FILE NAME [excerpt]
# Passes when README shows FILE exactly: the fenced code block right after the line
# "<!-- NAME -->" must equal the file, so that the README's example is the one the tests run.
# With "excerpt", the block must equal the lines of FILE between "// --- README example begins
# ---" and "// --- README example ends ---", less their two-space indentation.
set -eu
readme=$1
file=$2
name=$3
block=$(mktemp)
shown=$(mktemp)
trap 'rm -f "$block" "$shown"' EXIT
if [ "${4:-}" = excerpt ]; then
  awk '/--- README example ends ---/ { exit }
       state == 1 { sub(/^  /, ""); print }
       /--- README example begins ---/ { state = 1 }' "$file" > "$shown"
  file=$shown
fi
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
