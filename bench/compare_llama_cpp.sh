#!/usr/bin/env bash
# Decode speed against llama.cpp, same model, same prompts, same run: each prompt of a JSONL
# prompt set (bench/prompts/spec-bench.jsonl) is rendered once by bitsplit as it renders it for
# `bench accept` (ChatML when the vocabulary has <|im_start|>), then run by llama.cpp on the
# original model and by `bitsplit run` on the converted model, prompt by prompt (the order of the
# two alternating), greedy, the same thread count and token count. Prints prefill and decode
# tokens/s per category for both and the ratio, and writes them with every run's log to a folder.
#
#   bench/compare_llama_cpp.sh LLAMA_CPP_BUILD_DIR ORIGINAL_MODEL.gguf PROMPTS.jsonl [N_TOKENS=128]
#
# LLAMA_CPP_BUILD_DIR is a llama.cpp build made outside this tree (its binaries in DIR/bin or
# DIR): llama-completion when it is there (llama.cpp since late 2025, where llama-cli became an
# interactive chat), else a llama-cli that has -no-cnv. Environment: THREADS (default nproc),
# BITSPLIT (binary; default build/bitsplit of this checkout), BITSPLIT_MODEL (the converted model;
# default ORIGINAL.bitsplit.gguf beside the original, made with `bitsplit convert` when missing),
# BITSPLIT_ARGS (more `bitsplit run` options, e.g. "--no-spec" or "--draft chain --budget 4"),
# LLAMA_ARGS (more llama.cpp options), STOP_AT_EOS=1 (both stop at end-of-sequence instead of
# generating all N tokens), OUT (the folder; default llama-vs-bitsplit-MODEL-DATE).
#
# Decode tokens/s: llama.cpp's "eval time" line (its runs after the prompt over their time) and
# bitsplit's "generation:" line (generated tokens over their time); prefill from "prompt eval
# time" and "prompt:". The rendered prompt goes to llama.cpp with -f and one extra newline, since
# -f drops one trailing newline and the ChatML prompt ends in "<|im_start|>assistant\n";
# llama.cpp parses special-token text in prompts, bitsplit is given --parse-special.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: bench/compare_llama_cpp.sh LLAMA_CPP_BUILD_DIR ORIGINAL_MODEL.gguf PROMPTS.jsonl [N_TOKENS=128]"
llama_dir=${1:?$usage}
original=${2:?$usage}
prompts=${3:?$usage}
n=${4:-128}
threads=${THREADS:-$(nproc)}
bin=${BITSPLIT:-$repo/build/bitsplit}
split=${BITSPLIT_MODEL:-${original%.gguf}.bitsplit.gguf}
stem=$(basename "${original%.gguf}")
out=${OUT:-llama-vs-bitsplit-$stem-$(date +%Y%m%d-%H%M%S)}
fail() { echo "error: $*" >&2; exit 1; }

[[ -d $llama_dir ]] || fail "$llama_dir is not a directory (give the llama.cpp build folder, e.g. ~/llama.cpp/build)"
[[ -f $original ]] || fail "$original not found (the original GGUF model that llama.cpp runs)"
[[ -f $prompts ]] || fail "$prompts not found (a JSONL prompt set such as bench/prompts/spec-bench.jsonl)"
[[ -x $bin ]] || fail "$bin is not an executable; build bitsplit (cmake --build build) or set BITSPLIT=PATH"

# llama.cpp's non-interactive completion binary.
llama=""
llama_flags=()
for d in "$llama_dir/bin" "$llama_dir"; do
  if [[ -x $d/llama-completion ]]; then llama=$d/llama-completion; break; fi
