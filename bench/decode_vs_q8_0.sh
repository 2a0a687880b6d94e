#!/usr/bin/env bash
# Decoding speed in one run: speculative D+R vs plain D+R vs plain Q8_0 (the llama.cpp-style
# baseline on our Q8_0 kernel), greedy, the same prompts and lengths for each, interleaved
# prompt by prompt so drifting machine speed hits all three alike.
#
#   bench/decode_vs_q8_0.sh MODEL.gguf [RESIDUAL_BITS=6] [N_TOKENS=64] [PROMPTS=bench/prompts/bible.txt] [EXTRA CONVERT ARGS...]
#
# MODEL.gguf is the original (F16/F32/...) model; the converted and Q8_0 files are written
# next to it once (MODEL.r6.bitsplit.gguf, MODEL.q8_0.gguf) and reused.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: bench/decode_vs_q8_0.sh MODEL.gguf [RESIDUAL_BITS] [N_TOKENS] [PROMPTS] [convert args...]}
bits=${2:-6}
n=${3:-64}
prompts=${4:-bench/prompts/bible.txt}
shift $(( $# < 4 ? $# : 4 ))
bin=./build/bitsplit
split=${model%.gguf}.r$bits.bitsplit.gguf
q8=${model%.gguf}.q8_0.gguf
[[ -f $split ]] || "$bin" convert "$model" "$split" --residual "$bits" "$@" >&2
[[ -f $q8 ]] || "$bin" quantize "$model" "$q8" >&2

declare -A tokens seconds
modes=("spec D+R$bits" "plain D+R$bits" "plain Q8_0")
for m in "${modes[@]}"; do tokens[$m]=0; seconds[$m]=0; done
while IFS= read -r prompt; do
  [[ -z $prompt ]] && continue
  for m in "${modes[@]}"; do
    case $m in
      spec*) args=(-m "$split") ;;
      "plain D"*) args=(-m "$split" --no-spec) ;;
      *) args=(-m "$q8") ;;
    esac
    line=$("$bin" run "${args[@]}" -p "$prompt" -n "$n" --temp 0 --ignore-eos 2>&1 >/dev/null | grep '^generation:')
    # "generation: 64 tokens in 0.123 s (520.3 tokens/s)"
    t=$(awk '{print $2}' <<<"$line"); s=$(awk '{print $5}' <<<"$line")
    tokens[$m]=$(( ${tokens[$m]} + t ))
    seconds[$m]=$(awk -v a="${seconds[$m]}" -v b="$s" 'BEGIN{printf "%.6f", a+b}')
  done
done < "$prompts"

echo "model $model, prompts $prompts, $n tokens each, greedy, $(nproc) threads"
echo "| decoding | tokens | seconds | tokens/s | vs plain Q8_0 |"
echo "|---|---|---|---|---|"
base=$(awk -v t="${tokens["plain Q8_0"]}" -v s="${seconds["plain Q8_0"]}" 'BEGIN{print t/s}')
for m in "${modes[@]}"; do
  awk -v m="$m" -v t="${tokens[$m]}" -v s="${seconds[$m]}" -v b="$base" \
    'BEGIN{printf "| %s | %d | %.3f | %.1f | %.2fx |\n", m, t, s, t/s, (t/s)/b}'
done
