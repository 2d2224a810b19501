#!/usr/bin/env bash
# The GPU check, on the GPU machine: `bash gpu_pack/run.sh OUTDIR` (packed by
# scripts/gpu_check.sh pack, which says how to call the device tool). No network needed.
#
# Stages, in the order of what matters most if the run is cut short; every command under its own
# timeout (its cap, never past the overall budget KILN_GPU_CHECK_BUDGET_S, 540 s), continuing
# past failures; OUTDIR/summary.md is rewritten after every row, so a kill leaves every row so far:
#   env        nvidia-smi, PyTorch's import (the machine's own python and environment), kiln doctor
#   gemm       bf16 cuBLASLt ceiling and copy bandwidth (cuda_gemm_ceiling): MFU's and the
#              rooflines' denominators, beside the GPU's published peak
#   kiln-bench kiln bench train --dtype bf16, qwen2.5-0.5b, qwen2.5-1.5b and qwen3-0.6b at 2048
#              tokens: throughput, MFU, memory, the first step's loss against ln(vocabulary),
#              and each phase's time beside its roofline estimate; then kiln bench dpo on the
#              first with LoRA rank 16 on every projection: the SFT step's throughput, a DPO
#              step's with a live and a precomputed reference, each side's device peak. A failing row is rerun once small (one step,
#              sequence 256) under CUDA_LAUNCH_BLOCKING=1 and once under compute-sanitizer
#              memcheck limited to kiln's kernels, to name the kernel and the line.
#   torch      the Qwen2.5 shapes by PyTorch (pytorch_gpu_train_bench.py) and kiln/PyTorch ratio
#   tests      the pack's test binaries (the parity suite, attention, pointwise, NCCL, ...)
#   tiny       kiln init + train on CPU fp32 and CUDA bf16 from one seed: tiny (head_dim 16: the
#              reference attention), tiny-hd64 and tiny-hd128 (the flash kernels): loss curves
#              within tolerance, CUDA twice (identical losses), 2 workers vs 1
#   sanitizer  compute-sanitizer memcheck and racecheck (kiln's kernels only) on the parity
#              suite's Tiny/ cases and the attention test's small ones (sanitizer_cases below)
# Results in OUTDIR (at most 8 files): summary.md (the table), env.txt, gemm.txt, bench.txt,
# tests.txt, tiny.txt, sanitizer.txt, results.jsonl.
#
# Libraries: kiln's processes get a private folder (the pack's own libraries plus links to the
# CUDA libraries they open at run time, NCCL and cuBLASLt, found here: the toolkit, the driver's
# folder, a virtual environment's site-packages/nvidia/*/lib, the loader's cache) on their
# LD_LIBRARY_PATH; python runs in the machine's own environment.
#
# KILN_GPU_CHECK_FAKE=cpu: no GPU needed; kiln's stages run on the CPU at tiny sizes, every
# GPU-only command sleeps its expected duration times KILN_GPU_CHECK_TIME_SCALE (1) instead, and
# the plan's expected durations are kept in WORK/ledger (tests/cli/gpu_check_test.sh runs it).
# Other knobs: KILN_GPU_CHECK_BATCH (2), KILN_GPU_CHECK_STEPS (tiny-model steps, 20),
# KILN_GPU_CHECK_WORK (scratch, /tmp/kiln_gpu_check), KILN_GPU_CHECK_PYTHON (the python3 with
# torch and transformers, default python3), KILN_GPU_CHECK_STAGES (the stages to run, default
# all), KILN_GPU_CHECK_PRESETS (kiln's bench presets), KILN_GPU_CHECK_TORCH_PRESETS (PyTorch's,
# those of kiln's it also runs: Qwen3-0.6B's row is kiln's alone, to keep the plan inside the
# budget), KILN_GPU_CHECK_LIB_ROOTS and
# KILN_GPU_CHECK_SITE_PACKAGES (more folders to look for libraries in, searched first).
#
#   run.sh --list-filters   prints the sanitizer's selections (binary, gtest filter) and exits
set -u

