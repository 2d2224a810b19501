#!/usr/bin/env bash
# Tests deploy/entrypoint.sh (the image's kiln-entrypoint) on fixture machines: fake
# /proc/driver/nvidia/version files, a fake nvidia-smi, fake /dev/nvidiaN nodes, fake compat
# directories, a fake loader cache (ldconfig -p), fake probes and a fake kiln. Each case runs the
# entrypoint in a clean environment (env -i) with a command that prints the LD_LIBRARY_PATH and
# the arguments it received, and asserts the exact outcome: the library path the command sees,
# the line the entrypoint printed, whether the probe ran, the exit status.
# Prints "N passed, M failed"; exits non-zero when any case failed.
set -u

here=$(cd "$(dirname "$0")" && pwd)
entry=$(cd "$here/../.." && pwd)/deploy/entrypoint.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

passed=0
failed=0
case_name=""
case_errors=()
n=0

# A real shared library to stand in for a compat libcuda.so (the shell-only probe loads it with
# the dynamic loader).
real_lib=""
for f in /lib/x86_64-linux-gnu/libm.so.6 /usr/lib/x86_64-linux-gnu/libm.so.6 \
  /lib/aarch64-linux-gnu/libm.so.6 /usr/lib/aarch64-linux-gnu/libm.so.6 /usr/lib64/libm.so.6; do
  if [[ -e $f ]]; then
    real_lib=$(readlink -f "$f")
    break
  fi
done

# ---- fixtures ---------------------------------------------------------------------------------

# new_machine: a fresh fixture directory $fx with a GPU device node, no driver, no compat.
new_machine() {
  n=$((n + 1))
  fx=$tmp/m$n
  mkdir -p "$fx/dev" "$fx/bin"
  : >"$fx/dev/nvidia0"
  : >"$fx/dev/nvidiactl"
  # The loader cache: the host's libcuda, as the NVIDIA Container Toolkit mounts it.
  printf '#!/bin/sh\nprintf "\\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\\n"\n' \
    >"$fx/bin/ldconfig"
  chmod +x "$fx/bin/ldconfig"
}

# proc_driver VERSION: a /proc/driver/nvidia/version of the proprietary kernel module.
proc_driver() {
  printf 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Sat Aug 19 01:15:15 UTC 2023\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n' \
    "$1" >"$fx/proc_version"
}

# compat_dir VERSION [elf|text]: $fx/compat with libcuda.so.1 -> libcuda.so.VERSION.
compat_dir() {
  mkdir -p "$fx/compat"
  if [[ ${2:-elf} == elf && -n $real_lib ]]; then
    cp "$real_lib" "$fx/compat/libcuda.so.$1"
  else
    echo "not a library" >"$fx/compat/libcuda.so.$1"
  fi
  ln -s "libcuda.so.$1" "$fx/compat/libcuda.so.1"
}

# A probe that records that it ran, the LD_LIBRARY_PATH and compat dir it saw, and exits 0.
probe_ok() {
  # shellcheck disable=SC2016  # expanded by the probe's shell, not here
  printf 'echo "$LD_LIBRARY_PATH" > %q/probe_ran; echo "$KILN_CUDA_COMPAT_DIR" >> %q/probe_ran; exit 0' \
    "$fx" "$fx"
}

# ---- running and asserting --------------------------------------------------------------------

