#!/usr/bin/env bash
# Writes every deterministic output of a bitsplit binary into one folder, so that a refactor can
# be checked byte for byte against the binary before it:
#
#   bash tools/same_outputs.sh OLD/bitsplit /tmp/before
#   bash tools/same_outputs.sh build/bitsplit /tmp/after
#   diff -r /tmp/before /tmp/after && echo identical
#
# What it covers, on the fixture models (tests/models) and stories260K (../shared, when present):
# converted files (default, R6, 3-bit and mixed-bit drafts, an old format version, split sets),
# BitDelta and Q8_0 files, an importance matrix, a merge; greedy and sampled runs in every mode
# (plain, speculative chain/tree/auto/lookup, draft only, each target activation mode, a
# BitDelta and a LoRA variant, a mixture of experts, a sliding-window and a LongRoPE model);
# eval's JSON. Only stdout is kept from `run` (stderr carries timings); run with -t 2 so the
# outputs do not depend on the core count. Takes a few minutes on 2 cores.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 BITSPLIT_BINARY OUTPUT_FOLDER" >&2
  exit 2
fi
bin=$(realpath "$1")
out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${BITSPLIT_SHARED_DIR:-$root/../shared}
models=$root/tests/models
rm -rf "$out"
mkdir -p "$out"
out=$(realpath "$out")
cd "$out"
# Inputs are named through links in the output folder, so that files which record their inputs'
# paths (imatrix, merge) and JSON that names them read the same from any checkout.
ln -s "$root/tests/models" models.in
ln -s "$root/bench/prompts" prompts.in
ln -s "$(realpath "$shared" 2>/dev/null || echo "$shared")" shared.in
models=models.in
shared=shared.in

step() { echo "same_outputs: $*" >&2; }
# Runs bitsplit; a non-zero exit is recorded (with the error line) instead of stopping the script,
# so that a changed error is a difference too.
bs() {
  local name=$1
  shift
  local rc=0
  "$bin" "$@" >"$name.out" 2>"$name.err" || rc=$?
  [ "$rc" = 0 ] || echo "exit $rc" >"$name.status"
  grep -E '^error' "$name.err" >"$name.errors" || true
  rm -f "$name.err"
  [ -s "$name.errors" ] || rm -f "$name.errors"
}
T=(-t 2)

step "convert"
bs conv-base convert "$models/bible-base.gguf" base.gguf "${T[@]}"
bs conv-base-r6 convert "$models/bible-base.gguf" base-r6.gguf --residual 6 "${T[@]}"
bs conv-base-d3 convert "$models/bible-base.gguf" base-d3.gguf --draft-bits 3 "${T[@]}"
bs conv-base-v2 convert "$models/bible-base.gguf" base-v2.gguf --format-version 2 "${T[@]}"
bs conv-split convert "$models/bible-base.gguf" split.gguf --split-max-tensors 20 "${T[@]}"
bs imatrix imatrix "$models/bible-base.gguf" --text "$models/text/kjv.valid.txt" -o base.imatrix --ctx 64 "${T[@]}"
bs conv-base-bpw convert "$models/bible-base.gguf" base-bpw.gguf --draft-bpw 2.5 --imatrix base.imatrix "${T[@]}"
for m in gemma2-tiny gemma3-tiny phi3-tiny phi3-longrope-tiny mixtral-tiny qwen2moe-tiny qwen3moe-tiny qwen3moe-bible; do
  bs "conv-$m" convert "$models/$m.gguf" "$m.gguf" "${T[@]}"
done
bs quantize quantize "$models/bible-base.gguf" base-q8.gguf
bs delta-devil delta --base "$models/bible-base.gguf" --finetuned "$models/bible-devil.gguf" -o devil.delta.gguf "${T[@]}"
bs merge merge "$models/bible-devil.gguf" "$models/bible-psalms.gguf" --base "$models/bible-base.gguf" \
  -o merged.gguf --method average "${T[@]}"

step "run"
p="And it came to pass, when the king of Israel"
R=(run -m base.gguf -p "$p" -n 48 "${T[@]}")
bs run-greedy-auto "${R[@]}" --temp 0
bs run-greedy-plain "${R[@]}" --temp 0 --no-spec
bs run-greedy-chain4 "${R[@]}" --temp 0 --budget 4 --draft chain
bs run-greedy-tree16 "${R[@]}" --temp 0 --budget 16
bs run-greedy-lookup "${R[@]}" --temp 0 --budget 8 --lookup 8
bs run-draft-only "${R[@]}" --temp 0 --draft-only
for a in int8 draft-remainder remainder; do
  bs "run-act-$a" "${R[@]}" --temp 0 --budget 8 --target-activations "$a"