# The sanitizer's selections: binary, gtest filter. The parity suite's Tiny/ instances and the
# attention test's small cases; tests/cli/gpu_check_test.sh asserts that each filter selects at
# least one test of the built binary.
sanitizer_cases() {
  echo "backend_parity_test Tiny/BackendParity.*/Cuda*"
  echo "cuda_attention_test CudaAttention.*Tiny*:CudaAttention.FlashGroupedQueryHeads:CudaAttention.FlashDocumentBoundaries"
}
# compute-sanitizer's selection of kiln's own kernels (every kernel of kiln is in namespace
# kiln::cuda: tests/cli/gpu_check_test.sh checks the built library), leaving cuBLASLt's and
# NCCL's alone.
kiln_kernels=(--kernel-name kns=kiln)
if [[ ${1:-} == --list-filters ]]; then
  sanitizer_cases
  exit 0
fi

pack=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: run.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
fake=${KILN_GPU_CHECK_FAKE:-}
budget=${KILN_GPU_CHECK_BUDGET_S:-540}
scale=${KILN_GPU_CHECK_TIME_SCALE:-1}
stages=" ${KILN_GPU_CHECK_STAGES:-env gemm kiln-bench torch tests tiny sanitizer} "
start=$(date +%s)
deadline=$((start + budget))
work=${KILN_GPU_CHECK_WORK:-/tmp/kiln_gpu_check}
python=${KILN_GPU_CHECK_PYTHON:-python3}
results=$out/results.jsonl
summary=$out/summary.md
ledger=$work/ledger
: >"$results"

say() { echo "gpu_check: $*"; }
stage() { [[ $stages == *" $1 "* ]]; }

# One row of summary.md (step, status ok|FAIL|skipped|missing|timeout, key figures); the summary
# is rewritten at once (report.py record), before anything else runs.
record() {
  python3 "$pack/report.py" record "$results" "$summary" "$start" "$budget" "$1" "$2" "${3:-}"
  say "$1: $2${3:+ ($3)}"
}

status_of() {
  case "$1" in
    0) echo ok ;;
    77) echo skipped ;;
    124 | 137) echo timeout ;;
    *) echo FAIL ;;
  esac
}

# The plan: every command's expected duration on the GPU machine (and its cap) goes to the
# ledger; in fake mode the GPU-only ones sleep that long, scaled.
plan() { # expected cap what
  echo "$1 $2 $3" >>"$ledger"
}
fake_sleep() { sleep "$(awk -v s="$1" -v k="$scale" 'BEGIN { print s * k }')"; }
# A command in a few words: every path without its folders.
label() {
  local a words=()
  for a in "$@"; do words+=("${a##*/}"); done
  echo "${words[*]}" | cut -c1-100
}

# Runs "$@" with output appended to LOG, under timeout min(CAP, what is left of the budget).
# Returns its status (124: timed out or no budget left).
run_logged() { # cap log cmd...
  local cap=$1 log=$2 left secs rc
  shift 2
  left=$((deadline - $(date +%s)))
  secs=$((cap < left ? cap : left))
  echo "\$ $*" >>"$log"
  if ((secs < 3)); then
    echo "(not run: the budget of ${budget}s is spent)" >>"$log"
    return 124
  fi
  timeout -k 5 "$secs" "$@" >>"$log" 2>&1
  rc=$?
  ((rc == 124 || rc == 137)) && echo "(timed out after ${secs}s)" >>"$log"
  return "$rc"
}
# A command only a GPU machine runs: planned, then run (or, in fake mode, slept and skipped).
gpu_cmd() { # expected cap log cmd...
  plan "$1" "$2" "$(label "${@:4}")"
  if [[ -n $fake ]]; then
    echo "\$ ${*:4}" >>"$3"
    echo "(fake run: slept ${1}s x $scale instead)" >>"$3"
    fake_sleep "$1"
    return 77
  fi
  run_logged "$2" "${@:3}"
}
# A kiln command, which fake mode runs on the CPU: planned, run with kiln's libraries.
kiln_cmd() { # expected cap log cmd...
  plan "$1" "$2" "$(label "${@:4}")"
  run_logged "$2" "$3" env "LD_LIBRARY_PATH=$kiln_ld" "${@:4}"
}

