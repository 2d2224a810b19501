#!/usr/bin/env bash
# The one-command GPU check: build here, run on the GPU machine.
#
#   scripts/gpu_check.sh pack [DIR]      (here; DIR defaults to gpu_pack, ignored by .gitignore)
#
# configures build-gpu (Release, -DKILN_CUDA=ON -DKILN_CUDA_ARCHITECTURES=90 -DKILN_NATIVE=OFF:
# the GPU machine's CPU differs, so no -march=native), builds kiln, bench/cuda_gemm_ceiling and
# those of the GPU test binaries that exist (backend_parity_test, cuda_backend_test,
# cuda_attention_test, cuda_pointwise_test, cuda_gemm_host_test, nccl_gpu_test,
# nccl_transport_test, nccl_rendezvous_test, gloo_staged_test, doctor_test), strips them, and
# packs them with the
# non-CUDA shared libraries they load (ldd: OpenBLAS, oneDNN, Gloo, yaml-cpp, fmt, spdlog, pcre2, utf8proc,
# protobuf, gomp, ...) into DIR/payload.tar.xz, beside DIR/run.sh (scripts/gpu_check_run.sh),
# DIR/report.py (scripts/gpu_check_report.py) and DIR/pytorch_gpu_train_bench.py. The CUDA
# libraries (libcuda, libcudart, libcublas*, libnccl, libcudnn*) and glibc/libstdc++/libgcc_s are
# the GPU machine's own (this machine's glibc, 2.36, is older than the GPU image's, so binaries
# built here run there). Fails when what the device tool would send (DIR plus the repository's
# other files) exceeds its 64 MiB; prints the sizes.
#
# Then, from the checkout the session was started in (the device tool sends that one, not a
# helper's worktree), one device call:
#
#   run(command="bash gpu_pack/run.sh $OUT", carry=["gpu_pack"], timeout_s=600)
#
# run.sh needs no network and finishes within 9 minutes (KILN_GPU_CHECK_BUDGET_S=540: every
# command has a timeout and stops at the budget; summary.md is rewritten after every row); its
# summary.md and at most 7 other files come back in $OUT. KILN_GPU_CHECK_FAKE=cpu runs it here on
# the CPU at tiny sizes, sleeping the GPU-only commands' expected durations (scaled by
# KILN_GPU_CHECK_TIME_SCALE): `bash gpu_pack/run.sh /tmp/out` proves everything but the GPU.
# Environment for pack: JOBS (default 2), KILN_GPU_CHECK_ARCHS (default 90), BUILD (build-gpu).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
limit_bytes=$((64 * 1024 * 1024))

die() {
  echo "gpu_check: $*" >&2
  exit 1
}

# Targets of the GPU check; the ones the build does not define yet are reported as missing.
tests=(backend_parity_test cuda_backend_test cuda_attention_test cuda_pointwise_test cuda_gemm_host_test
  nccl_gpu_test nccl_transport_test nccl_rendezvous_test gloo_staged_test doctor_test)

# Libraries the GPU machine has itself (its driver and CUDA stack, glibc, the C++ runtime).
system_library() {
  case "$1" in
    linux-vdso.so* | ld-linux* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so*) ;;
    libstdc++.so* | libgcc_s.so*) ;;
    libcuda.so* | libcudart.so* | libcublas*.so* | libnccl*.so* | libcudnn*.so* | libnvidia*) ;;
    libnvrtc*.so* | libnvJitLink*.so* | libcufft*.so* | libcurand*.so* | libcusparse*.so*) ;;
    *) return 1 ;;
  esac
}

configure_and_build() {
  local build=$1
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON \
    -DKILN_CUDA=ON -DKILN_CUDA_ARCHITECTURES="${KILN_GPU_CHECK_ARCHS:-90}" -DKILN_NATIVE=OFF \
    >"$build/gpu_check_configure.log" 2>&1 || {
    cat "$build/gpu_check_configure.log"
    die "cmake configure failed"
  }
  local all targets=(kiln cuda_gemm_ceiling)
  all=$(ninja -C "$build" -t targets all)
  for t in "${tests[@]}"; do
    if grep -q "^$t:" <<<"$all"; then targets+=("$t"); else echo "missing target: $t"; fi
  done
  echo "building ${targets[*]}"
  cmake --build "$build" --target "${targets[@]}" -j "${JOBS:-2}"
}

