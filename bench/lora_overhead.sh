#!/usr/bin/env bash
# What a LoRA variant costs at decode time, and whether its factored application agrees with the
# adapter merged into the weights, on any llama-family model (a real one:
# ~/.cache/bitsplit-models/smollm2-135m-instruct.q4_1.gguf).
#
#   bench/lora_overhead.sh MODEL.gguf [RANK=16] [N_TOKENS=64] [PROMPTS=bench/prompts/bible.txt]
#
# 1. Writes a synthetic adapter of rank RANK on every layer's seven projections (llama.cpp's
#    adapter format, F16 factors, small random values; $PYTHON, default /usr/bin/python3, with
#    numpy and gguf: tools/setup.sh --fixtures).
# 2. The original model with the adapter as a variant (its factors applied beside the weights)
#    scored against the adapter materialised into the weights by `bitsplit merge` (one input):
#    `eval --reference MERGED --lora ADAPTER`, f32 on both sides (only the summation order
#    differs), KL and top-1 agreement on the first prompts' text.
# 3. Decode speed, interleaved prompt by prompt on the converted model: plain and speculative,
#    base and LoRA variant. Prints a markdown table with the ratio to the base.
# Files go to a temporary folder, removed at exit. BITSPLIT: the binary (default build/bitsplit).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${BITSPLIT:-$repo/build/bitsplit}
model=${1:?usage: bench/lora_overhead.sh MODEL.gguf [RANK] [N_TOKENS] [PROMPTS]}
rank=${2:-16}
n=${3:-64}
prompts=${4:-$repo/bench/prompts/bible.txt}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
adapter=$work/adapter.gguf

"${PYTHON:-/usr/bin/python3}" - "$model" "$adapter" "$rank" <<'PY'
import sys
import gguf
import numpy as np
src, out, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = gguf.GGUFReader(src)
arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
shapes = {t.name: [int(d) for d in t.shape] for t in r.tensors}  # ggml order: [in, out]
rng = np.random.default_rng(7)
w = gguf.GGUFWriter(out, arch)
w.add_string("general.type", "adapter")
w.add_string("adapter.type", "lora")
w.add_float32("adapter.lora.alpha", float(rank))  # scale alpha / rank = 1
w.add_string("general.name", f"synthetic rank-{rank} adapter")
n = 0
for name, (n_in, n_out) in sorted((k, v) for k, v in shapes.items() if len(v) == 2):
    if not any(p in name for p in ("attn_q.", "attn_k.", "attn_v.", "attn_output.", "ffn_gate.", "ffn_up.", "ffn_down.")):
        continue
    a = (rng.standard_normal((rank, n_in)) / np.sqrt(n_in)).astype(np.float16)
    b = (rng.standard_normal((n_out, rank)) * 0.02).astype(np.float16)
    w.add_tensor(name + ".lora_a", a)
    w.add_tensor(name + ".lora_b", b)
    n += 1
w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
print(f"adapter: {n} matrices of rank {rank}", file=sys.stderr)
PY
"$bin" info "$adapter" >&2

# 2. The factored variant against the materialised merge, f32 on both sides.
merged=$work/merged.gguf
"$bin" merge --base "$model" "$adapter" --method average -o "$merged" >&2 2>/dev/null
"$bin" eval "$model" --reference "$merged" --lora "$adapter" --text "$prompts" --ctx 128 --json > "$work/factored.json" 2>/dev/null
"$bin" eval "$model" --reference "$merged" --text "$prompts" --ctx 128 --json > "$work/base.json" 2>/dev/null
agree=$("${PYTHON:-/usr/bin/python3}" - "$work/factored.json" "$work/base.json" <<'PY'
import json, sys
f, b = (json.load(open(p)) for p in sys.argv[1:3])
print("KL(merge || base + LoRA) %.2e, top-1 %.2f %% over %d tokens (the base without it: KL %.3f, top-1 %.1f %%)"
      % (f["kl_mean"], 100 * f["top1_agreement"], f["tokens"], b["kl_mean"], 100 * b["top1_agreement"]))
PY
)
echo "factored vs materialised: $agree" >&2

# 3. Speed on the converted model.
split=$work/model.bitsplit.gguf
"$bin" convert "$model" "$split" >&2 2>/dev/null
declare -A tokens seconds
modes=("plain base" "plain LoRA" "spec base" "spec LoRA")
for m in "${modes[@]}"; do tokens[$m]=0; seconds[$m]=0; done
while IFS= read -r p; do
  [[ -z $p ]] && continue
  for m in "${modes[@]}"; do
    args=(-m "$split")
    [[ $m == plain* ]] && args+=(--no-spec)
    [[ $m == *LoRA ]] && args+=(--lora "x=$adapter" --variant x)
    line=$("$bin" run "${args[@]}" -p "$p" -n "$n" --temp 0 --ignore-eos 2>&1 >/dev/null | grep '^generation:')
    t=$(awk '{print $2}' <<<"$line"); s=$(awk '{print $5}' <<<"$line")
    tokens[$m]=$(( ${tokens[$m]} + t ))
    seconds[$m]=$(awk -v a="${seconds[$m]}" -v b="$s" 'BEGIN{printf "%.6f", a+b}')
  done
done < "$prompts"

echo "model $model, synthetic LoRA of rank $rank on the 7 projections of every layer, prompts $prompts, $n tokens each, greedy, $(nproc) threads"
echo "factored variant vs materialised merge (f32): $agree"
echo "| decoding | tokens | seconds | tokens/s | vs base, same decoding |"
echo "|---|---|---|---|---|"
for m in "${modes[@]}"; do
  ref="${m% *} base"
  awk -v m="$m" -v t="${tokens[$m]}" -v s="${seconds[$m]}" -v bt="${tokens[$ref]}" -v bs="${seconds[$ref]}" \
    'BEGIN{printf "| %s | %d | %.3f | %.1f | %.2fx |\n", m, t, s, t/s, (t/s)/(bt/bs)}'
done
