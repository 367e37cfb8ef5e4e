#!/bin/bash
# The tree's formatting (.clang-format: Google style, 110 columns), checked with Debian's clang-format-14 so every
# machine formats the same way. Exit 1 naming the files that differ; fix them with
#   clang-format-14 -i FILE   (or, for changed lines only: git diff -U0 | clang-format-diff-14 -p1 -i)
# src/tokenizer/unicode_data.cpp is generated (scripts/gen_unicode_tables.py) and not checked.
# Usage: scripts/check_format.sh [SOURCE_DIR]
set -uo pipefail
cd "${1:-$(dirname "$0")/..}"
CF=${CLANG_FORMAT:-/usr/bin/clang-format-14}
[ -x "$CF" ] || { echo "check_format: $CF not found; scripts/setup.sh installs clang-format-14"; exit 1; }
mapfile -t files < <(git ls-files 'src/*.cpp' 'src/*.h' 'apps/*.cpp' 'apps/*.h' 'tests/*.cpp' 'tests/*.h' \
                       'bench/*.cpp' 'fuzz/*.cpp' | grep -v '^src/tokenizer/unicode_data.cpp$')
if [ ${#files[@]} -eq 0 ]; then
  echo "check_format: no tracked sources found (not a git checkout?); run it in the repository"
  exit 1
fi
# One process for every file; --Werror makes each unformatted file a "file:line:col: error:" line on stderr.
out=$("$CF" --dry-run --Werror "${files[@]}" 2>&1 >/dev/null)
if [ -n "$out" ]; then
  grep -oE '^[^:]+:[0-9]+:[0-9]+: error' <<<"$out" | cut -d: -f1 | sort -u | sed 's/$/: not formatted (clang-format-14 -i FILE)/'
  echo "checked ${#files[@]} files: some need clang-format"
  exit 1
fi
echo "checked ${#files[@]} files: formatted"