# Copies the built binaries into $1/bin (stripped) and their libraries into $1/lib.
collect() {
  local build=$1 stage=$2 exe
  mkdir -p "$stage/bin" "$stage/lib"
  for name in kiln cuda_gemm_ceiling "${tests[@]}"; do
    exe=$(find "$build" -type f -name "$name" -perm -u+x -print -quit)
    [[ -n $exe ]] || continue
    cp "$exe" "$stage/bin/$name"
    strip --strip-unneeded "$stage/bin/$name"
  done
  local lib path
  while read -r lib path; do
    system_library "$lib" && continue
    [[ -e $stage/lib/$lib ]] || cp -L "$path" "$stage/lib/$lib"
  done < <(for b in "$stage"/bin/*; do
    ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
  done | sort -u)
}

# Bytes of the repository files the device tool sends besides DIR (tracked and untracked, not
# ignored).
tree_bytes() {
  local total=0 size
  while IFS= read -r -d '' f; do
    [[ -f $root/$f && ! -L $root/$f ]] || continue
    size=$(stat -c %s "$root/$f")
    total=$((total + size))
  done < <(git -C "$root" ls-files -z --cached --others --exclude-standard)
  echo "$total"
}

pack() {
  local dir=${1:-gpu_pack} build=${BUILD:-$root/build-gpu}
  [[ $dir == /* ]] || dir=$root/$dir
  configure_and_build "$build"
  local stage
  stage=$(mktemp -d)
  # shellcheck disable=SC2064  # expand now: the path is fixed
  trap "rm -rf '$stage'" EXIT
  collect "$build" "$stage"
  rm -rf "$dir"
  mkdir -p "$dir"
  tar -C "$stage" -cf - bin lib | xz -6 -T "${JOBS:-2}" >"$dir/payload.tar.xz"
  cp "$root/scripts/gpu_check_run.sh" "$dir/run.sh"
  cp "$root/scripts/gpu_check_report.py" "$dir/report.py"
  cp "$root/bench/pytorch_gpu_train_bench.py" "$dir/pytorch_gpu_train_bench.py"
  {
    echo "source_dir=$root"
    echo "build_dir=$build"
    echo "commit=$(git -C "$root" rev-parse --short HEAD)"
    echo "archs=${KILN_GPU_CHECK_ARCHS:-90}"
    echo "binaries=$(cd "$stage/bin" && echo *)"
    echo "tests=${tests[*]}"
    # The cuBLASLt kiln opens at run time (cublaslt_library.h): run.sh links it for kiln.
    echo "dlopen=libcublasLt.so.$(sed -n 's/^#define CUBLAS_VER_MAJOR \([0-9]*\).*/\1/p' \
      /usr/local/cuda/include/cublas_api.h)"
  } >"$dir/pack.env"
  echo "packed: $(cd "$stage/bin" && echo *)"
  echo "libraries: $(cd "$stage/lib" && echo *)"
  local pack_bytes tree total
  pack_bytes=$(du -sb "$dir" | cut -f1)
  tree=$(tree_bytes)
  total=$((pack_bytes + tree))
  echo "size: $dir $((pack_bytes / 1024)) KiB (unpacked $(du -sk "$stage" | cut -f1) KiB)" \
    "+ repository $((tree / 1024)) KiB = $((total / 1024)) KiB of the device tool's 65536 KiB"
  ((total <= limit_bytes)) || die "too large for the device tool: $total bytes > $limit_bytes"
  echo "device call: run(command=\"bash ${dir#"$root"/}/run.sh \$OUT\"," \
    "carry=[\"${dir#"$root"/}\"], timeout_s=600)"
}

case "${1:-}" in
  pack) pack "${2:-gpu_pack}" ;;
  list-tests) echo "${tests[*]}" ;;
  *)
    echo "usage: scripts/gpu_check.sh pack [DIR]   (then run DIR/run.sh OUTDIR on the GPU machine)"
    echo "       scripts/gpu_check.sh list-tests   (the test binaries a pack carries)"
    exit 2
    ;;
esac
