#!/usr/bin/env bash
# Gate: the binaries scripts/gpu_check.sh packs (kiln, the benchmarks and test binaries of the
# build) and the shared libraries it packs with them (what ldd finds beyond glibc, the C++ runtime
# and the CUDA stack, which the GPU machine brings itself) ask for no newer GLIBC, GLIBCXX or
# CXXABI symbol version than the GPU machine's system provides: Ubuntu 24.04's glibc 2.39 and
# libstdc++ of GCC 14 (GLIBCXX_3.4.33, CXXABI_1.3.15).
#
#   glibc_versions.sh BUILD_DIR [MAX_GLIBC MAX_GLIBCXX MAX_CXXABI]
#
# Prints the newest version each file asks for; exits 1 naming every file beyond a maximum.
set -euo pipefail
build=$1
max_glibc=${2:-2.39}
max_glibcxx=${3:-3.4.33}
max_cxxabi=${4:-1.3.15}

is_elf() { [[ $(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ') == 177ELF ]]; }

# The GPU machine's own libraries (scripts/gpu_check.sh's system_library).
system_library() {
  case "$1" in
    linux-vdso.so* | ld-linux* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so*) ;;
    libstdc++.so* | libgcc_s.so*) ;;
    libcuda.so* | libcudart.so* | libcublas*.so* | libnccl*.so* | libcudnn*.so* | libnvidia*) ;;
    libnvrtc*.so* | libnvJitLink*.so* | libcufft*.so* | libcurand*.so* | libcusparse*.so*) ;;
    *) return 1 ;;
  esac
}

# The newest of the versions "PREFIX_x.y" a file asks for, or "".
newest() {
  objdump -T "$2" 2>/dev/null | grep -o "\b$1_[0-9][0-9.]*" | sed "s/^$1_//" | sort -uV |
    tail -1 || true
}

beyond() { [[ -n $1 && $(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1) != "$2" ]]; }

binaries=()
while IFS= read -r -d '' f; do
  is_elf "$f" && binaries+=("$f")
done < <(find "$build/src/kiln/cli" "$build/bench" "$build/tests" -maxdepth 3 -type f \
  -perm -u+x ! -name '*.so*' -print0 2>/dev/null)
[[ ${#binaries[@]} -gt 0 ]] || { echo "no binaries under $build"; exit 1; }

libraries=()
while read -r lib path; do
  system_library "$lib" || libraries+=("$path")
done < <(for b in "${binaries[@]}"; do
  ldd "$b" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u)

bad=0
for f in "${binaries[@]}" "${libraries[@]}"; do
  g=$(newest GLIBC "$f")
  x=$(newest GLIBCXX "$f")
  a=$(newest CXXABI "$f")
  if beyond "$g" "$max_glibc" || beyond "$x" "$max_glibcxx" || beyond "$a" "$max_cxxabi"; then
    echo "BEYOND: $f asks for GLIBC ${g:-none}, GLIBCXX ${x:-none}, CXXABI ${a:-none}" \
      "(at most $max_glibc, $max_glibcxx, $max_cxxabi)"
    bad=1
  fi
done
echo "${#binaries[@]} binaries and ${#libraries[@]} packed libraries checked against GLIBC" \
  "$max_glibc, GLIBCXX $max_glibcxx, CXXABI $max_cxxabi"
newest_all=$(for f in "${binaries[@]}" "${libraries[@]}"; do newest GLIBC "$f"; done | sort -uV |
  tail -1)
echo "newest GLIBC asked for: ${newest_all:-none}"
exit "$bad"