# --- no GPU: one line, at once --------------------------------------------------------------
if [[ -z $fake ]]; then
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    say "no GPU: nvidia-smi not found" | tee "$summary"
    exit 2
  fi
  if ! smi=$(timeout 20 nvidia-smi -L 2>&1) || [[ -z $smi ]]; then
    say "no GPU: nvidia-smi failed: ${smi//$'\n'/ }" | tee "$summary"
    exit 2
  fi
fi

# --- unpack ---------------------------------------------------------------------------------
if [[ ! -f $pack/payload.tar.xz || ! -f $pack/report.py ]]; then
  say "no payload.tar.xz and report.py beside run.sh: make them with scripts/gpu_check.sh pack" |
    tee "$summary"
  exit 2
fi
rm -rf "$work"
mkdir -p "$work"
: >"$ledger"
python3 "$pack/report.py" summary "$results" "$summary" "$start" "$budget" >/dev/null
if command -v xz >/dev/null 2>&1; then
  xz -dc "$pack/payload.tar.xz" | tar -C "$work" -xf -
else
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$pack/payload.tar.xz" "$work"
fi
bin=$work/bin
mkdir -p "$work/lib"
# Tests find their fixtures under the source directory compiled into them: point it here.
src_dir=$(sed -n 's/^source_dir=//p' "$pack/pack.env")
repo=$(cd "$pack/.." && pwd)
if [[ -n $src_dir && ! -e $src_dir && -z $fake ]]; then
  mkdir -p "$(dirname "$src_dir")" && ln -s "$repo" "$src_dir"
fi
# ... and some run the kiln binary of the build directory compiled into them.
build_dir=$(sed -n 's/^build_dir=//p' "$pack/pack.env")
if [[ -n $build_dir && ! -e $build_dir/bin/kiln && -z $fake ]]; then
  mkdir -p "$build_dir/bin" && ln -s "$bin/kiln" "$build_dir/bin/kiln"
fi
# Keeps the driver loaded between the ~40 process starts (and records clocks and memory).
if [[ -z $fake ]]; then
  nvidia-smi --format=csv -lms 1000 \
    --query-gpu=timestamp,utilization.gpu,memory.used,clocks.sm,power.draw,temperature.gpu \
    >"$work/smi.csv" 2>&1 &
  smi_pid=$!
  trap 'kill "$smi_pid" 2>/dev/null' EXIT
fi

# --- kiln's private library folder ----------------------------------------------------------
# Folders a library is looked for in, in order: the caller's, the CUDA toolkit, the driver's,
# the system's, then virtual environments' NVIDIA wheels (site-packages/nvidia/*/lib).
lib_dirs=()
IFS=: read -r -a extra <<<"${KILN_GPU_CHECK_LIB_ROOTS:-}"
lib_dirs+=("${extra[@]}")
lib_dirs+=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib
  /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64)
