#!/usr/bin/env bash
# The GPU check, on the GPU machine: `bash gpu_pack/run.sh OUTDIR` (packed by
# scripts/gpu_check.sh pack, which says how to call the device tool). No network needed.
#
# Steps, each under `timeout`, continuing past failures, within KILN_GPU_CHECK_BUDGET_S (540 s):
#   1 env        nvidia-smi, driver/runtime, kiln doctor
#   2 gemm       bf16 cuBLASLt ceiling (cuda_gemm_ceiling): the MFU denominator
#   3 tests      the pack's test binaries (pack.env tests=: backend_parity_test,
#                cuda_attention_test, cuda_pointwise_test, the NCCL tests, doctor_test, ...),
#                gtest --gtest_brief; one not built is reported missing
#   4 sanitizer  compute-sanitizer memcheck and racecheck on the attention/parity tests, filtered
#                to tiny sizes (KILN_GPU_CHECK_SANITIZER_FILTER)
#   5 tiny       kiln init tiny; train on CPU fp32 and on cuda bf16 from one seed (loss curves
#                within tolerance), cuda twice (identical losses), 2 workers vs 1
#   6 kiln-bench kiln bench train --dtype bf16, qwen2.5-0.5b and qwen2.5-1.5b at 2048 tokens
#   7 torch      the same shapes by PyTorch (pytorch_gpu_train_bench.py) and kiln/PyTorch ratio
# Results in OUTDIR (at most 8 files): summary.md (the table), env.txt, gemm.txt, tests.txt,
# sanitizer.txt, tiny.txt, bench.txt, results.jsonl.
#
# KILN_GPU_CHECK_FAKE=cpu: no GPU needed; steps 5 and 6 run on the CPU at tiny sizes (and the
# GPU-only steps report themselves skipped or missing), which proves the script here.
# Other knobs: KILN_GPU_CHECK_BATCH (2), KILN_GPU_CHECK_STEPS (tiny-model steps, 20),
# KILN_GPU_CHECK_WORK (scratch, /tmp/kiln_gpu_check), KILN_GPU_CHECK_PYTHON (the python3 with
# torch and transformers, default python3).
set -u
pack=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: run.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
fake=${KILN_GPU_CHECK_FAKE:-}
budget=${KILN_GPU_CHECK_BUDGET_S:-540}
start=$(date +%s)
work=${KILN_GPU_CHECK_WORK:-/tmp/kiln_gpu_check}
python=${KILN_GPU_CHECK_PYTHON:-python3}
results=$out/results.jsonl
: >"$results"

say() { echo "gpu_check: $*"; }

# One row of summary.md: step, status (ok|FAIL|skipped|missing|timeout), key figures.
record() {
  python3 "$pack/report.py" record "$results" "$1" "$2" "${3:-}"
  say "$1: $2${3:+ ($3)}"
}

# Each step has a share of the budget (step SECONDS sets it); one command in it may run for
# `allow CAP` seconds: CAP, never past the step's share nor the overall budget (at least 5).
step_end=$((start + budget))
step() { step_end=$(($(date +%s) + $1)); }
allow() {
  local now left
  now=$(date +%s)
  left=$((start + budget - now))
  ((step_end - now < left)) && left=$((step_end - now))
  ((left < $1)) || left=$1
  echo $((left > 5 ? left : 5))
}

# Runs "$@" under timeout $1, output appended to file $2; prints nothing; returns the status.
run_logged() {
  local secs=$1 log=$2
  shift 2
  echo "\$ $*" >>"$log"
  timeout -k 5 "$secs" "$@" >>"$log" 2>&1
  local rc=$?
  ((rc == 124 || rc == 137)) && echo "(timed out after ${secs}s)" >>"$log"
  return "$rc"
}

status_of() {
  case "$1" in
    0) echo ok ;;
    77) echo skipped ;;
    124 | 137) echo timeout ;;
    *) echo FAIL ;;
  esac
}

finish() {
  python3 "$pack/report.py" summary "$results" "$out/summary.md" "$(($(date +%s) - start))"
  say "summary: $out/summary.md"
}

