#!/usr/bin/env bash
# Prompt processing (prefill) against llama.cpp in the same run: llama-bench's pp512 and pp2048
# on llama.cpp's model, then `bitsplit run -n 1 --no-spec` on the converted model with prompts of
# about 512 and 2048 tokens (the first 2060 and 8240 bytes of TEXT), in each
# --target-activations mode given, repetition by repetition (the two programs alternating).
#
#   bench/prefill_vs_llama_cpp.sh LLAMA_CPP_BUILD_DIR LLAMA_MODEL.gguf CONVERTED.gguf [TEXT]
#
# TEXT defaults to tests/models/text/kjv.valid.txt. Environment: THREADS (default 2), REPS
# (default 2), MODES (default "int8 draft-remainder"), BITSPLIT (default build/bitsplit).
# Prints one line per measurement: what, tokens/s.
set -euo pipefail
if [[ $# -lt 3 ]]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")/.." && pwd)
llama_dir=$1 llama_model=$2 converted=$3 text=${4:-$here/tests/models/text/kjv.valid.txt}
threads=${THREADS:-2} reps=${REPS:-2} modes=${MODES:-int8 draft-remainder}
bitsplit=${BITSPLIT:-$here/build/bitsplit}
bench=$llama_dir/bin/llama-bench
[[ -x $bench ]] || bench=$llama_dir/llama-bench
for f in "$bench" "$bitsplit"; do [[ -x $f ]] || { echo "prefill_vs_llama_cpp: $f is not an executable" >&2; exit 1; }; done
for f in "$llama_model" "$converted" "$text"; do [[ -f $f ]] || { echo "prefill_vs_llama_cpp: no file $f" >&2; exit 1; }; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -c 2060 "$text" > "$tmp/p512.txt"
head -c 8240 "$text" > "$tmp/p2048.txt"
for rep in $(seq "$reps"); do
  "$bench" -m "$llama_model" -p 512,2048 -n 0 -t "$threads" -r 1 2>/dev/null |
    awk -F'|' -v rep="$rep" '/pp(512|2048)/ {gsub(/ /, "", $7); split($8, v, " "); print "rep " rep " llama.cpp " $7 ": " v[1]}'
  for p in p512 p2048; do
    for mode in $modes; do
      line=$("$bitsplit" run -m "$converted" -f "$tmp/$p.txt" -n 1 --no-spec -t "$threads" --temp 0 \
        --target-activations "$mode" 2>&1 | grep -E '^prompt:' || true)
      echo "rep $rep bitsplit $p $mode: ${line:-failed}"
    done
  done
done