done
if [[ -z $llama ]]; then
  for d in "$llama_dir/bin" "$llama_dir"; do
    if [[ -x $d/llama-cli ]]; then
      # The help text is read whole first: `grep -q` closing the pipe early would make llama-cli
      # die of SIGPIPE, which pipefail counts as a failure.
      cli_help=$(timeout 60 "$d/llama-cli" --help </dev/null 2>&1 || true)
      if grep -q -- '-no-cnv' <<<"$cli_help"; then llama=$d/llama-cli; break; fi
      fail "$d/llama-cli has no -no-cnv (the interactive chat CLI of llama.cpp since late 2025); build the \
llama-completion target (cmake --build $llama_dir --target llama-completion)"
    fi
  done
fi
[[ -n $llama ]] || fail "neither llama-completion nor llama-cli under $llama_dir/bin or $llama_dir; build llama.cpp \
there first (cmake -B build && cmake --build build --config Release)"
help=$(timeout 60 "$llama" --help </dev/null 2>&1 || true)
has() { grep -q -- "$1" <<<"$help"; }
has '-no-cnv' && llama_flags+=(-no-cnv)
has '--no-display-prompt' && llama_flags+=(--no-display-prompt)
has '--no-escape' && llama_flags+=(--no-escape)
has '--threads-batch' && llama_flags+=(-tb "$threads")
ignore=(--ignore-eos)
[[ ${STOP_AT_EOS:-0} == 1 ]] && ignore=()
# shellcheck disable=SC2206
bitsplit_args=(${BITSPLIT_ARGS:-})
# shellcheck disable=SC2206
llama_args=(${LLAMA_ARGS:-})

mkdir -p "$out/logs"
if [[ ! -f $split ]]; then
  echo "converting $original to $split (once)" >&2
  "$bin" convert "$original" "$split" -t "$threads" >&2
fi
"$bin" bench accept -m "$split" --prompts "$prompts" --render-prompts "$out/prompts" 2>>"$out/logs/render.log" ||
  fail "rendering the prompts failed: $(tail -1 "$out/logs/render.log")"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), nproc $(nproc), threads $threads"
  echo "llama.cpp: $llama ($(timeout 60 "$llama" --version </dev/null 2>&1 | grep -m1 -i version || echo 'version unknown'))"
  echo "llama.cpp command: $llama -m $original -f PROMPT -n $n --temp 0 -t $threads -c 4096 ${llama_flags[*]} ${ignore[*]} ${llama_args[*]}"
  echo "bitsplit command: $bin run -m $split -f PROMPT --parse-special -n $n --temp 0 -t $threads ${ignore[*]} ${bitsplit_args[*]}"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$out/run.txt"

# One run; prints "PROMPT_TOKENS PROMPT_SECONDS TOKENS SECONDS" from its log.
run_llama() {  # FILE LOG N
  local p="$1.llama"
  { cat "$1"; printf '\n'; } > "$p"
  timeout 1200 "$llama" -m "$original" -f "$p" -n "$3" --temp 0 -t "$threads" -c 4096 "${llama_flags[@]}" \
    "${ignore[@]}" "${llama_args[@]}" </dev/null >"$2.out" 2>"$2.err" || fail "llama.cpp failed (exit $?); see $2.err"
  # "...: prompt eval time =  12.34 ms /  40 tokens (...)" and "...:        eval time =  56.78 ms / 127 runs (...)"
  awk '/prompt eval time =/ { for (i = 1; i <= NF; ++i) if ($i == "=") { pm = $(i + 1); pt = $(i + 4) } }
       / eval time =/ && !/prompt eval time/ { for (i = 1; i <= NF; ++i) if ($i == "=") { em = $(i + 1); et = $(i + 4) } }
       END { if (em == "" || pm == "") exit 1; printf "%d %.6f %d %.6f\n", pt, pm / 1e3, et, em / 1e3 }' "$2.err" ||
    fail "no timings (\"eval time\") in $2.err; is $llama printing llama_perf_context_print?"
}
run_bitsplit() {  # FILE LOG N
  timeout 1200 "$bin" run -m "$split" -f "$1" --parse-special -n "$3" --temp 0 -t "$threads" "${ignore[@]}" \
    "${bitsplit_args[@]}" </dev/null >"$2.out" 2>"$2.err" || fail "bitsplit run failed; see $2.err"
  # "prompt: 40 tokens in 0.123 s (...)" and "generation: 128 tokens in 1.234 s (...)"
  awk '/^prompt: / { pt = $2; ps = $5 } /^generation: / { gt = $2; gs = $5 }
       END { if (gt == "") exit 1; printf "%d %.6f %d %.6f\n", pt, ps, gt, gs }' "$2.err" ||
    fail "no \"generation:\" line in $2.err"
}