# --- no GPU: one line, at once --------------------------------------------------------------
if [[ -z $fake ]]; then
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    say "no GPU: nvidia-smi not found" | tee "$out/summary.md"
    exit 2
  fi
  if ! smi=$(nvidia-smi -L 2>&1) || [[ -z $smi ]]; then
    say "no GPU: nvidia-smi failed: ${smi//$'\n'/ }" | tee "$out/summary.md"
    exit 2
  fi
fi

# --- unpack, and find the CUDA libraries where this machine keeps them ----------------------
if [[ ! -f $pack/payload.tar.xz || ! -f $pack/report.py ]]; then
  say "no payload.tar.xz and report.py beside run.sh: make them with scripts/gpu_check.sh pack" |
    tee "$out/summary.md"
  exit 2
fi
rm -rf "$work"
mkdir -p "$work"
if command -v xz >/dev/null 2>&1; then
  xz -dc "$pack/payload.tar.xz" | tar -C "$work" -xf -
else
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$pack/payload.tar.xz" "$work"
fi
bin=$work/bin
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

# Every library a packed binary cannot resolve, looked up under the CUDA toolkit, the driver's
# folder, the system and PyTorch's bundled nvidia wheels (site-packages/nvidia/*/lib).
lib_roots=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia
  /usr/lib/x86_64-linux-gnu /usr/local/lib)
