#!/usr/bin/env bash
# Set up, build (warnings are errors) and run the whole test suite. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh -DKILN_WERROR=ON -DKILN_CUDA=AUTO
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 600
