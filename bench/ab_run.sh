#!/usr/bin/env bash
# Two bitsplit binaries (or one binary under two environments) on the same `run` arguments,
# interleaved repetition by repetition, so that a noisy machine (a shared VM: the development
# VM's speeds move by 2x within an hour) slows both alike. Prints each repetition's generation
# and prompt tokens/s, then the medians and the median of the paired ratios B / A.
#
#   bench/ab_run.sh A B -- RUN_ARGS...
#
# A and B are each a path to a bitsplit binary, or ENV=VALUE[,ENV=VALUE...]@BINARY to run it
# with those variables set. Environment: REPS (default 5).
#   bench/ab_run.sh build-old/bitsplit build/bitsplit -- -m q15.gguf -f bench/prompts/run/code.chatml.txt -n 64 -t 2 --temp 0
#   bench/ab_run.sh BITSPLIT_ISA=avx512@build/bitsplit build/bitsplit -- -m smol.gguf -p hi -n 64 --no-spec --ignore-eos
set -euo pipefail
if [[ $# -lt 4 || $3 != -- ]]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
a=$1 b=$2
shift 3
reps=${REPS:-5}

# Runs one side; prints "generation prompt" tokens/s (or "failed failed").
run_side() {
  local side=$1 bin=$1 envs=()
  shift
  if [[ $side == *@* ]]; then
    bin=${side#*@}
    IFS=, read -r -a envs <<< "${side%%@*}"
  fi
  local out
  out=$(env "${envs[@]}" "$bin" run "$@" 2>&1 >/dev/null || true)
  local gen prompt
  gen=$(sed -nE 's/^generation: .*\(([0-9.]+) tokens\/s\).*/\1/p' <<< "$out")
  prompt=$(sed -nE 's/^prompt: .*\(([0-9.]+) tokens\/s\).*/\1/p' <<< "$out")
  echo "${gen:-failed} ${prompt:-failed}"
}

median() { awk 'NF' | sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

for side in "$a" "$b"; do
  [[ -x ${side#*@} ]] || { echo "ab_run: ${side#*@} is not an executable" >&2; exit 1; }
done

ga=() gb=() pa=() pb=() ratio=()
printf '%-4s %12s %12s %12s %12s\n' rep "A gen t/s" "B gen t/s" "A prompt" "B prompt"
for rep in $(seq "$reps"); do
  read -r g1 p1 < <(run_side "$a" "$@")
  read -r g2 p2 < <(run_side "$b" "$@")
  printf '%-4s %12s %12s %12s %12s\n' "$rep" "$g1" "$g2" "$p1" "$p2"
  [[ $g1 != failed ]] && ga+=("$g1")
  [[ $g2 != failed ]] && gb+=("$g2")
  [[ $p1 != failed ]] && pa+=("$p1")
  [[ $p2 != failed ]] && pb+=("$p2")
  if [[ $g1 != failed && $g2 != failed ]]; then ratio+=("$(awk -v x="$g1" -v y="$g2" 'BEGIN {print (x > 0 ? y / x : 0)}')"); fi
done
printf 'median generation: A %s, B %s tokens/s; B / A paired: %s (%d pairs)\n' \
  "$(printf '%s\n' "${ga[@]}" | median)" "$(printf '%s\n' "${gb[@]}" | median)" \
  "$(printf '%s\n' "${ratio[@]}" | median)" "${#ratio[@]}"
printf 'median prompt:     A %s, B %s tokens/s\n' "$(printf '%s\n' "${pa[@]}" | median)" "$(printf '%s\n' "${pb[@]}" | median)"
