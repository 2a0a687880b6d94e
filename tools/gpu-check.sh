#!/usr/bin/env bash
# Device check, run on a machine with an NVIDIA GPU (in one call of the `device` tool).
# Builds with CUDA for the local GPU, runs the `gpu`-labelled tests, the GPU draft-kernel
# benchmark (GB/s against a device-to-device copy), and an end-to-end run on a synthetic
# 1B-shape model (random weights; the residual in RAM): greedy output with the CUDA draft
# tier must equal the CPU-only engine's; prints a short table. Target: < 8 minutes on H200.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
out=${OUT:-/tmp/bitsplit-gpu-check}
mkdir -p "$out"

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$out/nvidia-smi.txt"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')
arch=${arch:-90}

cmake -S . -B build-gpu -G Ninja -DBITSPLIT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j "$(nproc)" --target bitsplit bench_gpu_draft gpu_tests gpu_draft_tier_tests \
  >"$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

(cd build-gpu && ctest -L gpu --output-on-failure) 2>&1 | tee "$out/ctest-gpu.txt"
gpu_rc=${PIPESTATUS[0]}
summary=$(grep -Eo '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$out/ctest-gpu.txt" || echo "no summary")
skipped=$(grep -c 'Skipped' "$out/ctest-gpu.txt" || true)

timeout 120 ./build-gpu/bench/bench_gpu_draft 2>&1 | tee "$out/bench_gpu_draft.txt"

# End to end on a synthetic 1B shape: CUDA draft tier vs CPU-only, same greedy text.
e2e="skipped"
if timeout 240 bash -c '
  set -e
  ./build-gpu/bitsplit synth --shape 1b -o /tmp/gc-1b.gguf 2>/dev/null
  ./build-gpu/bitsplit convert /tmp/gc-1b.gguf /tmp/gc-1b.bs.gguf --fit minmax 2>/dev/null
  for mode in gpu cpu; do
    if [ $mode = cpu ]; then export BITSPLIT_DEVICE=cpu; fi
    ./build-gpu/bitsplit run -m /tmp/gc-1b.bs.gguf -p "hello world" -n 24 --temp 0 --budget 8 \
      > /tmp/gc-$mode.txt 2> /tmp/gc-$mode.err
    ./build-gpu/bitsplit run -m /tmp/gc-1b.bs.gguf -p "hello world" -n 24 --temp 0 --no-spec \
      > /dev/null 2> /tmp/gc-$mode-plain.err
  done' >"$out/e2e.log" 2>&1; then
  cp /tmp/gc-*.err "$out/" 2>/dev/null
  if cmp -s /tmp/gc-gpu.txt /tmp/gc-cpu.txt; then e2e="greedy text identical (GPU draft vs CPU)"; else e2e="TEXT DIFFERS"; gpu_rc=1; fi
fi

speed() { grep -Eo 'generation: [0-9]+ tokens in [0-9.]+ s \([0-9.]+ tokens/s\)' "$1" 2>/dev/null | grep -Eo '[0-9.]+ tokens/s'; }
percheck() { grep -Eo 'draft [0-9.]+ ms/check, verify [0-9.]+ ms/check' "$1" 2>/dev/null; }
echo
echo "| check | result |"
echo "|---|---|"
echo "| GPU | $(head -1 "$out/nvidia-smi.txt") |"
echo "| ctest -L gpu | rc=$gpu_rc, $summary, skipped lines: $skipped |"
echo "| D2D copy | $(grep -Eo 'copy: [0-9.]+ GB/s' "$out/bench_gpu_draft.txt" || echo n/a) |"
echo "| e2e 1B synthetic | $e2e |"
echo "| spec, GPU draft | $(speed "$out/gc-gpu.err") ; $(percheck "$out/gc-gpu.err") |"
echo "| spec, CPU draft | $(speed "$out/gc-cpu.err") ; $(percheck "$out/gc-cpu.err") |"
echo "| plain target | $(speed "$out/gc-gpu-plain.err") |"
echo "| wall time | $(( $(date +%s) - start )) s |"
exit "$gpu_rc"
