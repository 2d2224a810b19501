#!/usr/bin/env bash
# Installs the Debian packages kiln needs (scripts/setup.sh) and builds kiln into build/.
# Usage: bash scripts/build.sh [--target T]... [extra cmake args...]
#   --target T  build only target T (and what it needs), e.g. `--target kiln` for the binary;
#               without it, every target (the library, the binary, tests, benchmarks, kernels)
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
while [[ $# -ge 2 && $1 == --target ]]; do
  targets+=(--target "$2")
  shift 2
done
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$(nproc)" "${targets[@]}"
