#!/usr/bin/env bash
# How well `bitsplit merge` keeps each fine-tune it merges, on the bundled bible fixtures.
#
# Two input sets, both fine-tunes of tests/models/bible-base.gguf:
#   full: the full fine-tunes bible-devil.gguf + bible-psalms.gguf
#   lora: the LoRA adapters bible-devil-lora.gguf (rank 8) + bible-psalms-lora.gguf (rank 4);
#         their "fine-tunes" are base + adapter, made with a one-input `merge --method average`.
# For each set it merges the two inputs with every method (average; task-arithmetic at lambda
# 0.5 and 1.0; monosoup at several ranks) and scores the result with `bitsplit eval --reference`
# against each fine-tune on that fine-tune's held-out text:
#   KL(devil fine-tune || merge) and top-1 agreement on tests/models/text/devil.valid.txt,
#   KL(psalms fine-tune || merge) and top-1 agreement on tests/models/text/psalms.valid.txt,
#   and the mean of the two KLs (lower is better).
# Reference rows: the base alone (what merging starts from) and each fine-tune alone (the other
# fine-tune's column shows how much one task's change costs the other). Lower KL and higher
# top-1 are better; 0 KL / 100 % top-1 would mean the merge behaves exactly like that fine-tune.
#
#   bench/merge_quality.sh            # prints the markdown tables to stdout, progress to stderr
#
# Environment: BITSPLIT (default build/bitsplit of this checkout), CTX (tokens per window, 128),
# TOKENS (predictions per eval, 4096; a text shorter than that is scored whole), THREADS (nproc).
# Takes about a minute on 2 cores.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${BITSPLIT:-$repo/build/bitsplit}
ctx=${CTX:-128}
tokens=${TOKENS:-4096}
threads=${THREADS:-$(nproc)}
models=$repo/tests/models
base=$models/bible-base.gguf
devil_text=$models/text/devil.valid.txt
psalms_text=$models/text/psalms.valid.txt
cmdline="$0${*:+ $*}"
start=$SECONDS

[[ -x $bin ]] || { echo "error: $bin is not an executable; build bitsplit or set BITSPLIT=PATH" >&2; exit 1; }
for f in "$base" "$models"/bible-{devil,psalms}{,-lora}.gguf "$devil_text" "$psalms_text"; do
  [[ -f $f ]] || { echo "error: $f not found" >&2; exit 1; }
done
command -v python3 > /dev/null || { echo "error: python3 is needed to read eval's JSON" >&2; exit 1; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/merge-quality.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

log() { echo "merge_quality: $*" >&2; }

# merge OUT ARGS...: bitsplit merge --base BASE ARGS... -o OUT, its chatter kept out of the way
merge() {
  local out=$1; shift
  "$bin" merge --base "$base" "$@" -t "$threads" -o "$out" > "$tmp/merge.log" 2>&1 ||
    { cat "$tmp/merge.log" >&2; echo "error: bitsplit merge $* failed" >&2; exit 1; }
}

# score MODEL REFERENCE TEXT: prints "KL TOP1 PREDICTIONS" of MODEL against REFERENCE on TEXT
score() {
  "$bin" eval "$1" --text "$3" --reference "$2" --ctx "$ctx" --max-tokens "$tokens" \
    -t "$threads" --json 2> "$tmp/eval.log" > "$tmp/eval.json" ||
    { cat "$tmp/eval.log" >&2; echo "error: bitsplit eval $1 --reference $2 failed" >&2; exit 1; }
  python3 -c 'import json, sys; j = json.load(open(sys.argv[1]))
print(j["kl_mean"], j["top1_agreement"], j["tokens"])' "$tmp/eval.json"
}

# row LABEL MODEL DEVIL_FT PSALMS_FT: one markdown row of MODEL against both fine-tunes
row() {
  local label=$1 model=$2 dkl dtop pkl ptop
  log "$label"
  read -r dkl dtop _ < <(score "$model" "$3" "$devil_text")
  read -r pkl ptop _ < <(score "$model" "$4" "$psalms_text")
  awk -v l="$label" -v dk="$dkl" -v dt="$dtop" -v pk="$pkl" -v pt="$ptop" 'BEGIN {
    printf "| %s | %.4f | %.1f %% | %.4f | %.1f %% | %.4f |\n", l, dk, 100 * dt, pk, 100 * pt, (dk + pk) / 2 }'
}

# table NAME DEVIL_INPUT PSALMS_INPUT DEVIL_FT PSALMS_FT RANKS...
table() {
  local name=$1 din=$2 pin=$3 dft=$4 pft=$5; shift 5
  local ins=("$din" "$pin") r l
  echo "### $name: $(basename "$din") + $(basename "$pin")"
  echo
  echo "| merge | KL devil | top-1 devil | KL psalms | top-1 psalms | mean KL |"
  echo "|---|---:|---:|---:|---:|---:|"
  row "base alone (no merge)" "$base" "$dft" "$pft"
  merge "$tmp/m.gguf" "${ins[@]}" --method average
  row "average" "$tmp/m.gguf" "$dft" "$pft"
  for l in 0.5 1.0; do
    merge "$tmp/m.gguf" "${ins[@]}" --method task-arithmetic --lambda "$l"
    row "task-arithmetic λ=$l" "$tmp/m.gguf" "$dft" "$pft"
  done
  for r in "$@"; do
    merge "$tmp/m.gguf" "${ins[@]}" --method monosoup --rank "$r"
    row "monosoup r=$r" "$tmp/m.gguf" "$dft" "$pft"
  done
  row "devil fine-tune alone" "$dft" "$dft" "$pft"
  row "psalms fine-tune alone" "$pft" "$dft" "$pft"
  echo
}

full=$(table "Full fine-tunes" "$models/bible-devil.gguf" "$models/bible-psalms.gguf" \
  "$models/bible-devil.gguf" "$models/bible-psalms.gguf" 4 8 16 32 64)

log "base + each LoRA adapter"
merge "$tmp/devil-ft.gguf" "$models/bible-devil-lora.gguf" --method average
merge "$tmp/psalms-ft.gguf" "$models/bible-psalms-lora.gguf" --method average
lora=$(table "LoRA adapters (fine-tune = base + adapter)" "$models/bible-devil-lora.gguf" \
  "$models/bible-psalms-lora.gguf" "$tmp/devil-ft.gguf" "$tmp/psalms-ft.gguf" 2 4 8)

# how many predictions each text gave (the same for every row; tables run in subshells)
read -r _ _ devil_tokens < <(score "$base" "$models/bible-devil.gguf" "$devil_text")
read -r _ _ psalms_tokens < <(score "$base" "$models/bible-psalms.gguf" "$psalms_text")

echo "## Merge quality on the bible fixtures"
echo
echo "KL(fine-tune || merge) on that fine-tune's held-out text, with \`bitsplit eval --reference\`:"
echo "--ctx $ctx, --max-tokens $tokens ($devil_tokens predictions on devil.valid.txt," \
  "$psalms_tokens on psalms.valid.txt), $threads threads. Lower KL, higher top-1 is better."
echo
echo "$full"
echo
echo "$lora"
echo
echo "Command: \`BITSPLIT=$bin $cmdline\`" \
  "(commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown))." \
  "Time: $((SECONDS - start)) s."
