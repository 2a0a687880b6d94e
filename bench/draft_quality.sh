#!/usr/bin/env bash
# The draft's quality against its VRAM budget on one model (docs/QUALITY.md, "Real models"):
# `bitsplit eval --scheme 'draft(R8)' --draft-bpw B` for each budget, without and with an
# importance matrix computed on a calibration text, and with its input covariances (the draft
# fitted with error feedback; COVARIANCE=0 skips it: the file is in^2 floats per input, ~10 GB
# for a 1.5B model), plus llama.cpp's KL for its low-bit types on
# the same text and context when LLAMA_CPP points at a CPU build of llama.cpp (its bin/ folder,
# holding llama-quantize and llama-perplexity; build it outside this tree).
#
#   bench/draft_quality.sh MODEL.gguf TEXT CALIBRATION_TEXT [BUDGETS="2.5 2.75 3.0 3.5 4.0"]
#
# Environment: BITSPLIT (default build/bitsplit of this checkout), CTX (512), TOKENS (predictions
# per eval, 1024), THREADS (nproc), LLAMA_CPP (optional), LLAMA_TYPES ("Q2_K Q3_K_S Q4_K_S Q8_0"),
# OUT (results folder; default draft-quality-MODEL-DATE). llama-perplexity scores the second half
# of each ctx-token chunk while bitsplit eval scores every position of its windows, so the two
# columns use the same text and context but not the same positions (close, not identical).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: bench/draft_quality.sh MODEL.gguf TEXT CALIBRATION_TEXT [BUDGETS]"
model=${1:?$usage}
text=${2:?$usage}
calib=${3:?$usage}
budgets=${4:-2.5 2.75 3.0 3.5 4.0}
bin=${BITSPLIT:-$repo/build/bitsplit}
ctx=${CTX:-512}
tokens=${TOKENS:-1024}
threads=${THREADS:-$(nproc)}
stem=$(basename "$model" .gguf)
out=${OUT:-draft-quality-$stem-$(date +%Y%m%d-%H%M%S)}

[[ -x $bin ]] || { echo "error: $bin is not an executable; build bitsplit or set BITSPLIT=PATH" >&2; exit 1; }
for f in "$model" "$text" "$calib"; do [[ -f $f ]] || { echo "error: $f not found" >&2; exit 1; }; done
if cmp -s "$text" "$calib"; then echo "error: the calibration text must differ from the evaluation text" >&2; exit 1; fi
mkdir -p "$out"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "model: $model; text: $text; calibration: $calib; ctx $ctx, $tokens predictions, $threads threads"
} > "$out/README.txt"

"$bin" imatrix "$model" --text "$calib" --ctx "$ctx" -t "$threads" -o "$out/imatrix.gguf"
kinds="no yes"
if [[ ${COVARIANCE:-1} != 0 ]]; then
  "$bin" imatrix "$model" --text "$calib" --ctx "$ctx" -t "$threads" --covariance -o "$out/imatrix-cov.gguf"
  kinds="no yes cov"
fi
echo "| budget | imatrix | draft bits | VRAM bits/w | KL mean | top-1 |" > "$out/table.md"
echo "|---|---|---|---|---|---|" >> "$out/table.md"
for b in $budgets; do
  for im in $kinds; do
    args=(eval "$model" --text "$text" --ctx "$ctx" --max-tokens "$tokens" -t "$threads" --scheme 'draft(R8)' --json)
    [[ $b != 2.5 ]] && args+=(--draft-bpw "$b")
    [[ $im == yes ]] && args+=(--imatrix "$out/imatrix.gguf")
    [[ $im == cov ]] && args+=(--imatrix "$out/imatrix-cov.gguf")
    "$bin" "${args[@]}" > "$out/eval-$b-$im.json"
    /usr/bin/env python3 - "$out/eval-$b-$im.json" "$b" "$im" >> "$out/table.md" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
r = j["schemes"][0]
print(f"| {sys.argv[2]} | {sys.argv[3]} | {j.get('draft_bits', 'all 2-bit')} | {r['vram_bits_per_weight']:.3f} | "
      f"{r['kl_mean']:.4f} | {100 * r['top1_agreement']:.1f} % |")
PY
  done
done

if [[ -n ${LLAMA_CPP:-} ]]; then
  q="$LLAMA_CPP/llama-quantize"; p="$LLAMA_CPP/llama-perplexity"
  [[ -x $q && -x $p ]] || { echo "error: LLAMA_CPP=$LLAMA_CPP has no llama-quantize / llama-perplexity" >&2; exit 1; }
  chunks=$(( (tokens + ctx / 2 - 1) / (ctx / 2) ))
  "$q" --allow-requantize "$model" "$out/f32.gguf" F32 > "$out/llama-f32.log" 2>&1
  "$p" -m "$out/f32.gguf" -f "$text" -c "$ctx" --chunks "$chunks" -t "$threads" --kl-divergence-base "$out/base.kld" \
    > "$out/llama-base.log" 2>&1
  echo >> "$out/table.md"
  echo "| llama.cpp type | KL mean | same top |" >> "$out/table.md"
  echo "|---|---|---|" >> "$out/table.md"
  for t in ${LLAMA_TYPES:-Q2_K Q3_K_S Q4_K_S Q8_0}; do
    "$q" --allow-requantize "$out/f32.gguf" "$out/$t.gguf" "$t" "$threads" > "$out/llama-q-$t.log" 2>&1
    "$p" -m "$out/$t.gguf" -f "$text" -c "$ctx" --chunks "$chunks" -t "$threads" --kl-divergence-base "$out/base.kld" \
      --kl-divergence > "$out/llama-$t.log" 2>&1
    kl=$(awk '/^Mean +KLD:/ { print $3; exit }' "$out/llama-$t.log")
    top=$(awk '/^Same top p:/ { print $4 " %"; exit }' "$out/llama-$t.log")
    echo "| $t | ${kl:-?} | ${top:-?} |" >> "$out/table.md"
    rm -f "$out/$t.gguf"
  done
  rm -f "$out/f32.gguf" "$out/base.kld"
fi
cat "$out/table.md"
