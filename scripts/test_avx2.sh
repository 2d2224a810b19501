#!/usr/bin/env bash
# The whole test suite as on an x86-64 CPU with AVX2 but no AVX-512 (an AVX2-only AMD EPYC, say),
# on any machine with AVX2: kiln compiled for x86-64-v3 into build-avx2/, kiln's own feature
# choices capped at AVX2 (KILN_CPU_ISA, which also holds oneDNN there) and OpenBLAS forced to its
# Haswell kernels, so bf16 products fall back to fp32 as they do there.
# (The ordinary suite, scripts/test.sh, already reruns the CPU-sensitive tests so, as "avx2.*".)
# Usage: bash scripts/test_avx2.sh [ctest args...]   (e.g. -R Bf16)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build-avx2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON \
  -DKILN_MARCH=x86-64-v3
cmake --build build-avx2 -j "$(nproc)"
cd build-avx2
KILN_CPU_ISA=avx2 OPENBLAS_CORETYPE=Haswell \
  ctest --output-on-failure -j "$(nproc)" --timeout 600 "$@"