site_packages() {
  local s
  IFS=: read -r -a s <<<"${KILN_GPU_CHECK_SITE_PACKAGES:-}"
  printf '%s\n' "${s[@]}"
  compgen -G '/opt/*/.venv/lib/python3*/site-packages' || true
  compgen -G '/usr/local/lib/python3*/dist-packages' || true
  timeout 20 "$python" -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null
}
while IFS= read -r sp; do
  [[ -n $sp ]] || continue
  for d in "$sp"/nvidia/*/lib; do [[ -d $d ]] && lib_dirs+=("$d"); done
done < <(site_packages)
find_lib() { # name: the first match in lib_dirs, else the loader cache's
  local d
  for d in "${lib_dirs[@]}"; do
    [[ -n $d && -e $d/$1 ]] && {
      echo "$d/$1"
      return
    }
  done
  ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n { print $NF; exit }'
}
kiln_ld=$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# What kiln's binaries and the libraries linked so far cannot resolve, and what kiln opens at
# run time (cuBLASLt: dlopen; NCCL; the driver's libcuda when the loader's cache lacks it).
unresolved() {
  for b in "$bin"/* "$work"/lib/*; do
    LD_LIBRARY_PATH=$kiln_ld ldd "$b" 2>/dev/null | awk '/not found/ { print $1 }'
  done
  [[ -n $dlopened ]] && echo "$dlopened"
  echo libnccl.so.2
  if [[ -z $fake ]] && ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
    echo libcuda.so.1
  fi
}
dlopened=$(sed -n 's/^dlopen=//p' "$pack/pack.env")
links=""
for _ in 1 2 3; do
  for lib in $(unresolved | sort -u); do
    [[ -e $work/lib/$lib ]] && continue
    found=$(find_lib "$lib")
    [[ -n $found ]] || continue
    ln -s "$found" "$work/lib/$lib"
    links="$links $lib=$found"
  done
done
missing_libs=$(for b in "$bin"/*; do
  LD_LIBRARY_PATH=$kiln_ld ldd "$b" 2>/dev/null | awk '/not found/ { print $1 }'
done | sort -u | tr '\n' ' ')
if [[ -n $dlopened && ! -e $work/lib/$dlopened ]]; then
  missing_libs="$missing_libs$dlopened (dlopen)"
fi
# compute-sanitizer lives with the toolkit, not always on PATH.
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do
  [[ -d $d ]] && PATH=$PATH:$d
done

have() { [[ -x $bin/$1 ]]; }
dev=cuda
[[ -n $fake ]] && dev=cpu

# --- env ------------------------------------------------------------------------------------
env_log=$out/env.txt
{
  echo "pack: $(tr '\n' ' ' <"$pack/pack.env")"
  echo "kiln's LD_LIBRARY_PATH: $kiln_ld (python's: ${LD_LIBRARY_PATH:-unset})"
  echo "linked:${links:- nothing}"
  echo "library folders searched: ${lib_dirs[*]}"
  echo "unresolved libraries: ${missing_libs:-none}"
  uname -a
} >"$env_log"
if stage env; then
  gpu_cmd 3 20 "$env_log" nvidia-smi
  gpu_cmd 2 15 "$env_log" nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
    --format=csv
  plan 15 45 "python import torch"
  if [[ -n $fake ]]; then fake_sleep 15; fi
  run_logged 45 "$env_log" "$python" -c 'import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'
  rc=$?
  torch_line=$(grep -m1 -E '^torch |No module named' "$env_log" | cut -c1-100)
  status=$(status_of $rc)
  [[ $torch_line == *"No module named"* ]] && status=missing
  record "env python" "$status" \
    "${torch_line:-rc $rc}; LD_LIBRARY_PATH ${LD_LIBRARY_PATH:-unset} (the machine's own)"
  if have kiln; then
    kiln_cmd 5 20 "$env_log" "$bin/kiln" doctor --probe-cuda
    kiln_cmd 10 45 "$env_log" "$bin/kiln" doctor
    rc=$?
    doctor_figs=$(grep -E '^(ok|note|warn|FAIL) +backend' "$env_log" | head -1 | cut -c15-)
    figs="doctor rc $rc; ${doctor_figs:-no backend line}; linked:${links:- nothing}"
    record env "$([[ $rc == 0 && -z $missing_libs ]] && echo ok || echo FAIL)" \
      "$figs${missing_libs:+; unresolved: $missing_libs}"
  else
    record env missing "no kiln binary in the pack"
  fi
fi

# --- gemm ceiling ---------------------------------------------------------------------------
ceiling=0
bandwidth=0
if stage gemm; then
  gemm=$out/gemm.txt
  if have cuda_gemm_ceiling; then
    gpu_cmd 15 60 "$gemm" env "LD_LIBRARY_PATH=$kiln_ld" "$bin/cuda_gemm_ceiling" \
      --tokens $((2048 * ${KILN_GPU_CHECK_BATCH:-2}))
    rc=$?
    ceiling=$(sed -n 's/^ceiling: \([0-9.]*\) TFLOP.*/\1/p' "$gemm")
    bandwidth=$(sed -n 's/^bandwidth: \([0-9.]*\) GB.*/\1/p' "$gemm")
    ceiling=${ceiling:-0}
    bandwidth=${bandwidth:-0}
    line=$(grep -E '^ceiling:|^peak:|^bandwidth:|no GPU' "$gemm" | tr '\n' ' ' | cut -c1-300)
    record gemm "$(status_of $rc)" "${line:-${fake:+fake run: no GPU}}"
  else
    plan 15 60 cuda_gemm_ceiling
    [[ -n $fake ]] && fake_sleep 15
    record gemm missing "cuda_gemm_ceiling not built"
  fi
