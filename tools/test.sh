#!/usr/bin/env bash
# Installs dependencies, builds bitsplit (CUDA kernels compiled when nvcc exists) and runs the
# whole test suite; then rebuilds the input-parsing tests under AddressSanitizer + UBSan and the
# concurrency tests under ThreadSanitizer, and runs them again. This is the README's test command and what CI runs (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
jobs=$(nproc)

echo "== release build =="
cmake -S . -B build -G Ninja
cmake --build build -j "$jobs"
# BITSPLIT_TEST_WHEEL: the Python package built as a wheel and installed into a fresh venv
# (ctest PythonWheel; its compiles are this build's, from ccache).
(cd build && BITSPLIT_TEST_WHEEL=1 ctest --output-on-failure -j "$jobs")

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build (the tests that parse untrusted input) =="
cmake -S . -B build-asan -G Ninja -DBITSPLIT_SANITIZE=ON -DBITSPLIT_CUDA=OFF -DBITSPLIT_BUILD_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build-asan -j "$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j "$jobs" --no-tests=error)

echo "== ThreadSanitizer build (the concurrency tests: sessions on one model, the variant cache, the server's slots and prompt-cache pool) =="
cmake -S . -B build-tsan -G Ninja -DBITSPLIT_SANITIZE_THREAD=ON -DBITSPLIT_CUDA=OFF -DBITSPLIT_BUILD_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
# The binaries with files marked THREADS, each built from those files only (tests/CMakeLists.txt),
# so every test in this build is a concurrency test: no -R filter.
cmake --build build-tsan -j "$jobs" --target capi_tests model_tests decode_tests serve_tests
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/../tests/tsan.supp" \
  ctest --output-on-failure -j "$jobs" --no-tests=error)

echo "== libFuzzer: every parser of untrusted input, 10 s each (tools/fuzz.sh; needs clang) =="
FUZZ_SECONDS=${FUZZ_SECONDS:-10} bash tools/fuzz.sh
