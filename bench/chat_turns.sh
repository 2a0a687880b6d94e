#!/usr/bin/env bash
# A multi-turn chat in one run, twice: continuing each turn from the last turn's KV cache (what
# `bitsplit chat` does) and rerunning the whole history every turn (--no-reuse). Prints, per
# turn, the prompt's tokens, how many were kept, and the prompt seconds of both, and whether
# the two conversations' replies are byte-identical (they must be).
#
#   bench/chat_turns.sh MODEL.bitsplit.gguf [TURNS_FILE=bench/prompts/chat_turns.txt] [N_PREDICT=96] [EXTRA CHAT ARGS...]
#
# TURNS_FILE holds one user message per line. Greedy decoding (--temp 0).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/chat_turns.sh MODEL.bitsplit.gguf [TURNS_FILE] [N_PREDICT] [chat args...]}
turns=${2:-bench/prompts/chat_turns.txt}
n=${3:-96}
shift $(( $# < 3 ? $# : 3 ))
bin=${BITSPLIT_BIN:-./build/bitsplit}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for mode in kept rerun; do
  extra=()
  [[ $mode == rerun ]] && extra=(--no-reuse)
  "$bin" chat -m "$model" --temp 0 -n "$n" --timings "${extra[@]}" "$@" <"$turns" >"$tmp/$mode.out" 2>"$tmp/$mode.err"
done
# "(prompt: P tokens, K of them kept from the last turn, S s; reply: ...)"
parse() { sed -n 's/^(prompt: \([0-9]*\) tokens, \([0-9]*\) of them kept from the last turn, \([0-9.]*\) s;.*/\1 \2 \3/p' "$1"; }
printf '| turn | prompt tokens | kept | prompt s (kept) | prompt s (rerun) |\n|---|---|---|---|---|\n'
paste -d' ' <(parse "$tmp/kept.err") <(parse "$tmp/rerun.err") |
  awk '{ printf "| %d | %d | %d | %.3f | %.3f |\n", NR, $1, $2, $3, $6; k += $3; r += $6 }
       END { printf "| all | | | %.3f | %.3f |\n", k, r }'
if cmp -s "$tmp/kept.out" "$tmp/rerun.out"; then echo "replies: identical"; else echo "replies: DIFFER"; exit 1; fi
