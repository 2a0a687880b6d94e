#!/usr/bin/env bash
# Installs every system package bitsplit needs to build, test and (optionally) make fixtures.
# Idempotent: safe to run again; installs by package name only, downloads nothing else.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

BUILD_PKGS=(
  build-essential cmake ninja-build ccache pkg-config git
  libtbb-dev libdnnl-dev ocl-icd-opencl-dev opencl-headers libhwloc-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libcpp-httplib-dev libpcre2-dev libssl-dev
  libboost-dev  # Asio and Beast (header-only): the HTTP server of bitsplit serve
  liblapacke-dev libblas-dev libopenblas0-pthread  # LAPACKE: merge's truncated SVD, GPTQ's Cholesky; CBLAS (OpenBLAS behind it): GPTQ, imatrix --covariance
  clang libclang-rt-dev  # libFuzzer and its sanitizers: tools/fuzz.sh
  python3-jinja2  # the reference for the chat-template test (tests/engine/chat/chat_template_reference.py)
  python3-pytest  # the Python package's tests (tests/python/, ctest: PythonPackage)
  chromium chromium-driver python3-selenium  # the chat page in a real browser (tests/tools/serve_webui_test.py)
  haproxy  # the router in front of serve replicas (examples/deploy/loopback.py, tests/tools/deploy_loopback_test.py)
)
# Only for tools/fixtures (training the test models) and reference checks; not for the C++ build.
FIXTURE_PKGS=(
  python3 python3-numpy python3-torch python3-sentencepiece python3-pip
  bible-kjv bible-kjv-text dict-devil libopenblas0-pthread
)

want=("${BUILD_PKGS[@]}")
if [ "${1:-}" = "--fixtures" ]; then want+=("${FIXTURE_PKGS[@]}"); fi

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The official OpenAI client, for the end-to-end test of `bitsplit serve` (tests/tools/serve_openai_test.py;
# it skips without it). PyPI only; a failed install leaves that test skipped, not the setup failed.
/usr/bin/python3 -c "import openai" 2>/dev/null || \
  /usr/bin/python3 -m pip install --quiet --break-system-packages openai >&2 || \
  echo "setup: could not install the openai Python client; the serve end-to-end test will be skipped" >&2
if [ "${1:-}" = "--fixtures" ]; then
  # The gguf writer is only on PyPI; /usr/bin/python3 is the interpreter that sees python3-torch.
  /usr/bin/python3 -c "import gguf" 2>/dev/null || \
    /usr/bin/python3 -m pip install --quiet --break-system-packages "gguf>=0.10"
fi
echo "setup: all packages present" >&2