fi

# --- kiln bench train, then PyTorch on the same shapes --------------------------------------
batch=${KILN_GPU_CHECK_BATCH:-2}
read -r -a presets <<<"${KILN_GPU_CHECK_PRESETS:-qwen2.5-0.5b qwen2.5-1.5b qwen3-0.6b}"
read -r -a torch_presets <<<"${KILN_GPU_CHECK_TORCH_PRESETS:-qwen2.5-0.5b qwen2.5-1.5b}"
seq=2048
bench_steps=(--steps 5 --warmup 2)
dpo_rounds=3
torch_flags=()
# The preset that runs for a planned one: itself, or in fake mode a CPU-sized stand-in (the plan
# keeps the GPU's rows and their expected durations).
run_preset() {
  if [[ -n $fake ]]; then echo "${KILN_GPU_CHECK_FAKE_PRESET:-bench-h64}"; else echo "$1"; fi
}
if [[ -n $fake ]]; then
  seq=256
  batch=1
  bench_steps=(--steps 2 --warmup 1)
  dpo_rounds=2
  torch_flags=(--cpu-smoke-test)
fi
bench=$out/bench.txt
# Expected seconds of a bench row on the GPU machine, by preset (the 1.5B initialises longer).
bench_expected() { [[ $1 == *1.5b* ]] && echo 45 || echo 25; }
torch_expected() { [[ $1 == *1.5b* ]] && echo 45 || echo 35; }
# GPU memory high-water while a command runs (nvidia-smi every 200 ms), in MiB, into $1.
watch_gpu_memory() {
  if [[ -n $fake ]]; then
    "${@:2}"
    return
  fi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$1" 2>/dev/null &
  local watch_pid=$! rc
  "${@:2}"
  rc=$?
  kill "$watch_pid" 2>/dev/null
  wait "$watch_pid" 2>/dev/null
  return "$rc"
}
# A failed row again, small: one step at sequence 256 with every launch synchronous (the
# failing kernel is the one the error follows), then under memcheck limited to kiln's kernels.
rerun_small() { # preset
  local small=("$bin/kiln" bench train --row --preset "$1" --batch 1 --seq 256 --steps 1
    --warmup 0 --recompute off --dtype bf16 --device "$dev") log=$work/rerun-$1.txt rc first
  : >"$log"
  kiln_cmd 15 45 "$log" env CUDA_LAUNCH_BLOCKING=1 "${small[@]}"
  rc=$?
  first=$(grep -m1 -iE 'error|fail|illegal|misaligned' "$log" | cut -c1-240)
  record "kiln-bench $1 rerun 1x256 CUDA_LAUNCH_BLOCKING=1" "$(status_of $rc)" \
    "rc $rc${first:+; $first}"
  cat "$log" >>"$bench"
  : >"$log"
  if [[ -z $fake ]] && command -v compute-sanitizer >/dev/null 2>&1; then
    plan 60 90 "memcheck kiln bench $1"
    run_logged 90 "$log" env "LD_LIBRARY_PATH=$kiln_ld" compute-sanitizer --tool memcheck \
      "${kiln_kernels[@]}" --error-exitcode 99 --print-limit 10 "${small[@]}"
    rc=$?
    first=$(grep -m2 -E '^========= (Invalid|Program hit|Error|  at )' "$log" | tr '\n' ' ' |
      cut -c1-300)
    record "kiln-bench $1 rerun memcheck (kiln's kernels)" "$(status_of $rc)" \
      "rc $rc${first:+; $first}"
    cat "$log" >>"$bench"
  else
    record "kiln-bench $1 rerun memcheck (kiln's kernels)" missing \
      "compute-sanitizer not on PATH${fake:+ (fake run)}"
  fi
}
if stage kiln-bench; then
  for p in "${presets[@]}"; do
    r=$(run_preset "$p")
    name="kiln-bench $p ${batch}x$seq${fake:+ ($r on the CPU)}"
    if ! have kiln; then
      record "$name" missing "no kiln binary"
      continue
    fi
    watch_gpu_memory "$work/mem-kiln-$r" kiln_cmd "$(bench_expected "$p")" 90 "$bench" \
      "$bin/kiln" bench train --dtype bf16 --recompute off --preset "$r" --batch "$batch" \
      --seq "$seq" "${bench_steps[@]}" --device "$dev"
    rc=$?
    line=$(python3 "$pack/report.py" kiln-bench "$bench" "$r" "$ceiling" "$work/mem-kiln-$r" \
      "$results")
    loss=$(python3 "$pack/report.py" first-loss "$bench" "$r")
    status=$(status_of $rc)
    [[ $status == ok && $loss != ok* ]] && status=FAIL
    record "$name" "$status" "$line; $loss"
    if ((rc == 0)); then
      record "kiln-bench $p phases: measured vs roofline" ok \
        "$(python3 "$pack/report.py" phases "$bench" "$r" "$ceiling" "$bandwidth")"
    fi
    [[ $status == ok ]] || rerun_small "$r"
  done
  # LoRA (rank 16 on every projection, the base frozen in bf16) on the first preset, through
  # kiln bench dpo: the LoRA SFT step (its tokens/s), a DPO step on the same rows with the base
  # as a live reference and with a precomputed one (issue 38's 1.45x and 1.1x), and each side's
  # device peak in a child process of its own (1.1x). Not in results.jsonl's kiln rows (those
  # are held against PyTorch's full steps).
  p=${presets[0]}
  r=$(run_preset "$p")
  pairs=$(((batch + 1) / 2)) # a pair is two rows: the bench rows' tokens, or the nearest above
  name="kiln-bench $p LoRA r16 SFT and DPO $((2 * pairs))x$seq${fake:+ ($r on the CPU)}"
  if have kiln; then
    dpo_log=$work/bench-dpo.txt
    : >"$dpo_log"
    # 26 s: the 0.5b's initialisation (drawn once for the three sides), 12 steps, two child
    # processes that draw no weights (3 steps each).
    kiln_cmd 26 90 "$dpo_log" "$bin/kiln" bench dpo --dtype bf16 --preset "$r" \
      --pairs "$pairs" --seq "$seq" --rounds "$dpo_rounds" --lora 16 \
      --memory-rounds 1 --device "$dev"
    rc=$?
    cat "$dpo_log" >>"$bench"
    record "$name" "$(status_of $rc)" "$(python3 "$pack/report.py" dpo-bench "$dpo_log")"
  fi