# run [VAR=VALUE | -u VAR ...]: runs the entrypoint on $fx with these variables set on top of
# the fixture's (or, with -u, unset); sets out (the command's stdout), err (the entrypoint's
# stderr), rc, seen_llp (the LD_LIBRARY_PATH the command saw, "<unset>" when unset) and seen_args.
run() {
  local -a base=(
    PATH="$PATH"
    KILN_PROC_DRIVER_VERSION="$fx/proc_version"
    KILN_NVIDIA_SMI="$fx/bin/nvidia-smi"
    KILN_DEV_DIR="$fx/dev"
    KILN_CUDA_VERSION_JSON="$fx/version.json"
    KILN_CUDA_COMPAT_DIR="$fx/compat"
    KILN_LDCONFIG="$fx/bin/ldconfig"
    KILN_BIN="$fx/bin/kiln"
    CUDA_VERSION=13.0.1
    LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64
  )
  local -a vars=()
  local v
  while (($#)); do
    if [[ $1 == -u ]]; then
      for v in "${!base[@]}"; do
        [[ ${base[v]} == "$2="* ]] && unset 'base[v]'
      done
      shift 2
    else
      vars+=("$1")
      shift
    fi
  done
  # shellcheck disable=SC2016  # expanded by the command's shell, not here
  out=$(env -i "${base[@]}" "${vars[@]}" bash "$entry" \
    bash -c 'printf "LD_LIBRARY_PATH=%s\n" "${LD_LIBRARY_PATH-<unset>}"; printf "ARGS="; printf "%s|" "$@"; echo' \
    cmd "a b" c 2>"$fx/stderr")
  rc=$?
  err=$(cat "$fx/stderr")
  seen_llp=$(sed -n 's/^LD_LIBRARY_PATH=//p' <<<"$out")
  seen_args=$(sed -n 's/^ARGS=//p' <<<"$out")
}

begin() {
  case_name=$1
  case_errors=()
}

check_eq() {  # what actual expected
  if [[ $2 != "$3" ]]; then
    case_errors+=("$1: expected [$3], got [$2]")
  fi
}

check_has() {  # what haystack needle
  if [[ $2 != *"$3"* ]]; then
    case_errors+=("$1: expected it to contain [$3], got [$2]")
  fi
}

check_file() {  # what path exists(yes|no)
  if [[ $3 == yes && ! -e $2 ]]; then case_errors+=("$1: $2 should exist"); fi
  if [[ $3 == no && -e $2 ]]; then case_errors+=("$1: $2 should not exist"); fi
}

# The checks every case makes: the command ran with its arguments intact, exit status 0, the
# entrypoint printed exactly one line.
check_common() {
  check_eq "exit status" "$rc" 0
  check_eq "arguments" "$seen_args" "a b|c|"
  check_eq "lines on stderr" "$(grep -c . <<<"$err")" 1
}

end() {
  if ((${#case_errors[@]} == 0)); then
    passed=$((passed + 1))
    echo "PASS $case_name"
  else
    failed=$((failed + 1))
    echo "FAIL $case_name"
    printf '     %s\n' "${case_errors[@]}"
    printf '     stderr: %s\n' "$err"
  fi
}

default_llp=/usr/local/nvidia/lib:/usr/local/nvidia/lib64
p=kiln-entrypoint

# ---- cases ------------------------------------------------------------------------------------

begin "driver newer than the image's CUDA: compat not enabled, probe not run"
new_machine
proc_driver 580.65.06
compat_dir 580.65.06
run KILN_COMPAT_PROBE="$(probe_ok)"
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: host driver 580.65.06 supports CUDA 13.0 >= image CUDA 13.0; forward compatibility not needed"
check_file "probe" "$fx/probe_ran" no
end

begin "driver newer than the image's CUDA (570 vs 12.4): not needed"
new_machine
proc_driver 570.133.20
compat_dir 580.65.06
run CUDA_VERSION=12.4.1
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: host driver 570.133.20 supports CUDA 12.8 >= image CUDA 12.4; forward compatibility not needed"
end

begin "driver older, compat present, probe OK: compat enabled, first on LD_LIBRARY_PATH"
new_machine
proc_driver 535.104.05
compat_dir 580.65.06
run KILN_COMPAT_PROBE="$(probe_ok)"
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$fx/compat:$default_llp"
check_eq "message" "$err" "$p: host driver 535.104.05 supports CUDA 12.2 < image CUDA 13.0; compat libraries probed OK (KILN_COMPAT_PROBE); enabling $fx/compat"
check_eq "probe saw" "$(cat "$fx/probe_ran" 2>/dev/null)" "$fx/compat:$default_llp
$fx/compat"
end

begin "driver older, compat enabled with LD_LIBRARY_PATH unset: exactly the compat dir"
new_machine
proc_driver 550.54.15
compat_dir 580.65.06
run KILN_COMPAT_PROBE="$(probe_ok)" -u LD_LIBRARY_PATH
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$fx/compat"
check_eq "message" "$err" "$p: host driver 550.54.15 supports CUDA 12.4 < image CUDA 13.0; compat libraries probed OK (KILN_COMPAT_PROBE); enabling $fx/compat"
end

begin "driver older, no compat directory: not enabled, warning"
new_machine
proc_driver 535.104.05
run KILN_COMPAT_PROBE="$(probe_ok)"
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: warning: host driver 535.104.05 supports CUDA 12.2 < image CUDA 13.0, but $fx/compat has no libcuda.so.1; not enabling forward compatibility (CUDA will fail: upgrade the host driver to branch >= the image's)"
check_file "probe" "$fx/probe_ran" no
end

begin "driver older, compat probe fails: not enabled, warning with the probe's reason"
new_machine
proc_driver 535.104.05
compat_dir 580.65.06
run KILN_COMPAT_PROBE='echo "checking" ; echo "cuInit: CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE (804)" >&2; exit 3'
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: warning: host driver 535.104.05 supports CUDA 12.2 < image CUDA 13.0; compat probe failed (KILN_COMPAT_PROBE: cuInit: CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE (804)); not enabling $fx/compat"
end

begin "compat probe that hangs is cut off by the timeout"
new_machine
proc_driver 535.104.05
compat_dir 580.65.06
run KILN_COMPAT_PROBE='sleep 20' KILN_COMPAT_PROBE_TIMEOUT=1
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: warning: host driver 535.104.05 supports CUDA 12.2 < image CUDA 13.0; compat probe failed (KILN_COMPAT_PROBE: timed out after 1s); not enabling $fx/compat"
end

begin "compat already on LD_LIBRARY_PATH (runtime or caller): left alone, probe not run"
new_machine
proc_driver 535.104.05
compat_dir 580.65.06
run KILN_COMPAT_PROBE="$(probe_ok)" LD_LIBRARY_PATH="/opt/x:$fx/compat/:/usr/local/nvidia/lib"
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "/opt/x:$fx/compat/:/usr/local/nvidia/lib"
check_eq "message" "$err" "$p: host driver 535.104.05; $fx/compat is already on LD_LIBRARY_PATH; leaving it"
check_file "probe" "$fx/probe_ran" no
end

begin "compat already on LD_LIBRARY_PATH under another name (symlinked CUDA dir): left alone"
new_machine
proc_driver 535.104.05
mkdir -p "$fx/cuda-13.0"
ln -s cuda-13.0 "$fx/cuda"
fxc=$fx
fx=$fx/cuda-13.0 compat_dir 580.65.06
fx=$fxc
run KILN_CUDA_COMPAT_DIR="$fx/cuda/compat" LD_LIBRARY_PATH="$fx/cuda-13.0/compat:/usr/local/nvidia/lib" \
  KILN_COMPAT_PROBE="$(probe_ok)"
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$fx/cuda-13.0/compat:/usr/local/nvidia/lib"
check_eq "message" "$err" "$p: host driver 535.104.05; $fx/cuda/compat is already on LD_LIBRARY_PATH; leaving it"
check_file "probe" "$fx/probe_ran" no
end

begin "compat already enabled in the loader cache (container toolkit hook): left alone"
new_machine
proc_driver 535.104.05
compat_dir 580.65.06
printf '#!/bin/sh\nprintf "1 libs found in cache\\n\\tlibcuda.so.1 (libc6,x86-64) => %s/compat/libcuda.so.1\\n\\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\\n"\n' \
  "$fx" >"$fx/bin/ldconfig"
run KILN_COMPAT_PROBE="$(probe_ok)"
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: host driver 535.104.05; the loader cache already resolves libcuda.so.1 to $fx/compat/libcuda.so.1 (enabled by the container runtime); leaving it"
check_file "probe" "$fx/probe_ran" no
end

begin "no GPU at all (no driver file, no nvidia-smi): says so and execs"
new_machine
rm -f "$fx/dev/nvidia0" "$fx/dev/nvidiactl"
compat_dir 580.65.06
run KILN_COMPAT_PROBE="$(probe_ok)"
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: no NVIDIA GPU visible (no driver version in $fx/proc_version, no $fx/bin/nvidia-smi); CUDA forward compatibility not needed"
check_file "probe" "$fx/probe_ran" no
end

begin "driver on the host but no GPU device in this container: no GPU"
new_machine
rm -f "$fx/dev/nvidia0"
proc_driver 535.104.05
compat_dir 580.65.06
run KILN_COMPAT_PROBE="$(probe_ok)"
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: no NVIDIA GPU visible (driver 535.104.05 loaded but no $fx/dev/nvidiaN device in this container); CUDA forward compatibility not needed"
check_file "probe" "$fx/probe_ran" no
end

begin "driver version from nvidia-smi when procfs has none (two GPUs, first line used)"
new_machine
compat_dir 580.65.06
printf '#!/bin/sh\necho "$*" > %q/smi_args\nprintf "535.104.05\\n535.104.05\\n"\n' "$fx" >"$fx/bin/nvidia-smi"
chmod +x "$fx/bin/nvidia-smi"
run KILN_COMPAT_PROBE="$(probe_ok)"
check_common
check_eq "nvidia-smi arguments" "$(cat "$fx/smi_args" 2>/dev/null)" "--query-gpu=driver_version --format=csv,noheader"
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$fx/compat:$default_llp"
check_eq "message" "$err" "$p: host driver 535.104.05 supports CUDA 12.2 < image CUDA 13.0; compat libraries probed OK (KILN_COMPAT_PROBE); enabling $fx/compat"
end

begin "nvidia-smi failing (no devices) counts as no GPU"
new_machine
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' >"$fx/bin/nvidia-smi"
chmod +x "$fx/bin/nvidia-smi"
run
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: no NVIDIA GPU visible (no driver version in $fx/proc_version, no $fx/bin/nvidia-smi); CUDA forward compatibility not needed"
end

begin "open kernel module's version line is parsed"
new_machine
printf 'NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.133.20  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Mar 20 21:25:50 UTC 2025\n' \
  >"$fx/proc_version"
run
check_common
check_eq "message" "$err" "$p: warning: host driver 570.133.20 supports CUDA 12.8 < image CUDA 13.0, but $fx/compat has no libcuda.so.1; not enabling forward compatibility (CUDA will fail: upgrade the host driver to branch >= the image's)"
end

begin "image CUDA from version.json when CUDA_VERSION is unset"
new_machine
proc_driver 550.54.15
cat >"$fx/version.json" <<'EOF'
{
   "cuda" : {
      "name" : "CUDA SDK",
      "version" : "12.4.1"
   },
   "cuda_cccl" : {
      "name" : "CUDA C++ Core Compute Libraries",
      "version" : "12.4.127"
   }
}
EOF
run -u CUDA_VERSION
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: host driver 550.54.15 supports CUDA 12.4 >= image CUDA 12.4; forward compatibility not needed"
end

begin "image CUDA unknown: warning, library path untouched"
new_machine
proc_driver 535.104.05
compat_dir 580.65.06
run -u CUDA_VERSION KILN_COMPAT_PROBE="$(probe_ok)"
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: warning: the image's CUDA version is unknown (CUDA_VERSION unset, no readable $fx/version.json); leaving LD_LIBRARY_PATH alone"
check_file "probe" "$fx/probe_ran" no
end

begin "driver older than every known branch: warning, not enabled"
new_machine
proc_driver 440.33.01
compat_dir 580.65.06
run KILN_COMPAT_PROBE="$(probe_ok)"
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: warning: host driver 440.33.01 is older than every branch kiln-entrypoint knows (oldest 450, CUDA 11.0); it cannot run image CUDA 13.0; not enabling forward compatibility"
end

begin "driver branch newer than the table: assumed new enough"
new_machine
proc_driver 610.10
compat_dir 580.65.06
run CUDA_VERSION=14.0.0 KILN_COMPAT_PROBE="$(probe_ok)"
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: host driver 610.10 is newer than every branch in kiln-entrypoint's table (newest 590, CUDA 13.1); assuming it supports image CUDA 14.0; forward compatibility not enabled"
check_file "probe" "$fx/probe_ran" no
end

begin "default probe without kiln doctor --probe-cuda: shell check passes on a loadable library"
if [[ -z $real_lib ]]; then
  case_errors+=("no libm.so.6 found to stand in for libcuda")
else
  new_machine
  proc_driver 535.104.05
  compat_dir 580.65.06 elf
  run
  check_common
  check_eq "LD_LIBRARY_PATH" "$seen_llp" "$fx/compat:$default_llp"
  check_eq "message" "$err" "$p: host driver 535.104.05 supports CUDA 12.2 < image CUDA 13.0; compat libraries probed OK (shell check: libcuda 580.65.06 loads and is newer than the driver; cuInit not tried); enabling $fx/compat"
fi
end

begin "shell check: libcuda.so.1 that is not a library fails the probe"
new_machine
proc_driver 535.104.05
compat_dir 580.65.06 text
run
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: warning: host driver 535.104.05 supports CUDA 12.2 < image CUDA 13.0; compat probe failed (shell check: $fx/compat/libcuda.so.1 is not an ELF shared library); not enabling $fx/compat"
end

begin "shell check: compat libcuda not newer than the host driver fails the probe"
new_machine
proc_driver 535.104.05
compat_dir 535.54.03 elf
run CUDA_VERSION=12.4.0
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: warning: host driver 535.104.05 supports CUDA 12.2 < image CUDA 12.4; compat probe failed (shell check: compat libcuda 535.54.03 is not newer than the host driver 535.104.05); not enabling $fx/compat"
end

begin "shell check: the loader refusing the library fails the probe"
new_machine
proc_driver 535.104.05
compat_dir 580.65.06 elf
printf '#!/bin/sh\necho "libnvidia-ptxjitcompiler.so.1 => not found"\n' >"$fx/bin/ld.so"
chmod +x "$fx/bin/ld.so"
run KILN_LD_SO="$fx/bin/ld.so"
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_has "message" "$err" "compat probe failed (shell check: the dynamic loader cannot load $fx/compat/libcuda.so.580.65.06: libnvidia-ptxjitcompiler.so.1 => not found); not enabling $fx/compat"
end

# A fake kiln whose doctor has --probe-cuda; the probe exits with $1 and records LD_LIBRARY_PATH.
fake_kiln() {
  cat >"$fx/bin/kiln" <<EOF
#!/bin/sh
if [ "\$1 \$2" = "doctor --help" ]; then echo "  --probe-cuda   cuInit with the libcuda the loader finds"; exit 0; fi
if [ "\$1 \$2" = "doctor --probe-cuda" ]; then
  echo "\$LD_LIBRARY_PATH" > "$fx/probe_ran"
  [ $1 -eq 0 ] || echo "cuInit failed: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803)"
  exit $1
fi
exit 64
EOF
  chmod +x "$fx/bin/kiln"
}

begin "default probe is kiln doctor --probe-cuda when kiln has it: OK enables"
new_machine
proc_driver 535.104.05
compat_dir 580.65.06 text
fake_kiln 0
run
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$fx/compat:$default_llp"
check_eq "probe saw" "$(cat "$fx/probe_ran" 2>/dev/null)" "$fx/compat:$default_llp"
check_eq "message" "$err" "$p: host driver 535.104.05 supports CUDA 12.2 < image CUDA 13.0; compat libraries probed OK (kiln doctor --probe-cuda); enabling $fx/compat"
end

begin "default probe is kiln doctor --probe-cuda when kiln has it: failure does not enable"
new_machine
proc_driver 535.104.05
compat_dir 580.65.06 elf
fake_kiln 1
run
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: warning: host driver 535.104.05 supports CUDA 12.2 < image CUDA 13.0; compat probe failed (kiln doctor --probe-cuda: cuInit failed: CUDA_ERROR_SYSTEM_DRIVER_MISMATCH (803)); not enabling $fx/compat"
end

begin "KILN_CUDA_COMPAT=off skips everything"
new_machine
proc_driver 535.104.05
compat_dir 580.65.06
run KILN_CUDA_COMPAT=off KILN_COMPAT_PROBE="$(probe_ok)"
check_common
check_eq "LD_LIBRARY_PATH" "$seen_llp" "$default_llp"
check_eq "message" "$err" "$p: KILN_CUDA_COMPAT=off; CUDA forward compatibility not considered"
check_file "probe" "$fx/probe_ran" no
end

begin "the command's exit status and stdout pass through untouched"
new_machine
proc_driver 580.65.06
env -i PATH="$PATH" KILN_PROC_DRIVER_VERSION="$fx/proc_version" KILN_DEV_DIR="$fx/dev" \
  KILN_LDCONFIG="$fx/bin/ldconfig" CUDA_VERSION=13.0.1 \
  bash "$entry" sh -c 'echo "only this"; exit 7' >"$fx/stdout" 2>/dev/null
rc=$?
check_eq "exit status" "$rc" 7
check_eq "stdout" "$(cat "$fx/stdout")" "only this"
end

begin "no command: usage, exit 2"
new_machine
env -i PATH="$PATH" bash "$entry" >"$fx/stdout" 2>"$fx/stderr"
rc=$?
err=$(cat "$fx/stderr")
check_eq "exit status" "$rc" 2
check_eq "message" "$err" "$p: no command given (usage: kiln-entrypoint COMMAND [ARGS...], e.g. kiln --help)"
end

echo "$passed passed, $failed failed"
((failed == 0))
