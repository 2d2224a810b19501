#!/usr/bin/env bash
# kiln-entrypoint: the image's ENTRYPOINT. Decides whether to enable CUDA forward compatibility,
# says in one line on stderr what it decided and why, then execs its arguments unchanged
# (`kiln-entrypoint kiln train ...`).
#
# Forward compatibility lets an image built for a newer CUDA (this one: 13.0) run on a host whose
# kernel driver is older, by loading the newer user-mode driver (libcuda) that NVIDIA ships in
# /usr/local/cuda/compat (package cuda-compat-13-0, installed by the nvidia/cuda base images). It
# is enabled by prepending that directory to LD_LIBRARY_PATH, and only when all of these hold:
#   - a GPU is visible (a driver version is readable and /dev/nvidiaN device nodes exist);
#   - nothing enabled it already (the directory is on LD_LIBRARY_PATH, or the loader cache
#     resolves libcuda.so.1 into it, as the NVIDIA Container Toolkit's compat hook does);
#   - the newest CUDA the host driver supports is older (major.minor) than the image's CUDA;
#   - the compat directory holds libcuda.so.1, and a probe says it works.
# Enabling it on a host whose driver is new enough would be harmful (a compat libcuda older than
# the kernel driver fails with CUDA_ERROR_SYSTEM_DRIVER_MISMATCH), hence the checks. Forward
# compatibility is only supported on data-center GPUs and some driver branches; the probe is what
# decides, not a list kept here. Set KILN_CUDA_COMPAT=off to skip all of this.
#
# Every input can be redirected, which is how tests/deploy/entrypoint_test.sh drives it:
#   KILN_PROC_DRIVER_VERSION  kernel module version file    (/proc/driver/nvidia/version)
#   KILN_NVIDIA_SMI           nvidia-smi command, used when that file is missing (nvidia-smi)
#   KILN_DEV_DIR              where the /dev/nvidiaN device nodes live (/dev)
#   CUDA_VERSION              the image's CUDA version; set by the nvidia/cuda images (13.0.1)
#   KILN_CUDA_VERSION_JSON    read when CUDA_VERSION is unset  (/usr/local/cuda/version.json)
#   KILN_CUDA_COMPAT_DIR      the compat libraries              (/usr/local/cuda/compat)
#   KILN_LDCONFIG             prints the loader cache with `-p` (ldconfig)
#   KILN_COMPAT_PROBE         a shell command that exits 0 when CUDA works with the compat
#                             libraries first on LD_LIBRARY_PATH (run with that LD_LIBRARY_PATH
#                             and KILN_CUDA_COMPAT_DIR exported). Default: see probe_default.
#   KILN_COMPAT_PROBE_TIMEOUT seconds the probe may take (30)
#   KILN_BIN                  the kiln binary asked for `doctor --probe-cuda` (kiln)
#   KILN_LD_SO                the dynamic loader used by the shell-only probe (found by glob)
#
# The driver's CUDA version comes from the kernel module's version and the table below, not from
# nvidia-smi's "CUDA Version": that one is reported by the libcuda nvidia-smi loads, which is the
# compat one once compatibility is on, so it cannot tell whether compatibility is needed.
set -u

say() { printf 'kiln-entrypoint: %s\n' "$*" >&2; }