fi
if stage torch; then
  for p in "${torch_presets[@]}"; do
    r=$(run_preset "$p")
    plan "$(torch_expected "$p")" 90 "torch bench $p"
    [[ -n $fake ]] && fake_sleep "$(torch_expected "$p")"
    watch_gpu_memory "$work/mem-torch-$r" run_logged 90 "$bench" "$python" \
      "$pack/pytorch_gpu_train_bench.py" --preset "$r" --batch "$batch" --seq "$seq" \
      "${bench_steps[@]}" --peak-tflops "$ceiling" "${torch_flags[@]}"
    rc=$?
    name="torch-bench $p ${batch}x$seq${fake:+ ($r on the CPU)}"
    if ((rc == 2)); then
      record "$name" missing "$(grep '^pytorch_gpu_train_bench:' "$bench" | tail -1)"
      continue
    fi
    line=$(python3 "$pack/report.py" torch-bench "$bench" "$r" "$results")
    record "$name" "$(status_of $rc)" "$line"
  done
fi

# --- tests ----------------------------------------------------------------------------------
# Expected seconds of each test binary on the GPU machine (its CPU reference included).
test_expected() {
  case "$1" in
    backend_parity_test | cuda_attention_test) echo 30 ;;
    nccl_gpu_test) echo 15 ;;
    cuda_gemm_host_test | cuda_backend_test | cuda_pointwise_test) echo 4 ;;
    *) echo 8 ;;
  esac
}
if stage tests; then
  read -r -a tests <<<"$(sed -n 's/^tests=//p' "$pack/pack.env")"
  for t in "${tests[@]}"; do
    if ! have "$t"; then
      plan "$(test_expected "$t")" 60 "$t"
      [[ -n $fake ]] && fake_sleep "$(test_expected "$t")"
      record "test $t" missing "not in the pack"
      continue
    fi
    kiln_cmd "$(test_expected "$t")" 90 "$out/tests.txt" "$bin/$t" --gtest_brief=1 --gtest_color=no
    rc=$?
    line=$(python3 "$pack/report.py" gtest "$out/tests.txt" "$t")
    record "test $t" "$(status_of $rc)" "$line"
  done