done
bs run-sampled-plain "${R[@]}" --temp 0.8 --seed 7 --no-spec
bs run-sampled-tree8 "${R[@]}" --temp 0.8 --seed 7 --budget 8
bs run-sampled-chain4 "${R[@]}" --temp 1.0 --top-k 0 --top-p 1 --min-p 0 --seed 11 --budget 4 --draft chain
bs run-r6 run -m base-r6.gguf -p "$p" -n 48 "${T[@]}" --temp 0 --budget 8
bs run-d3 run -m base-d3.gguf -p "$p" -n 48 "${T[@]}" --temp 0 --budget 8
bs run-bpw run -m base-bpw.gguf -p "$p" -n 48 "${T[@]}" --temp 0 --budget 8
bs run-split run -m split-00001-of-*.gguf -p "$p" -n 32 "${T[@]}" --temp 0 2>/dev/null || true
bs run-delta "${R[@]}" --temp 0 --budget 8 --delta devil=devil.delta.gguf --variant devil
bs run-lora "${R[@]}" --temp 0 --budget 8 --lora devil="$models/bible-devil-lora.gguf" --variant devil
bs run-q8 run -m base-q8.gguf -p "$p" -n 48 "${T[@]}" --temp 0
bs run-f32 run -m "$models/bible-base.gguf" -p "$p" -n 48 "${T[@]}" --temp 0
bs run-merged run -m merged.gguf -p "$p" -n 32 "${T[@]}" --temp 0
for m in gemma2-tiny gemma3-tiny phi3-tiny mixtral-tiny qwen2moe-tiny qwen3moe-tiny; do
  bs "run-$m" run -m "$m.gguf" -p "hello world" -n 24 "${T[@]}" --temp 0 --budget 8
  bs "run-$m-sampled" run -m "$m.gguf" -p "hello world" -n 24 "${T[@]}" --temp 0.9 --seed 3 --budget 8
done
bs run-qwen3moe-bible run -m qwen3moe-bible.gguf -p "$p" -n 32 "${T[@]}" --temp 0
bs run-phi3-longrope run -m phi3-longrope-tiny.gguf -p "hello world" -n 24 "${T[@]}" --temp 0 --budget 8

step "eval"
bs eval eval "$models/bible-base.gguf" --text "$models/text/kjv.valid.txt" --ctx 64 --max-tokens 1024 --json "${T[@]}"
bs eval-reference eval base.gguf --reference "$models/bible-base.gguf" --text "$models/text/kjv.valid.txt" --ctx 64 \
  --max-tokens 1024 --json "${T[@]}"
bs eval-delta eval "$models/bible-devil.gguf" --base "$models/bible-base.gguf" --text "$models/text/devil.valid.txt" \
  --ctx 64 --max-tokens 512 --json "${T[@]}"
bs eval-merge eval merged.gguf --reference "$models/bible-devil.gguf" --text "$models/text/devil.valid.txt" --ctx 64 \
  --max-tokens 512 --json "${T[@]}"
for m in base base-r6 base-d3 base-bpw gemma3-tiny qwen3moe-tiny; do
  bs "info-$m" info "$m.gguf"
done
bs bench-accept bench accept -m base.gguf --prompts prompts.in/bible.txt -n 16 --temp 0 --chains 2 \
  --budgets 4 --json-file bench-accept.json "${T[@]}"
# tokens/s vary run to run; keep bench accept's acceptance figures only.
if [ -f bench-accept.json ]; then
  python3 -c 'import json,sys
d=json.load(open("bench-accept.json"))
def strip(o):
    if isinstance(o,dict): return {k:strip(v) for k,v in o.items() if not any(w in k for w in ("per_s","seconds","_ms","time","_s","speedup"))}
    if isinstance(o,list): return [strip(v) for v in o]
    return o
json.dump(strip(d),open("bench-accept.json","w"),indent=1,sort_keys=True)'
fi
rm -f bench-accept.out

if [ -f "$shared/models/stories260K.gguf" ]; then
  step "stories260K"
  s=$shared/models/stories260K.gguf
  bs conv-stories convert "$s" stories.gguf "${T[@]}"
  bs run-stories-greedy run -m stories.gguf -p "Once upon a time" -n 64 "${T[@]}" --temp 0
  bs run-stories-plain run -m stories.gguf -p "Once upon a time" -n 64 "${T[@]}" --temp 0 --no-spec
  bs run-stories-sampled run -m stories.gguf -p "Once upon a time" -n 64 "${T[@]}" --temp 0.8 --seed 5 --budget 16
  bs run-stories-f32 run -m "$s" -p "Once upon a time" -n 64 "${T[@]}" --temp 0
else
  step "no $shared/models/stories260K.gguf: stories260K skipped"
fi
# info's lines about this machine (memory available, CUDA devices) vary; the model's lines stay.
sed -i -E '/^(this machine|cuda|vram plan):/d' info-*.out
# eval's JSON carries its run time.
for f in eval*.out; do
  python3 -c 'import json,sys
p=sys.argv[1]
try: d=json.load(open(p))
except Exception: sys.exit(0)
def strip(o):
    if isinstance(o,dict): return {k:strip(v) for k,v in o.items() if "second" not in k and "time" not in k}
    if isinstance(o,list): return [strip(v) for v in o]
    return o
json.dump(strip(d),open(p,"w"),indent=1,sort_keys=True)' "$f"
done
# A split set carries a random set id (bitsplit.split.set_id, a 16-character string): blanked.
python3 - split-*.gguf <<'PY'
import sys
key = b"bitsplit.split.set_id"
for p in sys.argv[1:]:
    b = bytearray(open(p, "rb").read())
    i = b.find(key)
    if i >= 0:
        start = i + len(key) + 4 + 8  # type (u32), string length (u64)
        b[start:start + 16] = b"0" * 16
        open(p, "wb").write(bytes(b))
PY
rm -f models.in prompts.in shared.in
step "done: $(ls | wc -l) files in $out"