# Untimed warm-up of both (page cache, CPU frequency), then every prompt, the order alternating.
first=$(awk -F'\t' 'NR == 2 { print $1 }' "$out/prompts/prompts.tsv")
run_llama "$out/prompts/$first" "$out/logs/warmup.llama" 8 >/dev/null
run_bitsplit "$out/prompts/$first" "$out/logs/warmup.bitsplit" 8 >/dev/null
total=$(( $(wc -l < "$out/prompts/prompts.tsv") - 1 ))
printf 'engine\tcategory\tfile\tprompt_tokens\tprompt_seconds\ttokens\tseconds\n' > "$out/runs.tsv"
i=0
while IFS=$'\t' read -r file category _tokens _stop; do
  [[ $file == file ]] && continue
  i=$((i + 1))
  echo "[$i/$total] $category $file" >&2
  engines=(llama.cpp bitsplit)
  (( i % 2 == 0 )) && engines=(bitsplit llama.cpp)
  for e in "${engines[@]}"; do
    if [[ $e == llama.cpp ]]; then r=$(run_llama "$out/prompts/$file" "$out/logs/${file%.txt}.llama" "$n")
    else r=$(run_bitsplit "$out/prompts/$file" "$out/logs/${file%.txt}.bitsplit" "$n"); fi
    read -r pt ps gt gs <<<"$r"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$e" "$category" "$file" "$pt" "$ps" "$gt" "$gs" >> "$out/runs.tsv"
  done
done < "$out/prompts/prompts.tsv"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/run.txt"

# Per category (in the order of the prompt file) and overall: summed tokens over summed seconds.
awk -F'\t' -v model="$stem" -v n="$n" -v threads="$threads" '
  NR == 1 { next }
  !($2 in seen) { seen[$2] = 1; order[++k] = $2 }
  { pt[$1, $2] += $4; ps[$1, $2] += $5; gt[$1, $2] += $6; gs[$1, $2] += $7; np[$1, $2]++
    pt[$1, "overall"] += $4; ps[$1, "overall"] += $5; gt[$1, "overall"] += $6; gs[$1, "overall"] += $7; np[$1, "overall"]++ }
  function rate(t, s) { return s > 0 ? t / s : 0 }
  END {
    order[++k] = "overall"
    printf "%s, %d tokens per prompt, greedy, %d threads\n\n", model, n, threads
    print "| category | prompts | llama.cpp prefill t/s | bitsplit prefill t/s | llama.cpp decode t/s | bitsplit decode t/s | bitsplit / llama.cpp (decode) |"
    print "|---|---:|---:|---:|---:|---:|---:|"
    for (j = 1; j <= k; ++j) {
      c = order[j]
      l = rate(gt["llama.cpp", c], gs["llama.cpp", c]); b = rate(gt["bitsplit", c], gs["bitsplit", c])
      printf "| %s | %d | %.1f | %.1f | %.1f | %.1f | %.2fx |\n", c, np["bitsplit", c],
             rate(pt["llama.cpp", c], ps["llama.cpp", c]), rate(pt["bitsplit", c], ps["bitsplit", c]), l, b, (l > 0 ? b / l : 0)
    }
  }' "$out/runs.tsv" | tee "$out/compare.md"
echo "wrote $out/ (compare.md, runs.tsv, run.txt, prompts/, logs/)" >&2