fi

# --- tiny models end to end -----------------------------------------------------------------
steps=${KILN_GPU_CHECK_STEPS:-20}
tiny=$out/tiny.txt
tokens=$repo/assets/demo/tokens.jsonl
# Writes the recipe of one tiny model (its init in WORK/<preset>-init).
tiny_recipe() { # preset
  cat >"$work/$1.yaml" <<EOF
model:
  path: $work/$1-init
data:
  train: $tokens
  format: tokens
  seq_len: 64
optimizer:
  name: adamw
  lr: 1.0e-3
train:
  max_steps: $steps
  micro_batch_size: 4
  seed: 0
  log_every: 1
output:
  dir: $work/unused
  tensorboard: false
dist:
  nproc_per_node: 1
EOF
}
train_tiny() { # preset name overrides...
  local p=$1 name=$2
  shift 2
  kiln_cmd 8 45 "$tiny" "$bin/kiln" train "$work/$p.yaml" "output.dir=$work/$p-$name" "$@"
}
# One comparison row: status from report.py's verdict, the first error of the log appended.
compare_row() { # step verdict-line
  local err
  err=$(grep -m1 'error:' "$tiny" | cut -c1-200)
  record "$1" "$([[ $2 == ok* ]] && echo ok || echo FAIL)" "$2${err:+; first error: $err}"
}
if stage tiny; then
  if ! have kiln; then
    record tiny missing "no kiln binary"
  elif [[ ! -f $tokens ]]; then
    record tiny missing "no $tokens"
  else
    rep=$pack/report.py
    m() { echo "$work/$1/metrics.jsonl"; }
    for p in tiny tiny-hd64 tiny-hd128; do
      tiny_recipe "$p"
      # 1 s: a tiny model's safetensors, on the host (no device).
      kiln_cmd 1 30 "$tiny" "$bin/kiln" init --config "$p" --seed 0 --out "$work/$p-init"
      train_tiny "$p" cpu-fp32 train.device=cpu train.dtype=fp32
      train_tiny "$p" dev-a "train.device=$dev" train.dtype=bf16
      compare_row "$p $dev-bf16 vs cpu-fp32" \
        "$(python3 "$rep" close "$(m "$p-cpu-fp32")" "$(m "$p-dev-a")" 0.03 2>&1)"
      [[ $p == tiny-hd128 ]] && continue
      # Determinism (the flash kernels' backward at head_dim 64 included).
      train_tiny "$p" dev-b "train.device=$dev" train.dtype=bf16
      compare_row "$p $dev determinism" \
        "$(python3 "$rep" identical "$(m "$p-dev-a")" "$(m "$p-dev-b")" 2>&1)"
    done
    train_tiny tiny dev-2w "train.device=$dev" train.dtype=bf16 dist.nproc_per_node=2 \
      train.micro_batch_size=2
    line=$(python3 "$rep" close "$(m tiny-dev-a)" "$(m tiny-dev-2w)" 0.02 2>&1)
    # The 2-worker run is the last: its transport line says Gloo staged (two ranks, one GPU).
    transport=$(grep -o 'transport: .*' "$tiny" | tail -1 | cut -c1-120)
    compare_row "tiny $dev 2 workers vs 1" "$line${transport:+; $transport}"
  fi
