#!/usr/bin/env bash
# The C API as an embedding application uses it (ctest: capi_examples):
# 1. examples/stream (C) and examples/stream.py (ctypes) print what `bitsplit run` prints for the
#    same prompt, greedy and sampled with a seed and a fixed budget;
# 2. the library installed to a temporary prefix is found by a fresh CMake project through
#    find_package(bitsplit) and through pkg-config, and a program linked statically against
#    libbitsplit.a (pkg-config --static) needs no libbitsplit.so; all print the same.
# Usage: capi_examples_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd); src=$(cd "$2" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
model="$tmp/base.bitsplit.gguf"
"$build/bitsplit" convert "$src/tests/models/bible-base.gguf" "$model" >/dev/null 2>&1
prompt="And it came to pass, when the king of Israel"
fail=0
check() {  # NAME EXPECTED ACTUAL
  if cmp -s "$2" "$3"; then echo "ok: $1"; else echo "FAIL: $1 differs from bitsplit run"; diff "$2" "$3" | head -5; fail=1; fi
}
for mode in "0 1 0" "0.8 7 4"; do
  read -r temp seed budget <<<"$mode"
  budget_flag=(); [ "$budget" != 0 ] && budget_flag=(--budget "$budget")
  "$build/bitsplit" run -m "$model" -p "$prompt" -n 40 --temp "$temp" --seed "$seed" "${budget_flag[@]}" 2>/dev/null > "$tmp/run.txt"
  "$build/examples/stream" "$model" "$prompt" 40 "$temp" "$seed" "$budget" 2>/dev/null > "$tmp/c.txt"
  check "C example, temp $temp" "$tmp/run.txt" "$tmp/c.txt"
  BITSPLIT_LIB="$build/libbitsplit.so" python3 "$src/examples/stream.py" "$model" "$prompt" 40 "$temp" "$seed" "$budget" \
    > "$tmp/py.txt" 2>/dev/null
  check "Python ctypes example, temp $temp" "$tmp/run.txt" "$tmp/py.txt"
done
# Only the C API's symbols leave the shared library.
if nm -D --defined-only "$build/libbitsplit.so" | awk '{print $3}' | grep -v '^bitsplit_' | grep -qv '^_'; then
  echo "FAIL: libbitsplit.so exports symbols outside the C API:"; nm -D --defined-only "$build/libbitsplit.so" | awk '{print $3}' | grep -v '^bitsplit_' | head
  fail=1
else
  echo "ok: libbitsplit.so exports only bitsplit_* symbols"
fi
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
libdir=$(ls -d "$tmp"/prefix/lib*/ | head -1)
PKG_CONFIG_PATH="$libdir/pkgconfig" cmake -S "$src/examples/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_C_COMPILER_LAUNCHER= >/dev/null
cmake --build "$tmp/consumer" >/dev/null
"$build/bitsplit" run -m "$model" -p "$prompt" -n 24 --temp 0 2>/dev/null > "$tmp/run.txt"
for consumer in consumer_cmake consumer_pkgconfig; do
  LD_LIBRARY_PATH="$libdir" "$tmp/consumer/$consumer" "$model" "$prompt" 24 2>/dev/null > "$tmp/$consumer.txt"
  check "installed library through ${consumer#consumer_}" "$tmp/run.txt" "$tmp/$consumer.txt"
done
static_libs=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --static --libs bitsplit | sed 's/-lbitsplit//')
# shellcheck disable=SC2086
"${CC:-cc}" -O1 "$src/examples/stream.c" -I"$tmp/prefix/include" "$libdir/libbitsplit.a" $static_libs -o "$tmp/stream_static"
if ldd "$tmp/stream_static" | grep -q libbitsplit; then echo "FAIL: the static program loads libbitsplit.so"; fail=1; fi
"$tmp/stream_static" "$model" "$prompt" 24 2>/dev/null > "$tmp/static.txt"
check "static libbitsplit.a" "$tmp/run.txt" "$tmp/static.txt"
exit $fail
