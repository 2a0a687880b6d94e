#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang, -DBITSPLIT_FUZZ=ON, a build folder of their own)
# and runs each for FUZZ_SECONDS (default 30), starting from seeds made from the fixtures; exits
# non-zero on any finding (crash, sanitizer report, failed property, timeout, out of memory) and
# prints one line per target. Usage:
#   tools/fuzz.sh [--long] [TARGET...]      (TARGET: gguf model delta imatrix lora tokenizer_encode
#                                            tokenizer_metadata tokenizer_json options chat_template
#                                            openai_request split_set lora http_request safetensors; default all)
#   --long: FUZZ_SECONDS defaults to 3600 (a long local run).
# Environment: FUZZ_SECONDS, FUZZ_BUILD_DIR (default build-fuzz), FUZZ_ARTIFACTS (crashing
# inputs and logs; default $FUZZ_BUILD_DIR/fuzz-artifacts), FUZZ_PARALLEL (targets run at once;
# default 2, at most the cores), FUZZ_BUILD_JOBS (default nproc), BITSPLIT_SHARED_DIR (../shared:
# real vocabularies for the tokenizer targets and seeds; optional).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

long=0
targets=()
for arg in "$@"; do
  case "$arg" in
    --long) long=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option '$arg'" >&2; exit 2 ;;
    *) targets+=("$arg") ;;
  esac
done
all_targets=(gguf model delta imatrix tokenizer_encode tokenizer_metadata tokenizer_json options chat_template openai_request split_set lora http_request safetensors)
[[ ${#targets[@]} -eq 0 ]] && targets=("${all_targets[@]}")
if [[ $long -eq 1 ]]; then seconds=${FUZZ_SECONDS:-3600}; else seconds=${FUZZ_SECONDS:-30}; fi
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
artifacts=${FUZZ_ARTIFACTS:-$build/fuzz-artifacts}
corpus=$build/fuzz-corpus
cores=$(nproc)
parallel=${FUZZ_PARALLEL:-2}
(( parallel > cores )) && parallel=$cores
shared=${BITSPLIT_SHARED_DIR:-$root/../shared}
[[ -d "$shared" ]] || shared=""

# Input size limits: whole files for the file parsers (the seeds are a few KB to 20 KB), short
# texts for the tokenizers' encode and the option parsers.
max_len() {
  case "$1" in
    gguf|model|tokenizer_metadata|split_set) echo 65536 ;;
    tokenizer_json) echo 32768 ;;
    delta|lora|safetensors) echo 16384 ;;
    imatrix) echo 8192 ;;
    tokenizer_encode) echo 2048 ;;
    options) echo 256 ;;
    chat_template|openai_request|http_request) echo 4096 ;;
    *) echo "fuzz.sh: unknown target '$1' (targets: ${all_targets[*]})" >&2; return 1 ;;
  esac
}
for t in "${targets[@]}"; do max_len "$t" >/dev/null; done

start=$SECONDS
echo "== fuzz build ($build) =="
command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (libFuzzer needs clang)" >&2; exit 1; }
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DBITSPLIT_FUZZ=ON \
  -DBITSPLIT_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "${FUZZ_BUILD_JOBS:-$cores}" --target fuzz_seeds $(printf 'fuzz_%s ' "${targets[@]}")
echo "built in $((SECONDS - start)) s"

mkdir -p "$artifacts" "$corpus"
"$build/tests/fuzz/fuzz_seeds" "$corpus" "$shared" >/dev/null

echo "== fuzzing ${targets[*]}: ${seconds} s each, $parallel at a time; artifacts in $artifacts =="
run_one() {
  local t=$1 log="$artifacts/$t.log"
  local seeds=()
  [[ -d "$root/tests/fuzz/seeds/$t" ]] && seeds+=("$root/tests/fuzz/seeds/$t")
  [[ -d "$root/tests/data/fuzz/$t" ]] && seeds+=("$root/tests/data/fuzz/$t")
  # detect_leaks: a leak is a finding too. -timeout: one input running this long is a hang.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 UBSAN_OPTIONS=print_stacktrace=1 \
  BITSPLIT_SHARED_DIR="$shared" \
    "$build/tests/fuzz/fuzz_$t" "$corpus/$t" "${seeds[@]}" -max_total_time="$seconds" -max_len="$(max_len "$t")" \
    -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=25 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$t-" >"$log" 2>&1
}
pids=()
for t in "${targets[@]}"; do
  while (( $(jobs -rp | wc -l) >= parallel )); do wait -n || true; done
  run_one "$t" &
  pids+=($!)
done
status=()
for pid in "${pids[@]}"; do
  if wait "$pid"; then status+=(0); else status+=(1); fi
done

failed=0
for i in "${!targets[@]}"; do
  t=${targets[$i]} log="$artifacts/${targets[$i]}.log"
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  cov=$(grep -o 'cov: [0-9]*' <<<"$last" | grep -o '[0-9]*' || true)
  ft=$(grep -o 'ft: [0-9]*' <<<"$last" | grep -o '[0-9]*' || true)
  if [[ ${status[$i]} -eq 0 ]]; then
    result=ok
  else
    failed=1
    what=$(grep -m1 -oE 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer): [a-zA-Z_ -]+|runtime error: .*|fuzz property failed: .*|internal check failed: .*' "$log" || true)
    crash=$(grep -m1 -o "Test unit written to .*" "$log" | sed 's/Test unit written to //' || true)
    result="FAILED: ${what:-exit status non-zero} ${crash:+(input: $crash)} (log: $log)"
  fi
  printf '%-20s runs %9s  cov %6s  ft %6s  %s\n' "$t" "${runs:-?}" "${cov:-?}" "${ft:-?}" "$result"
done
# The split_set harness writes its two parts under /dev/shm (or /tmp); libFuzzer's exit skips
# the harness's cleanup, so the folders of the runs that just ended are removed here.
for d in /dev/shm/bitsplit-fuzz-split-* "${TMPDIR:-/tmp}"/bitsplit-fuzz-split-*; do
  [[ -d $d ]] && ! kill -0 "${d##*-}" 2>/dev/null && rm -rf "$d"
done
echo "fuzzing done in $((SECONDS - start)) s"
exit $failed