if (($# == 0)); then
  say "no command given (usage: kiln-entrypoint COMMAND [ARGS...], e.g. kiln --help)"
  exit 2
fi

proc_version_file=${KILN_PROC_DRIVER_VERSION:-/proc/driver/nvidia/version}
nvidia_smi=${KILN_NVIDIA_SMI:-nvidia-smi}
dev_dir=${KILN_DEV_DIR:-/dev}
version_json=${KILN_CUDA_VERSION_JSON:-/usr/local/cuda/version.json}
compat_dir=${KILN_CUDA_COMPAT_DIR:-/usr/local/cuda/compat}
compat_dir=${compat_dir%/}
ldconfig_cmd=${KILN_LDCONFIG:-ldconfig}
probe_timeout=${KILN_COMPAT_PROBE_TIMEOUT:-30}
kiln_bin=${KILN_BIN:-kiln}

# The newest CUDA each Linux driver branch supports, from NVIDIA's table "CUDA Toolkit and
# Corresponding Driver Versions" (CUDA Toolkit Release Notes, "CUDA Driver" section; minimum
# driver per toolkit release): 13.1 >= 590, 13.0 >= 580, 12.9 >= 575, 12.8 >= 570,
# 12.6 >= 560, 12.5 >= 555, 12.4 >= 550, 12.3 >= 545, 12.2 >= 535, 12.1 >= 530, 12.0 >= 525,
# 11.8 >= 520, 11.7 >= 515, 11.6 >= 510, 11.5 >= 495, 11.4 >= 470, 11.3 >= 465, 11.2 >= 460,
# 11.1 >= 455, 11.0 >= 450; the 565 branch reports CUDA 12.7 (no 12.7 toolkit was released). A
# branch is the driver's major version; update releases of a toolkit (12.2.2 ...) need at most a
# later driver of the same branch, and only major.minor is compared. (CUDA's minor-version
# compatibility may run a 12.x image on an older 12.x driver without these libraries; it never
# crosses a major version, and the compat libraries, when they load, are the safer choice.)
# Newest first; add a row when NVIDIA publishes a new branch.
DRIVER_CUDA_TABLE="590:13.1 580:13.0 575:12.9 570:12.8 565:12.7 560:12.6 555:12.5 550:12.4
545:12.3 535:12.2 530:12.1 525:12.0 520:11.8 515:11.7 510:11.6 495:11.5 470:11.4 465:11.3
460:11.2 455:11.1 450:11.0"

# cuda_for_branch MAJOR: the newest CUDA (X.Y) that driver branch MAJOR supports, or nothing when
# it is older than every row.
cuda_for_branch() {
  local row
  for row in $DRIVER_CUDA_TABLE; do
    if (($1 >= ${row%%:*})); then
      printf '%s\n' "${row#*:}"
      return
    fi
  done
}

newest_branch() {
  local rows
  read -r -a rows <<<"$DRIVER_CUDA_TABLE"
  printf '%s\n' "${rows[0]%%:*}"
}

# version_lt A B: dotted numeric comparison, A < B (missing components count as 0).
version_lt() {
  local -a a b
  local i n x y
  IFS=. read -r -a a <<<"$1"
  IFS=. read -r -a b <<<"$2"
  n=$((${#a[@]} > ${#b[@]} ? ${#a[@]} : ${#b[@]}))
  for ((i = 0; i < n; i++)); do
    x=$((10#${a[i]:-0}))
    y=$((10#${b[i]:-0}))
    ((x < y)) && return 0
    ((x > y)) && return 1
  done
  return 1
}

is_version() { [[ $1 =~ ^[0-9]+(\.[0-9]+)*$ ]]; }

# The host driver's version: the kernel module's (procfs), else nvidia-smi's. Sets
# driver_version; returns 1 when there is neither.
read_driver_version() {
  local line word
  local -a words
  driver_version=""
  if [[ -r $proc_version_file ]]; then
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..." or
    # "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build ..."
    while IFS= read -r line; do
      [[ $line == NVRM* ]] || continue
      read -r -a words <<<"$line"
      for word in "${words[@]}"; do
        if [[ $word =~ ^[0-9]+\.[0-9]+(\.[0-9]+)?$ ]]; then
          driver_version=$word
          break 2
        fi
      done
    done <"$proc_version_file"
    [[ -n $driver_version ]] && return 0
  fi
  if command -v "$nvidia_smi" >/dev/null 2>&1; then
    line=$("$nvidia_smi" --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
    line=${line//[[:space:]]/}
    if is_version "$line"; then
      driver_version=$line
      return 0
    fi
  fi
  return 1
}

# The image's CUDA version as X.Y: CUDA_VERSION, else version.json's "cuda" entry.
read_image_cuda() {
  local v=${CUDA_VERSION:-}
  if [[ -z $v && -r $version_json ]]; then
    # {"cuda" : {"name" : "CUDA SDK", "version" : "13.0.1"}, "cuda_cccl" : {...}, ...}
    v=$(sed -n '/"cuda"[[:space:]]*:/,/}/ s/.*"version"[[:space:]]*:[[:space:]]*"\([0-9.]*\)".*/\1/p' \
      "$version_json" | head -n 1)
  fi
  if [[ $v =~ ^([0-9]+)\.([0-9]+) ]]; then
    image_cuda="${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
    return 0
  fi
  return 1
}

canonical_dir() { (cd -P -- "$1" 2>/dev/null && pwd -P); }

# Returns 0 (and sets already_why) when forward compatibility is already on.
compat_already_enabled() {
  local entry path lib_dir canon
  local -a entries
  canon=$(canonical_dir "$compat_dir")
  IFS=: read -r -a entries <<<"${LD_LIBRARY_PATH:-}"
  for entry in "${entries[@]}"; do
    entry=${entry%/}
    [[ -z $entry ]] && continue
    if [[ $entry == "$compat_dir" || (-n $canon && $(canonical_dir "$entry") == "$canon") ]]; then
      already_why="$compat_dir is already on LD_LIBRARY_PATH"
      return 0
    fi
  done
  if command -v "$ldconfig_cmd" >/dev/null 2>&1; then
    # "	libcuda.so.1 (libc6,x86-64) => /usr/local/cuda-13.0/compat/libcuda.so.1"
    path=$("$ldconfig_cmd" -p 2>/dev/null | sed -n 's/^[[:space:]]*libcuda\.so\.1 .*=> \(.*\)$/\1/p' | head -n 1)
    if [[ -n $path ]]; then
      lib_dir=${path%/*}
      if [[ $lib_dir == "$compat_dir" || (-n $canon && $(canonical_dir "$lib_dir") == "$canon") ]]; then
        already_why="the loader cache already resolves libcuda.so.1 to $path (enabled by the container runtime)"
        return 0
      fi
    fi
  fi
  return 1
}

find_ld_so() {
  local f
  if [[ -n ${KILN_LD_SO:-} ]]; then
    printf '%s\n' "$KILN_LD_SO"
    return
  fi
  for f in /lib64/ld-linux-x86-64.so.2 /lib/ld-linux-aarch64.so.1 /lib64/ld-linux-aarch64.so.1; do
    if [[ -x $f ]]; then
      printf '%s\n' "$f"
      return
    fi
  done
}

# The shell-only probe, for images whose kiln has no `doctor --probe-cuda`. It cannot call cuInit
# (that needs a program linked against libcuda), so it checks what a shell can: libcuda.so.1 is
# an ELF file, its version (the libcuda.so.X.Y.Z it points to) is newer than the host driver
# (forward compatibility only ever means a newer user-mode driver), and the dynamic loader itself
# resolves it and its dependencies (`ld.so --list`, which is what ldd runs). Prints what it did;
# returns non-zero with the reason on failure.
probe_shell() {
  local lib="$compat_dir/libcuda.so.1" real magic ver ld_so out
  real=$(readlink -f -- "$lib") || real=$lib
  magic=$(head -c 4 -- "$real" 2>/dev/null)
  if [[ $magic != $'\177ELF' ]]; then
    echo "$lib is not an ELF shared library"
    return 1
  fi
  ver=${real##*/libcuda.so.}
  if is_version "$ver" && [[ $ver == *.* ]]; then
    if ! version_lt "$driver_version" "$ver"; then
      echo "compat libcuda $ver is not newer than the host driver $driver_version"
      return 1
    fi
  else
    ver=""
  fi
  ld_so=$(find_ld_so)
  if [[ -z $ld_so ]]; then
    echo "no dynamic loader found to check $lib with (set KILN_LD_SO)"
    return 1
  fi
  if ! out=$(LD_LIBRARY_PATH="$new_ld_library_path" "$ld_so" --list "$real" 2>&1) ||
    [[ $out == *"not found"* ]]; then
    out=${out//$'\n'/ }
    echo "the dynamic loader cannot load $real: ${out:0:200}"
    return 1
  fi
  echo "shell check: libcuda ${ver:-(version unknown)} loads and is newer than the driver; cuInit not tried"
  return 0
}

# Runs the probe; prints a short description (on success) or the reason (on failure).
run_probe() {
  local out rc=0 last
  local -a timeout_cmd=()
  if command -v timeout >/dev/null 2>&1; then
    timeout_cmd=(timeout "$probe_timeout")
  fi
  if [[ -n ${KILN_COMPAT_PROBE:-} ]]; then
    out=$(LD_LIBRARY_PATH="$new_ld_library_path" KILN_CUDA_COMPAT_DIR="$compat_dir" \
      "${timeout_cmd[@]}" bash -c "$KILN_COMPAT_PROBE" 2>&1) || rc=$?
    probe_name="KILN_COMPAT_PROBE"
  elif command -v "$kiln_bin" >/dev/null 2>&1 &&
    "$kiln_bin" doctor --help 2>/dev/null | grep -q -- '--probe-cuda'; then
    # The real test: cuInit and a device query with the compat libcuda, from kiln itself.
    out=$(LD_LIBRARY_PATH="$new_ld_library_path" KILN_CUDA_COMPAT_DIR="$compat_dir" \
      "${timeout_cmd[@]}" "$kiln_bin" doctor --probe-cuda 2>&1) || rc=$?
    probe_name="kiln doctor --probe-cuda"
  else
    out=$(probe_shell) || rc=$?
    probe_name="shell check"
  fi
  out=${out%$'\n'}
  last=${out##*$'\n'}
  if ((rc != 0)); then
    [[ -z $last ]] && last="exit status $rc"
    ((rc == 124)) && last="timed out after ${probe_timeout}s"
    probe_detail="$probe_name: $last"
    return 1
  fi
  if [[ $probe_name == "shell check" ]]; then
    probe_detail=$last
  else
    probe_detail=$probe_name
  fi
  return 0
}

main() {
  local cuda_max top_branch major
  if [[ ${KILN_CUDA_COMPAT:-auto} == off ]]; then
    say "KILN_CUDA_COMPAT=off; CUDA forward compatibility not considered"
    return
  fi
  if ! read_driver_version; then
    say "no NVIDIA GPU visible (no driver version in $proc_version_file, no $nvidia_smi); CUDA forward compatibility not needed"
    return
  fi
  if ! compgen -G "$dev_dir/nvidia[0-9]*" >/dev/null; then
    say "no NVIDIA GPU visible (driver $driver_version loaded but no $dev_dir/nvidiaN device in this container); CUDA forward compatibility not needed"
    return
  fi
  if compat_already_enabled; then
    say "host driver $driver_version; $already_why; leaving it"
    return
  fi
  if ! read_image_cuda; then
    say "warning: the image's CUDA version is unknown (CUDA_VERSION unset, no readable $version_json); leaving LD_LIBRARY_PATH alone"
    return
  fi
  major=${driver_version%%.*}
  cuda_max=$(cuda_for_branch "$major")
  top_branch=$(newest_branch)
  if [[ -z $cuda_max ]]; then
    say "warning: host driver $driver_version is older than every branch kiln-entrypoint knows (oldest 450, CUDA 11.0); it cannot run image CUDA $image_cuda; not enabling forward compatibility"
    return
  fi
  if ((major > top_branch)) && version_lt "$cuda_max" "$image_cuda"; then
    say "host driver $driver_version is newer than every branch in kiln-entrypoint's table (newest $top_branch, CUDA $cuda_max); assuming it supports image CUDA $image_cuda; forward compatibility not enabled"
    return
  fi
  if ! version_lt "$cuda_max" "$image_cuda"; then
    say "host driver $driver_version supports CUDA $cuda_max >= image CUDA $image_cuda; forward compatibility not needed"
    return
  fi
  if [[ ! -e $compat_dir/libcuda.so.1 ]]; then
    say "warning: host driver $driver_version supports CUDA $cuda_max < image CUDA $image_cuda, but $compat_dir has no libcuda.so.1; not enabling forward compatibility (CUDA will fail: upgrade the host driver to branch >= the image's)"
    return
  fi
  new_ld_library_path=$compat_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if ! run_probe; then
    say "warning: host driver $driver_version supports CUDA $cuda_max < image CUDA $image_cuda; compat probe failed ($probe_detail); not enabling $compat_dir"
    return
  fi
  export LD_LIBRARY_PATH=$new_ld_library_path
  say "host driver $driver_version supports CUDA $cuda_max < image CUDA $image_cuda; compat libraries probed OK ($probe_detail); enabling $compat_dir"
}

driver_version=""
image_cuda=""
already_why=""
new_ld_library_path=""
probe_name=""
probe_detail=""
main
exec "$@"
