#!/bin/sh
# Usage: check_readme_block.sh README FILE NAME [excerpt[=PART]]
# Passes when README (any Markdown page) shows FILE exactly: the fenced code block right after
# the line "<!-- NAME -->" must equal the file, so that the page's example is the one the tests
# run. With "excerpt", the block must equal the lines of FILE between "// --- README example
# begins ---" and "// --- README example ends ---"; with "excerpt=PART", between "// --- PART
# begins ---" and "// --- PART ends ---"; either way less the begin line's indentation.
set -eu
readme=$1
file=$2
name=$3
block=$(mktemp)
shown=$(mktemp)
trap 'rm -f "$block" "$shown"' EXIT
case "${4:-}" in
  excerpt | excerpt=*)
    part="README example"
    [ "${4:-}" = excerpt ] || part=${4#excerpt=}
    awk -v begins="--- $part begins ---" -v ends="--- $part ends ---" '
         index($0, ends) { exit }
         state == 1 { print substr($0, indent + 1) }
         index($0, begins) { state = 1; match($0, /^ */); indent = RLENGTH }' "$file" > "$shown"
    file=$shown
    ;;
esac
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
