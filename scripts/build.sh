#!/usr/bin/env bash
# Installs the Debian packages kiln needs (scripts/setup.sh) and builds kiln into build/.
# Usage: bash scripts/build.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$(nproc)"