fi

# --- compute-sanitizer ----------------------------------------------------------------------
san=$out/sanitizer.txt
: >"$san"
sanitizer_expected() { [[ $1 == backend_parity_test ]] && echo 25 || echo 20; }
if stage sanitizer; then
  if [[ -n $fake ]] || ! command -v compute-sanitizer >/dev/null 2>&1; then
    while read -r t f; do
      plan 2 15 "$t --gtest_list_tests"
      for tool in memcheck racecheck; do
        plan "$(sanitizer_expected "$t")" 60 "$tool $t"
        [[ -n $fake ]] && fake_sleep "$(sanitizer_expected "$t")"
      done
    done < <(sanitizer_cases)
    record sanitizer "$([[ -n $fake ]] && echo skipped || echo missing)" \
      "$([[ -n $fake ]] && echo "fake run: no GPU" || echo "compute-sanitizer not on PATH")"
  else
    while read -r t f; do
      if ! have "$t"; then
        record "sanitizer $t" missing "not in the pack"
        continue
      fi
      plan 2 15 "$t --gtest_list_tests"
      n=$(env "LD_LIBRARY_PATH=$kiln_ld" timeout 15 "$bin/$t" --gtest_list_tests \
        --gtest_filter="$f" 2>/dev/null | grep -c '^  ')
      if ((n == 0)); then
        record "sanitizer $t" FAIL "filter $f selects no test"
        continue
      fi
      for tool in memcheck racecheck; do
        sel=()
        [[ $tool == racecheck ]] && sel=("${kiln_kernels[@]}")
        before=$(wc -l <"$san")
        gpu_cmd "$(sanitizer_expected "$t")" 60 "$san" env "LD_LIBRARY_PATH=$kiln_ld" \
          compute-sanitizer --tool "$tool" "${sel[@]}" --error-exitcode 99 "$bin/$t" \
          --gtest_brief=1 --gtest_filter="$f"
        rc=$?
        line=$(tail -n +$((before + 1)) "$san" |
          grep -m1 '^========= \(ERROR SUMMARY\|RACECHECK SUMMARY\)')
        record "sanitizer $tool $t" "$(status_of $rc)" \
          "$n tests; rc $rc; ${line:-no summary line}${sel:+; kiln kernels only}"
      done
    done < <(sanitizer_cases)
  fi
fi

# --- the end --------------------------------------------------------------------------------
if [[ -z $fake && -s $work/smi.csv ]]; then
  {
    echo "nvidia-smi every second (last 20 samples of $(wc -l <"$work/smi.csv")):"
    tail -20 "$work/smi.csv"
  } >>"$env_log"
fi
python3 "$pack/report.py" summary "$results" "$summary" "$start" "$budget" "$ledger" >/dev/null
say "summary: $summary"
cat "$summary"