while IFS= read -r d; do [[ -d $d/nvidia ]] && lib_roots+=("$d/nvidia"); done < <(
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null)
export LD_LIBRARY_PATH=$work/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# Whether the loader finds library $1 (the cache, or a folder of LD_LIBRARY_PATH).
on_library_path() {
  ldconfig -p 2>/dev/null | grep -q "[[:space:]]$1 " && return 0
  local d
  local IFS=:
  for d in $LD_LIBRARY_PATH; do [[ -e $d/$1 ]] && return 0; done
  return 1
}
unresolved() {
  {
    for b in "$bin"/*; do ldd "$b" 2>/dev/null | awk '/not found/{print $1}'; done
    # kiln opens cuBLASLt at run time (dlopen), so ldd never lists it.
    on_library_path libcublasLt.so.13 || echo libcublasLt.so.13
  } | sort -u
}
for lib in $(unresolved); do
  for r in "${lib_roots[@]}"; do
    [[ -d $r ]] || continue
    found=$(find -L "$r" -maxdepth 4 -name "$lib" -print -quit 2>/dev/null)
    if [[ -n $found ]]; then
      LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$found")
      break
    fi
  done
done
missing_libs=$(unresolved | tr '\n' ' ')
# cudart (static) dlopens the driver's libcuda.so.1: make sure the loader finds it.
if [[ -z $fake ]] && ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  found=$(find -L /usr/local/nvidia /usr/lib/x86_64-linux-gnu /usr/lib64 -maxdepth 3 \
    -name libcuda.so.1 -print -quit 2>/dev/null)
  [[ -n $found ]] && LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$found")
fi
# compute-sanitizer lives with the toolkit, not always on PATH.
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do
  [[ -d $d ]] && PATH=$PATH:$d
done

have() { [[ -x $bin/$1 ]]; }

# --- 1 env ----------------------------------------------------------------------------------
step 30
env_log=$out/env.txt
{
  echo "pack: $(tr '\n' ' ' <"$pack/pack.env")"
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "unresolved libraries: ${missing_libs:-none}"
  uname -a
} >"$env_log"
run_logged 20 "$env_log" nvidia-smi
run_logged 10 "$env_log" nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
  --format=csv
"$python" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' \
  >>"$env_log" 2>&1
doctor_figs=""
if have kiln; then
  run_logged 20 "$env_log" "$bin/kiln" doctor --probe-cuda
  run_logged "$(allow 60)" "$env_log" "$bin/kiln" doctor
  rc=$?
  doctor_figs=$(grep -E '^(ok|note|warn|FAIL) +backend' "$env_log" | head -1 | cut -c15-)
  record env "$([[ $rc == 0 && -z $missing_libs ]] && echo ok || echo FAIL)" \
    "doctor rc $rc; ${doctor_figs:-no backend line}${missing_libs:+; unresolved: $missing_libs}"
else
  record env missing "no kiln binary in the pack"
fi

# --- 2 gemm ceiling -------------------------------------------------------------------------
step 40
ceiling=0
if have cuda_gemm_ceiling; then
  run_logged "$(allow 60)" "$out/gemm.txt" "$bin/cuda_gemm_ceiling" \
    --tokens $((2048 * ${KILN_GPU_CHECK_BATCH:-2}))
  rc=$?
  ceiling=$(sed -n 's/^ceiling: \([0-9.]*\) TFLOP.*/\1/p' "$out/gemm.txt")
  ceiling=${ceiling:-0}
  record gemm "$(status_of $rc)" "$(grep -E '^ceiling:|no GPU' "$out/gemm.txt" | head -1)"
else
  record gemm missing "cuda_gemm_ceiling not built"
fi

# --- 3 tests --------------------------------------------------------------------------------
step 170
read -r -a tests <<<"$(sed -n 's/^tests=//p' "$pack/pack.env")"
((${#tests[@]})) || tests=(backend_parity_test cuda_backend_test cuda_attention_test cuda_pointwise_test doctor_test)
for t in "${tests[@]}"; do
  if ! have "$t"; then
    record "test $t" missing "not in the pack"
    continue
  fi
  run_logged "$(allow 60)" "$out/tests.txt" "$bin/$t" --gtest_brief=1 --gtest_color=no
  rc=$?
  line=$(python3 "$pack/report.py" gtest "$out/tests.txt" "$t")
  record "test $t" "$(status_of $rc)" "$line"
done

# --- 4 compute-sanitizer --------------------------------------------------------------------
step 90
filter=${KILN_GPU_CHECK_SANITIZER_FILTER:-*Tiny*:*tiny*:*Small*:*small*}
san=$out/sanitizer.txt
: >"$san"
if ! command -v compute-sanitizer >/dev/null 2>&1; then
  record sanitizer missing "compute-sanitizer not on PATH"
elif [[ -n $fake ]]; then
  record sanitizer skipped "fake run: no GPU"
else
  for t in cuda_attention_test backend_parity_test; do
    have "$t" || {
      record "sanitizer $t" missing "not in the pack"
      continue
    }
    n=$("$bin/$t" --gtest_list_tests --gtest_filter="$filter" | grep -c '^  ')
    f=$filter
    ((n > 0)) || f='*'
    for tool in memcheck racecheck; do
      before=$(wc -l <"$san")
      run_logged "$(allow 25)" "$san" compute-sanitizer --tool "$tool" --error-exitcode 99 \
        "$bin/$t" --gtest_brief=1 --gtest_filter="$f"
      rc=$?
      summary=$(tail -n +$((before + 1)) "$san" |
        grep -m1 '^========= \(ERROR SUMMARY\|RACECHECK SUMMARY\)')
      record "sanitizer $tool $t" "$(status_of $rc)" \
        "filter $f; rc $rc; ${summary:-no summary line}"
    done
  done
fi

# --- 5 tiny model ---------------------------------------------------------------------------
step 60
dev=cuda
[[ -n $fake ]] && dev=cpu
steps=${KILN_GPU_CHECK_STEPS:-20}
tiny=$out/tiny.txt
tokens=$repo/assets/demo/tokens.jsonl
train_tiny() { # name overrides...
  local name=$1
  shift
  run_logged "$(allow 30)" "$tiny" "$bin/kiln" train "$work/tiny.yaml" "output.dir=$work/$name" \
    "$@"
}
if ! have kiln; then
  record tiny missing "no kiln binary"
elif [[ ! -f $tokens ]]; then
  record tiny missing "no $tokens"
else
  cat >"$work/tiny.yaml" <<EOF
model:
  path: $work/tiny-init
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
  run_logged 30 "$tiny" "$bin/kiln" init --config tiny --seed 0 --out "$work/tiny-init"
  train_tiny cpu-fp32 train.device=cpu train.dtype=fp32
  train_tiny dev-a "train.device=$dev" train.dtype=bf16
  train_tiny dev-b "train.device=$dev" train.dtype=bf16
  train_tiny dev-2w "train.device=$dev" train.dtype=bf16 dist.nproc_per_node=2 \
    train.micro_batch_size=2
  m() { echo "$work/$1/metrics.jsonl"; }
  rep=$pack/report.py
  err=$(grep -m1 'error:' "$tiny" | cut -c1-200)
  line=$(python3 "$rep" close "$(m cpu-fp32)" "$(m dev-a)" 0.03 2>&1)${err:+; first error: $err}
  record "tiny $dev-bf16 vs cpu-fp32" "$([[ $line == ok* ]] && echo ok || echo FAIL)" "$line"
  line=$(python3 "$rep" identical "$(m dev-a)" "$(m dev-b)" 2>&1)${err:+; first error: $err}
  record "tiny $dev determinism" "$([[ $line == ok* ]] && echo ok || echo FAIL)" "$line"
  line=$(python3 "$rep" close "$(m dev-a)" "$(m dev-2w)" 0.02 2>&1)${err:+; first error: $err}
  # The 2-worker run is the last: its transport line says Gloo staged (two ranks, one GPU).
  transport=$(grep -o 'transport: .*' "$tiny" | tail -1 | cut -c1-120)
  line="$line${transport:+; $transport}"
  record "tiny $dev 2 workers vs 1" "$([[ $line == ok* ]] && echo ok || echo FAIL)" "$line"
fi

# --- 6 kiln bench train, 7 PyTorch ----------------------------------------------------------
batch=${KILN_GPU_CHECK_BATCH:-2}
presets=(qwen2.5-0.5b qwen2.5-1.5b)
seq=2048
bench_steps=(--steps 5 --warmup 2)
torch_flags=()
if [[ -n $fake ]]; then
  presets=(bench-h64)
  seq=256
  batch=1
  bench_steps=(--steps 2 --warmup 1)
  torch_flags=(--cpu-smoke-test)
fi
device_flag=()
if have kiln && "$bin/kiln" bench train --help 2>&1 | grep -q -- '--device'; then
  device_flag=(--device "$dev")
fi
bench=$out/bench.txt
# GPU memory high-water while a command runs (nvidia-smi every 200 ms), in MiB, into $1.
watch_gpu_memory() {
  if [[ -n $fake ]]; then
    "${@:2}"
    return
  fi
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$1" 2>/dev/null &
  local smi_pid=$! rc
  "${@:2}"
  rc=$?
  kill "$smi_pid" 2>/dev/null
  wait "$smi_pid" 2>/dev/null
  return "$rc"
}
step 90
for p in "${presets[@]}"; do
  if ! have kiln; then
    record "kiln-bench $p" missing "no kiln binary"
    continue
  fi
  watch_gpu_memory "$work/mem-kiln-$p" run_logged "$(allow 60)" "$bench" "$bin/kiln" bench \
    train --dtype bf16 --recompute off --preset "$p" --batch "$batch" --seq "$seq" \
    "${bench_steps[@]}" "${device_flag[@]}"
  rc=$?
  line=$(python3 "$pack/report.py" kiln-bench "$bench" "$p" "$ceiling" "$work/mem-kiln-$p" \
    "$results")
  record "kiln-bench $p ${batch}x$seq" "$(status_of $rc)" "$line"
done
step 80
for p in "${presets[@]}"; do
  watch_gpu_memory "$work/mem-torch-$p" run_logged "$(allow 50)" "$bench" "$python" \
    "$pack/pytorch_gpu_train_bench.py" --preset "$p" --batch "$batch" --seq "$seq" \
    "${bench_steps[@]}" --peak-tflops "$ceiling" "${torch_flags[@]}"
  rc=$?
  if ((rc == 2)); then
    record "torch-bench $p" missing "$(grep '^pytorch_gpu_train_bench:' "$bench" | tail -1)"
    continue
  fi
  line=$(python3 "$pack/report.py" torch-bench "$bench" "$p" "$results")
  record "torch-bench $p ${batch}x$seq" "$(status_of $rc)" "$line"
done

finish
