#!/usr/bin/env bash
# Device check, run on a machine with an NVIDIA GPU (in one call of the `device` tool).
# Builds with CUDA for the local GPU, runs the `gpu`-labelled tests, the GPU draft-kernel
# benchmark (GB/s against a device-to-device copy), and an end-to-end run on a synthetic
# 8B-shape model written directly as bit-split D2 + R6 (`bitsplit synth --format bitsplit`;
# random weights, the residual in RAM): greedy output with the CUDA backend must equal
# the CPU-only engine's and the plain target's; prints a short table, whatever fails.
# Target: < 8 minutes on an H200 (16 cores). Every step has a timeout, and the end-to-end
# steps are skipped once the time budget (GPU_CHECK_BUDGET_S, default 450 s) is spent.
#
# Knobs (for trying the flow elsewhere): GPU_CHECK_SHAPE (synth shape, default 8b),
# GPU_CHECK_SKIP_BUILD=1 with GPU_CHECK_BUILD_DIR (default build-gpu) to use an existing build,
# GPU_CHECK_TOKENS (default 32).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
start=$(date +%s)
out=${OUT:-/tmp/bitsplit-gpu-check}
mkdir -p "$out"
build=${GPU_CHECK_BUILD_DIR:-build-gpu}
shape=${GPU_CHECK_SHAPE:-8b}
ntok=${GPU_CHECK_TOKENS:-32}
deadline=$((start + ${GPU_CHECK_BUDGET_S:-450}))
left() { echo $((deadline - $(date +%s))); }
rc=0

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$out/nvidia-smi.txt"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
arch=${arch:-90}

build_status="ok"
if [ "${GPU_CHECK_SKIP_BUILD:-0}" = 1 ]; then
  build_status="skipped (GPU_CHECK_SKIP_BUILD=1, using $build)"
elif ! timeout 200 cmake -S . -B "$build" -G Ninja -DBITSPLIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    >"$out/configure.log" 2>&1; then
  tail -30 "$out/configure.log"; build_status="CONFIGURE FAILED (configure.log)"; rc=1
elif ! timeout 300 cmake --build "$build" -j "$(nproc)" --target bitsplit bench_gpu_draft gpu_tests decode_gpu_tests \
    >"$out/build.log" 2>&1; then
  tail -50 "$out/build.log"; build_status="BUILD FAILED (build.log)"; rc=1
fi
echo "build: $build_status, $(( $(date +%s) - start )) s"
bin=./$build/bitsplit

gpu_rc="not run"; summary="not run"; skipped=0
if [ -d "$build" ] && [ "$rc" = 0 ]; then
  (cd "$build" && timeout 200 ctest -L gpu --output-on-failure --timeout 150) 2>&1 | tee "$out/ctest-gpu.txt"
  gpu_rc=${PIPESTATUS[0]}
  [ "$gpu_rc" != 0 ] && rc=1
  summary=$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$out/ctest-gpu.txt" || echo "no summary")
  skipped=$(grep -c 'Skipped' "$out/ctest-gpu.txt" || true)
  # On a GPU machine a skipped GPU test means the runtime saw no device (for example a driver
  # older than the CUDA 13 runtime needs): that is a failure, not a pass.
  if [ "$skipped" != 0 ] && nvidia-smi >/dev/null 2>&1; then
    summary="$summary; GPU TESTS SKIPPED ON A GPU MACHINE (driver: $(cut -d, -f3 "$out/nvidia-smi.txt" | head -1))"
    rc=1
  fi
fi

if [ -x "./$build/bench/bench_gpu_draft" ]; then
  timeout 120 "./$build/bench/bench_gpu_draft" 2>&1 | tee "$out/bench_gpu_draft.txt"
else
  echo "bench_gpu_draft not built" >"$out/bench_gpu_draft.txt"
fi

# End to end on a synthetic shape, written directly as bit-split D2 + R6 under /tmp (not $OUT,
# which is copied back): speculative with the CUDA backend, speculative with the CPU draft
# tier, the plain target and (time permitting) the CUDA tier under the host's draft pass, all
# greedy; the texts must be identical.
model=/tmp/bitsplit-gc-$shape.bs.gguf
declare -A step_status step_time
# step NAME MAX_SECONDS CMD...: stdout to $out/gc-NAME.txt, stderr to $out/gc-NAME.err.
step() {
  local name=$1 max=$2; shift 2
  local budget; budget=$(left)
  if [ "$budget" -lt 20 ]; then step_status[$name]="skipped (out of time)"; return 1; fi
  [ "$budget" -lt "$max" ] && max=$budget
  local t0; t0=$(date +%s)
  timeout -k 10 "$max" "$@" >"$out/gc-$name.txt" 2>"$out/gc-$name.err"
  local r=$?
  step_time[$name]=$(( $(date +%s) - t0 ))
  if [ $r = 0 ]; then step_status[$name]="ok"
  elif [ $r = 124 ] || [ $r = 137 ]; then step_status[$name]="TIMEOUT after ${max} s"; rc=1
  else step_status[$name]="FAILED rc=$r: $( (grep -m1 'error' "$out/gc-$name.err" || head -1 "$out/gc-$name.err") | cut -c1-120)"; rc=1
  fi
  echo "e2e $name: ${step_status[$name]}, ${step_time[$name]} s"
  [ $r = 0 ]
}
run_args=(-m "$model" -p "hello world" -n "$ntok" --temp 0 --ignore-eos)
e2e="not run"
avail_gb=$(df --output=avail -BG /tmp 2>/dev/null | tail -1 | tr -dc '0-9')
if [ ! -x "$bin" ]; then
  e2e="skipped (no $bin)"
elif [ "${avail_gb:-0}" -lt 12 ]; then
  e2e="skipped (only ${avail_gb:-?} GiB free under /tmp)"
