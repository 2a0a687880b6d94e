#!/usr/bin/env bash
# Acceptance by category in Spec-Bench's six categories: `bitsplit bench accept` over
# bench/prompts/spec-bench.jsonl with plain decoding (the reference), the online controller with
# and without context lookup (auto+lookup is what `bitsplit run` does by default), chains 1-8 and
# trees 4-32, greedy, every setting and prompt interleaved in one run. Writes a folder with the
# JSON, the markdown tables, the machine and the command, and a PNG when matplotlib is there.
#
#   bench/spec_bench.sh MODEL.bitsplit.gguf [N_TOKENS=128] [THREADS=$(nproc)]
#
# Environment: BITSPLIT (the binary; default build/bitsplit of this checkout), PROMPTS (default
# bench/prompts/spec-bench.jsonl), SETTINGS (comma-separated rows, see `bitsplit bench accept
# --help`), OUT (the folder; default spec-bench-MODEL-DATE in the current directory), EXTRA
# (more `bench accept` options, e.g. "--ignore-eos" or "--delta NAME=FILE").
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: bench/spec_bench.sh MODEL.bitsplit.gguf [N_TOKENS=128] [THREADS=\$(nproc)]"
model=${1:?$usage}
n=${2:-128}
threads=${3:-$(nproc)}
bin=${BITSPLIT:-$repo/build/bitsplit}
prompts=${PROMPTS:-$repo/bench/prompts/spec-bench.jsonl}
settings=${SETTINGS:-plain,auto,auto+lookup,chain-1,chain-2,chain-4,chain-8,tree-4,tree-8,tree-16,tree-32}
stem=$(basename "$model")
stem=${stem%.gguf}
out=${OUT:-spec-bench-$stem-$(date +%Y%m%d-%H%M%S)}

[[ -x $bin ]] || { echo "error: $bin is not an executable; build bitsplit (cmake --build build) or set BITSPLIT=PATH" >&2; exit 1; }
[[ -f $model ]] || { echo "error: $model not found (a model from \`bitsplit convert\`)" >&2; exit 1; }
[[ -f $prompts ]] || { echo "error: prompts $prompts not found" >&2; exit 1; }
mkdir -p "$out"

# shellcheck disable=SC2206
extra=(${EXTRA:-})
cmd=("$bin" bench accept -m "$model" --prompts "$prompts" -n "$n" -t "$threads" --temp 0 --settings "$settings"
     --json-file "$out/accept.json" "${extra[@]}")
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), nproc $(nproc)"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  printf 'command:'; printf ' %q' "${cmd[@]}"; echo
} > "$out/run.txt"

echo "writing $out/ (accept.json, accept.md, run.txt, accept.png)" >&2
"${cmd[@]}" | tee "$out/accept.md"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/run.txt"

# The plot: python3 with matplotlib, else Debian's python3 and its matplotlib ahead of any
# pip-installed numpy that would break it.
plot=("$repo/bench/plot_accept.py" "$out/accept.json" -o "$out/accept.png")
if python3 -c 'import matplotlib' 2>/dev/null; then
  python3 "${plot[@]}" >&2
elif [[ -x /usr/bin/python3 ]] && PYTHONPATH=/usr/lib/python3/dist-packages /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  PYTHONPATH=/usr/lib/python3/dist-packages /usr/bin/python3 "${plot[@]}" >&2
else
  echo "note: no PNG (matplotlib is not installed: apt-get install python3-matplotlib); the JSON and tables are written" >&2
fi
