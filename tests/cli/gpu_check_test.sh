#!/usr/bin/env bash
# scripts/gpu_check_run.sh (the GPU check's run.sh) on the CPU: packs this build's kiln the way
# scripts/gpu_check.sh pack does (bin/ + lib/ in payload.tar.xz, run.sh, report.py, the PyTorch
# bench) and runs it with KILN_GPU_CHECK_FAKE=cpu. The tiny-model comparisons (CPU fp32 vs bf16,
# determinism, 2 workers vs 1) and kiln's bench row must come out ok, the GPU-only steps must say
# missing or skipped rather than crash, and the results must fit the device tool (summary.md plus
# at most 7 files). Then the no-GPU path: without nvidia-smi, one line and exit 2.
#
#   gpu_check_test.sh KILN_BINARY
set -u
kiln=${1:?usage: gpu_check_test.sh KILN_BINARY}
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
check() { # description, command...
  local what=$1
  shift
  if "$@"; then echo "PASS $what"; else
    echo "FAIL $what"
    failures=$((failures + 1))
  fi
}

pack=$tmp/pack
mkdir -p "$pack" "$tmp/stage/bin" "$tmp/stage/lib"
cp "$kiln" "$tmp/stage/bin/kiln"
tar -C "$tmp/stage" -cf - bin lib | xz -0 >"$pack/payload.tar.xz"
cp "$root/scripts/gpu_check_run.sh" "$pack/run.sh"
cp "$root/scripts/gpu_check_report.py" "$pack/report.py"
cp "$root/bench/pytorch_gpu_train_bench.py" "$pack/"
printf "source_dir=%s\ntests=backend_parity_test nccl_test\n" "$root" >"$pack/pack.env"
# run.sh finds the demo tokens beside the pack, as in the repository it travels in.
mkdir -p "$tmp/assets"
ln -s "$root/assets/demo" "$tmp/assets/demo"

out=$tmp/out
KILN_GPU_CHECK_FAKE=cpu KILN_GPU_CHECK_STEPS=4 KILN_GPU_CHECK_WORK=$tmp/work OMP_NUM_THREADS=2 \
  bash "$pack/run.sh" "$out" >"$tmp/log" 2>&1
rc=$?
cat "$tmp/log"
summary=$out/summary.md
row() { grep -E "^\| $1 \| $2 \|" "$summary" >/dev/null; }
check "run.sh exits 0" test "$rc" -eq 0
check "summary.md written" test -s "$summary"
check "env row" row "env" "ok"
check "gemm missing, not a crash" row "gemm" "missing"
check "absent tests reported missing" row "test nccl_test" "missing"
check "bf16 vs fp32 loss curves" row "tiny cpu-bf16 vs cpu-fp32" "ok"
check "determinism" row "tiny cpu determinism" "ok"
check "2 workers vs 1" row "tiny cpu 2 workers vs 1" "ok"
check "kiln bench row parsed" grep -qE '^\| kiln-bench bench-h64 1x256 \| ok \| [0-9,]+ tokens/s' \
  "$summary"
check "torch bench: missing or ok" grep -qE '^\| torch-bench bench-h64[^|]* \| (missing|ok) \|' \
  "$summary"
n=$(find "$out" -type f | wc -l)
check "at most 8 result files ($n)" test "$n" -le 8

# The comparisons can fail: a perturbed curve is not "close", and not identical.
python3 - "$tmp/work/dev-a/metrics.jsonl" "$tmp/bad.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows[-1]["loss"] *= 1.10
open(sys.argv[2], "w").write("".join(json.dumps(r) + "\n" for r in rows))
EOF
close=$(python3 "$pack/report.py" close "$tmp/work/dev-a/metrics.jsonl" "$tmp/bad.jsonl" 0.03)
check "close rejects a 10% change ($close)" test "${close%%:*}" = FAIL
same=$(python3 "$pack/report.py" identical "$tmp/work/dev-a/metrics.jsonl" "$tmp/bad.jsonl")
check "identical rejects it ($same)" test "${same%%:*}" = FAIL

# No GPU and no fake: one line, exit 2, before anything is unpacked.
nogpu=$(env PATH=/usr/bin:/bin KILN_GPU_CHECK_WORK="$tmp/work2" bash "$pack/run.sh" "$tmp/out2")
rc=$?
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "SKIP no-GPU line: nvidia-smi is on this machine"
else
  check "no GPU: exit 2 ($rc)" test "$rc" -eq 2
  check "no GPU: one line ($nogpu)" test "$nogpu" = "gpu_check: no GPU: nvidia-smi not found"
  check "no GPU: nothing unpacked" test ! -e "$tmp/work2"
fi

echo "$failures failure(s)"
((failures == 0))
