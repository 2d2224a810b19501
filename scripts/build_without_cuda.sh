#!/usr/bin/env bash
# Builds every target (library, binary, tests, benchmarks) in build/ as on a machine without the
# CUDA toolkit, to prove such a build compiles and links. Where a toolkit is installed and this
# runs as root, it is hidden for real: in a private mount namespace an empty tmpfs lies over every
# /usr/local/cuda* directory and /dev/null over every nvcc on PATH, and KILN_CUDA stays AUTO, so
# CMake's own detection must come out CPU-only. Elsewhere (no right to mount) KILN_CUDA=OFF.
# Reuses the objects of the demo's CUDA-less build; afterwards build/'s cache is dropped so the
# next configure (scripts/test.sh) finds the toolkit again. Usage: bash scripts/build_without_cuda.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# scripts/build.sh with KILN_CUDA=$1 (every target); with AUTO, CMake must have found no toolkit.
configure_and_build() {
  mkdir -p build
  bash scripts/build.sh "-DKILN_CUDA=$1" | tee build/build-without-cuda.log
  if [[ $1 == AUTO ]] && ! grep -q "CPU-only build" build/build-without-cuda.log; then
    echo "build_without_cuda: CMake found a CUDA toolkit" >&2
    exit 1
  fi
}

if [[ ${1:-} == --hidden-toolkit ]]; then  # inside the mount namespace
  for dir in /usr/local/cuda*; do
    if [[ -d $dir && ! -L $dir ]]; then mount -t tmpfs -o size=1m,ro kiln-no-cuda "$dir"; fi
  done
  for nvcc in $(type -ap nvcc); do mount --bind /dev/null "$nvcc"; done
  configure_and_build AUTO
  exit 0
fi

toolkit=false
if compgen -G "/usr/local/cuda*" >/dev/null || type -p nvcc >/dev/null; then toolkit=true; fi
if $toolkit && [[ $(id -u) -eq 0 ]] && unshare -m true 2>/dev/null; then
  echo "build_without_cuda: the CUDA toolkit hidden (a mount namespace)"
  unshare -m bash "$0" --hidden-toolkit
elif $toolkit; then
  echo "build_without_cuda: cannot hide the CUDA toolkit here; building with -DKILN_CUDA=OFF"
  configure_and_build OFF
else
  configure_and_build AUTO
fi
# The cache remembers the CUDA compiler as not found; the next configure must look again.
rm -f build/CMakeCache.txt
echo "build_without_cuda: every target built without the CUDA backend"