elif step synth 150 "$bin" synth --shape "$shape" --format bitsplit --residual 6 -o "$model"; then
  step spec-gpu 150 "$bin" run "${run_args[@]}" --budget 8
  step spec-cpu 150 env BITSPLIT_DEVICE=cpu "$bin" run "${run_args[@]}" --budget 8
  step plain 120 "$bin" run "${run_args[@]}" --no-spec
  # Lowest priority, so last: the CUDA tier's projections under the host's draft pass.
  step spec-gpu-host 120 "$bin" run "${run_args[@]}" --budget 8 --host-draft
  same() { [ "${step_status[$1]:-}" = ok ] && [ "${step_status[$2]:-}" = ok ] && cmp -s "$out/gc-$1.txt" "$out/gc-$2.txt"; }
  verdict() {  # verdict A B: identical / DIFFERS / n/a
    if [ "${step_status[$1]:-}" != ok ] || [ "${step_status[$2]:-}" != ok ]; then echo "n/a"
    elif same "$1" "$2"; then echo "identical"
    else echo "DIFFERS"; fi
  }
  gc=$(verdict spec-gpu spec-cpu); gp=$(verdict spec-gpu plain); cp=$(verdict spec-cpu plain)
  hp=$(verdict spec-gpu-host plain)
  [ "$gc" = DIFFERS ] || [ "$gp" = DIFFERS ] || [ "$cp" = DIFFERS ] || [ "$hp" = DIFFERS ] && rc=1
  e2e="greedy text: GPU draft vs CPU draft $gc; GPU spec vs plain $gp; CPU spec vs plain $cp; GPU host-draft vs plain $hp"
  if [ "${step_status[spec-gpu]}" = ok ] && ! grep -q '^backend: CUDA' "$out/gc-spec-gpu.err"; then
    e2e="$e2e; THE GPU RUN DRAFTED ON THE CPU"; rc=1
  fi
else
  e2e="synth ${step_status[synth]:-failed}"
fi
rm -f "$model" "$model.tmp"

# Memory errors in the device draft's kernels (compute-sanitizer ships with the toolkit).
sanitizer="not run"
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -n "$san" ] && [ -x "./$build/tests/decode_gpu_tests" ] && [ "$(left)" -gt 60 ]; then
  cap=$(left); [ "$cap" -gt 120 ] && cap=120
  if timeout "$cap" "$san" --tool memcheck --error-exitcode 1 "./$build/tests/decode_gpu_tests" \
      --gtest_filter='GpuDeviceDraft.LogitsMatchTheCpuDraft:GpuBackend.DraftMatmul*' >"$out/memcheck.txt" 2>&1; then
    sanitizer="memcheck clean ($(grep -Eo 'ERROR SUMMARY: [0-9]+ errors' "$out/memcheck.txt" | tail -1))"
  else
    sanitizer="MEMCHECK FAILED (memcheck.txt: $(grep -m1 -E 'Invalid|ERROR' "$out/memcheck.txt" | cut -c1-100))"; rc=1
  fi
fi

speed() { grep -Eo 'generation: [0-9]+ tokens in [0-9.]+ s \([0-9.]+ tokens/s\)' "$1" 2>/dev/null | grep -Eo '[0-9.]+ tokens/s' || echo "n/a"; }
percheck() { grep -Eo 'draft [0-9.]+ ms/check, verify [0-9.]+ ms/check' "$1" 2>/dev/null || echo "n/a"; }
accepted() { grep -Eo '[0-9.]+ accepted drafted tokens per check' "$1" 2>/dev/null | grep -Eo '^[0-9.]+' | sed 's/$/ accepted\/check/' || echo "n/a"; }
pass() { grep -m1 -Eo 'draft pass: .*' "$1" 2>/dev/null | cut -c1-150 || echo "n/a"; }
tier() { grep -m1 -Eo '^backend: .*' "$1" 2>/dev/null | cut -c10-80 || echo "n/a"; }
st() { echo "${step_status[$1]:-not run}${step_time[$1]:+, ${step_time[$1]} s}"; }
echo
echo "| check | result |"
echo "|---|---|"
echo "| GPU | $(head -1 "$out/nvidia-smi.txt") |"
echo "| build | $build_status |"
echo "| ctest -L gpu | rc=$gpu_rc, $summary, skipped lines: $skipped |"
echo "| compute-sanitizer | $sanitizer |"
echo "| D2D copy | $(grep -Eo 'copy: [0-9.]+ GB/s' "$out/bench_gpu_draft.txt" 2>/dev/null || echo n/a) |"
echo "| e2e $shape synthetic D2+R6 (random weights, $ntok tokens) | $e2e |"
echo "| synth $shape bit-split | $(st synth) |"
echo "| spec, GPU draft | $(speed "$out/gc-spec-gpu.err") ; $(percheck "$out/gc-spec-gpu.err") ; $(accepted "$out/gc-spec-gpu.err") ; tier: $(tier "$out/gc-spec-gpu.err") ; $(pass "$out/gc-spec-gpu.err") ; $(st spec-gpu) |"
echo "| spec, CPU draft | $(speed "$out/gc-spec-cpu.err") ; $(percheck "$out/gc-spec-cpu.err") ; $(accepted "$out/gc-spec-cpu.err") ; $(st spec-cpu) |"
echo "| spec, GPU tier, --host-draft | $(speed "$out/gc-spec-gpu-host.err") ; $(percheck "$out/gc-spec-gpu-host.err") ; $(st spec-gpu-host) |"
echo "| plain target | $(speed "$out/gc-plain.err") ; $(st plain) |"
echo "| wall time | $(( $(date +%s) - start )) s |"
exit "$rc"
