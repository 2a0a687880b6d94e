#!/usr/bin/env bash
# The package as a user installs it (ctest: PythonWheel, label slow): `pip wheel .` builds a wheel
# (scikit-build-core, CMake, the library inside), the wheel installs into a fresh venv without the
# package index, and examples/python/variants.py runs there on the bundled fixtures with the
# wheel's own libbitsplit.so, its greedy text equal to `bitsplit run`'s.
# Exit 77 (skipped) unless BITSPLIT_TEST_WHEEL=1, and without venv support or without the package
# index (scikit-build-core comes from it). The CMake tree is kept in WORK between runs, and compiles go through ccache as
# the main build's do (CC=cc, CXX=c++: the compilers the main build names, so its cache entries
# are hits here).
# Usage: wheel_test.sh SOURCE_DIR WORK_DIR [BITSPLIT_CLI]
set -euo pipefail
if [ "${BITSPLIT_TEST_WHEEL:-0}" != 1 ]; then
  echo "skip: a cold build takes minutes; run with BITSPLIT_TEST_WHEEL=1 (ctest -L slow)"; exit 77
fi
src=$(cd "$1" && pwd)
mkdir -p "$2"; work=$(cd "$2" && pwd)
cli=${3:-}
py=$(command -v /usr/bin/python3 || command -v python3)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

if ! "$py" -m venv "$tmp/build-env" >/dev/null 2>&1; then
  echo "skip: $py cannot make a venv (python3-venv)"; exit 77
fi
if ! "$tmp/build-env/bin/pip" install -q --disable-pip-version-check --timeout 20 --retries 1 \
       "scikit-build-core>=0.10" >"$tmp/pip.log" 2>&1; then
  echo "skip: scikit-build-core cannot be installed (no package index?):"; tail -3 "$tmp/pip.log"; exit 77
fi

# The wheel: the build backend from the venv above (no second download), the system's CMake and
# C++ dependencies, the tree kept in WORK (a sibling of the main build folder: same relative paths, so
# ccache hits).
start=$(date +%s)
CC=cc CXX=c++ "$tmp/build-env/bin/pip" wheel "$src" --no-build-isolation --no-deps -q --disable-pip-version-check \
  -w "$tmp/dist" --config-settings=build-dir="$work" >"$tmp/wheel.log" 2>&1 || { tail -30 "$tmp/wheel.log"; echo "FAIL: pip wheel"; exit 1; }
echo "pip wheel: $(( $(date +%s) - start )) s"
fail=0
check() {  # WHAT CONDITION...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
wheels=("$tmp"/dist/bitsplit-*.whl)
check "one wheel, for any Python 3 on this platform" test ${#wheels[@]} -eq 1 -a -f "${wheels[0]}"
wheel=${wheels[0]}
version=$(sed -n 's/^project(bitsplit VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")
check "named for the project's version $version" grep -q "bitsplit-$version-py3-none-" <<<"$(basename "$wheel")"
listing=$("$py" -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$wheel")
for f in bitsplit/libbitsplit.so bitsplit/py.typed bitsplit/_capi.py; do
  check "the wheel holds $f" grep -qx "$f" <<<"$listing"
done

# A fresh venv, the wheel installed without the index; run from elsewhere, nothing pointing at the
# source tree or the build's library.
"$py" -m venv "$tmp/run-env"
"$tmp/run-env/bin/pip" install -q --disable-pip-version-check --no-index "$wheel" >"$tmp/install.log" 2>&1 ||
  { cat "$tmp/install.log"; echo "FAIL: installing the wheel"; exit 1; }
cd "$tmp"
run_env=(env -u BITSPLIT_LIBRARY -u PYTHONPATH -u LD_LIBRARY_PATH)
where=$("${run_env[@]}" "$tmp/run-env/bin/python" -c 'import bitsplit; print(bitsplit._library_path()); print(bitsplit.__version__)')
check "the installed package loads its own library" grep -q "^$tmp/run-env/.*/site-packages/bitsplit/libbitsplit.so$" <<<"$where"
check "the installed package's version is $version" grep -qx "$version" <<<"$where"
prompt="And it came to pass"
"${run_env[@]}" "$tmp/run-env/bin/python" "$src/examples/python/variants.py" "$src/tests/models/bible-base.gguf" \
  --lora "devil=$src/tests/models/bible-devil-lora.gguf" -p "$prompt" -n 16 >"$tmp/example.txt" 2>"$tmp/example.err" ||
  { cat "$tmp/example.err"; echo "FAIL: the example"; exit 1; }
check "the example generated from the base and the variant" grep -q "^\[devil\] $prompt" "$tmp/example.txt"
if [ -n "$cli" ] && [ -x "$cli" ]; then
  "$cli" run -m "$src/tests/models/bible-base.gguf" -p "$prompt" -n 16 --temp 0 2>/dev/null >"$tmp/run.txt"
  check "the example's base text is bitsplit run's" test "$(sed -n 's/^\[base\] //p' "$tmp/example.txt")" = "$(cat "$tmp/run.txt")"
fi
exit $fail
