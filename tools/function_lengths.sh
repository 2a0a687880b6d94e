#!/usr/bin/env bash
# Lists functions by length (lines from signature to closing brace, from universal-ctags), longest
# first. With --over N, lists only those over N lines and exits 1 if there is any: the bound the
# code keeps in engine/, spec/ and the CLI (tools/) is 100 lines, tables excepted.
#
#   bash tools/function_lengths.sh                 # every function, longest first
#   bash tools/function_lengths.sh --over 100      # the bound check (engine/ spec/ tools/)
#   bash tools/function_lengths.sh cpu gpu         # other folders
set -euo pipefail
cd "$(dirname "$0")/.."
over=0
if [ "${1:-}" = "--over" ]; then
  over=$2
  shift 2
fi
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=(engine spec tools)
command -v ctags >/dev/null || { echo "function_lengths: needs universal-ctags (apt-get install universal-ctags)" >&2; exit 2; }
list=$(ctags -R --languages=C++ --langmap=C++:+.cu.cuh.inc --kinds-C++=f --fields=+ne -x \
         --_xformat='%{end} %{line} %N %F' "${dirs[@]}" 2>/dev/null |
       awk -v over="$over" '$1 != "" { n = $1 - $2 + 1; if (n > over) print n, $3, $4 ":" $2 }' | sort -rn)
if [ "$over" -gt 0 ]; then
  if [ -n "$list" ]; then
    echo "$list"
    exit 1
  fi
  echo "function_lengths: no function over $over lines in ${dirs[*]}" >&2
else
  echo "$list"
fi
