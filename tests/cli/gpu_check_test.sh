#!/usr/bin/env bash
# scripts/gpu_check_run.sh (the GPU check's run.sh) on the CPU: packs this build's kiln the way
# scripts/gpu_check.sh pack does (bin/ + lib/ in payload.tar.xz, run.sh, report.py, the PyTorch
# bench, pack.env with the real list of test binaries) and runs it with KILN_GPU_CHECK_FAKE=cpu,
# the GPU-only commands sleeping their expected durations scaled down. Checks:
#   - the tiny-model comparisons (CPU fp32 vs bf16 for tiny, tiny-hd64 and tiny-hd128,
#     determinism, 2 workers vs 1) and kiln's bench rows (first loss, phases) come out ok; the
#     GPU-only steps say missing or skipped rather than crash; at most 8 result files;
#   - the plan (every command's expected duration on the GPU machine) fits the 540 s budget;
#   - killed at an arbitrary moment, summary.md holds every row recorded so far;
#   - python keeps the machine's environment, kiln gets a private library folder with links to
#     what it opens at run time, found in a virtual environment's site-packages/nvidia/*/lib;
#   - a failing bench row is rerun small under CUDA_LAUNCH_BLOCKING=1 (and memcheck, missing
#     here); a library found nowhere fails the env row;
#   - every gtest filter of the sanitizer stage selects at least one test of the built binaries,
#     and every CUDA kernel of kiln is in namespace kiln (compute-sanitizer's kns=kiln);
#   - the no-GPU path: without nvidia-smi, one line and exit 2.
#
#   gpu_check_test.sh KILN_BINARY [BINARY_NAME=PATH ...] [kernels_lib=PATH]
set -u
kiln=${1:?usage: gpu_check_test.sh KILN_BINARY [NAME=PATH ...]}
shift
declare -A built
for a in "$@"; do built[${a%%=*}]=${a#*=}; done
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

# --- the pack -------------------------------------------------------------------------------
pack=$tmp/pack
mkdir -p "$pack" "$tmp/stage/bin" "$tmp/stage/lib"
cp "$kiln" "$tmp/stage/bin/kiln"
tar -C "$tmp/stage" -cf - bin lib | xz -0 >"$pack/payload.tar.xz"
cp "$root/scripts/gpu_check_run.sh" "$pack/run.sh"
cp "$root/scripts/gpu_check_report.py" "$pack/report.py"
cp "$root/bench/pytorch_gpu_train_bench.py" "$pack/"
# The real test list (so the plan is the GPU machine's), and a library kiln "opens at run time"
# that only a virtual environment's NVIDIA wheel folder has.
write_env() { # dlopen-name
  printf "source_dir=%s\ntests=%s\ndlopen=%s\n" "$root" "$(bash "$root/scripts/gpu_check.sh" list-tests)" \
    "$1" >"$pack/pack.env"
}
write_env libcublasLt.so.99
venv=$tmp/venv/lib/python3.12/site-packages
mkdir -p "$venv/nvidia/cublas/lib"
: >"$venv/nvidia/cublas/lib/libcublasLt.so.99"
# run.sh finds the demo tokens beside the pack, as in the repository it travels in.
mkdir -p "$tmp/assets"
ln -s "$root/assets/demo" "$tmp/assets/demo"
# A python that records the environment it was started in, then is python3.
cat >"$tmp/python" <<EOF
#!/usr/bin/env bash
echo "LD_LIBRARY_PATH=\${LD_LIBRARY_PATH-unset}" >>"$tmp/python_env"
exec python3 "\$@"
EOF
chmod +x "$tmp/python"
fake_run() { # out work [VAR=value ...]: run.sh in fake mode, in the foreground
  env KILN_GPU_CHECK_FAKE=cpu KILN_GPU_CHECK_STEPS=4 KILN_GPU_CHECK_TIME_SCALE=0.01 \
    KILN_GPU_CHECK_WORK="$2" KILN_GPU_CHECK_PYTHON="$tmp/python" \
    KILN_GPU_CHECK_SITE_PACKAGES="$venv" OMP_NUM_THREADS=2 LD_LIBRARY_PATH=/machine/own \
    "${@:3}" bash "$pack/run.sh" "$1"
}
export tmp venv pack
export -f fake_run
# Rows of a summary's table (its lines starting with "| ", less the header and the rule).
table_rows() { echo $(($(grep -c '^| ' "$1") - 2)); }
# shellcheck disable=SC2053  # the second argument is a glob
has() { [[ $1 == $2 ]]; } # string, glob

# --- the whole check ------------------------------------------------------------------------
out=$tmp/out
work=$tmp/work
t0=$(date +%s)
fake_run "$out" "$work" >"$tmp/log" 2>&1
rc=$?
secs=$(($(date +%s) - t0))
cat "$tmp/log"
summary=$out/summary.md
row() { grep -E "^\| $1 \| $2 \|" "$summary" >/dev/null; }
check "run.sh exits 0 (in ${secs}s)" test "$rc" -eq 0
check "summary.md written, complete" grep -q '^Complete. Planned: ' "$summary"
check "env row" row "env" "ok"
check "python row: the machine's LD_LIBRARY_PATH" grep -qE '^\| env python \| [a-z]+ \|.*LD_LIBRARY_PATH /machine/own' "$summary"
check "gemm missing, not a crash" row "gemm" "missing"
check "absent tests reported missing" row "test nccl_gpu_test" "missing"
for p in tiny tiny-hd64 tiny-hd128; do
  check "$p: bf16 vs fp32 loss curves" row "$p cpu-bf16 vs cpu-fp32" "ok"
done
check "determinism (tiny)" row "tiny cpu determinism" "ok"
check "determinism (tiny-hd64)" row "tiny-hd64 cpu determinism" "ok"
check "2 workers vs 1" row "tiny cpu 2 workers vs 1" "ok"
check "kiln bench rows parsed, first loss checked" test "$(grep -cE \
  '^\| kiln-bench qwen2.5-[01].5b 1x256 \(bench-h64 on the CPU\) \| ok \| [0-9,]+ tokens/s.*first loss [0-9.]+ \(ln V 8.3178\)' \
  "$summary")" -eq 2
check "phase rows" test "$(grep -cE '^\| kiln-bench qwen2.5-[01].5b phases: measured vs roofline \| ok \| gemm [0-9.]+ ms; lm_head [0-9.]+ ms; attention .*other [0-9.]+ ms' "$summary")" -eq 2
check "torch bench: missing or ok" test "$(grep -cE '^\| torch-bench qwen2.5-[01].5b[^|]* \| (missing|ok) \|' \
  "$summary")" -eq 2
check "the LoRA SFT and DPO bench row" grep -qE \
  '^\| kiln-bench qwen2.5-0.5b LoRA r16 SFT and DPO 2x256 \(bench-h64 on the CPU\) \| ok \| SFT [0-9,]+ tokens/s .*; DPO live reference [0-9.]+x \(goal 1.45\); precomputed [0-9.]+x \(goal 1.1\); peak [0-9.]+ / [0-9.]+ MiB, [0-9.]+x' \
  "$summary"
check "the Qwen3 bench row" grep -qE \
  '^\| kiln-bench qwen3-0.6b 1x256 \(bench-h64 on the CPU\) \| ok \|' "$summary"
check "sanitizer skipped" row "sanitizer" "skipped"
n=$(find "$out" -type f | wc -l)
check "at most 8 result files ($n)" test "$n" -le 8
rows=$(grep -c '"kind": "row"' "$out/results.jsonl")
check "summary has every row of results.jsonl ($rows)" test "$(table_rows "$summary")" -eq "$rows"

# The plan: every command the GPU machine would run, with its expected duration, fits 9 min.
plan=$(python3 "$pack/report.py" plan "$work/ledger" 540)
check "the plan fits 540 s ($plan)" test "${plan%%:*}" = ok
for what in "nvidia-smi" "python import torch" "doctor" "cuda_gemm_ceiling" \
  "bench train --dtype bf16" "bench dpo --dtype bf16" "torch bench qwen2.5-1.5b" \
  "cuda_attention_test" "nccl_gpu_test" "init --config tiny-hd128" "train.device=cpu" \
  "memcheck backend_parity_test" "racecheck cuda_attention_test"; do
  check "the plan has: $what" grep -qF -- "$what" "$work/ledger"
done
check "the plan can fail" test "$(python3 "$pack/report.py" plan "$work/ledger" 100 | cut -d: -f1)" = FAIL

# Libraries: python in the machine's environment, kiln with its private folder first.
check "python never saw kiln's libraries" bash -c "! grep -q '$work' '$tmp/python_env'"
check "python ran with the machine's LD_LIBRARY_PATH" grep -qx 'LD_LIBRARY_PATH=/machine/own' "$tmp/python_env"
check "kiln's LD_LIBRARY_PATH: its folder, then the machine's" \
  grep -q "^kiln's LD_LIBRARY_PATH: $work/lib:/machine/own " "$out/env.txt"
check "the dlopen'ed library linked from the venv's nvidia/*/lib" \
  test "$(readlink "$work/lib/libcublasLt.so.99")" = "$venv/nvidia/cublas/lib/libcublasLt.so.99"

# Roofline arithmetic: with a ceiling and a bandwidth, each phase gets its estimate.
phases=$(python3 "$pack/report.py" phases "$out/bench.txt" bench-h64 100 1000)
check "phases against a roofline ($phases)" has "$phases" 'gemm * ms vs * ms *-bound, *x; lm_head*other*'
check "no roofline without a ceiling" has "$(python3 "$pack/report.py" phases "$out/bench.txt" bench-h64 0 0)" '*no roofline*'

# The comparisons can fail: a perturbed curve is not "close", and not identical.
python3 - "$work/tiny-dev-a/metrics.jsonl" "$tmp/bad.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rows[-1]["loss"] *= 1.10
open(sys.argv[2], "w").write("".join(json.dumps(r) + "\n" for r in rows))
EOF
close=$(python3 "$pack/report.py" close "$work/tiny-dev-a/metrics.jsonl" "$tmp/bad.jsonl" 0.03)
check "close rejects a 10% change ($close)" test "${close%%:*}" = FAIL
same=$(python3 "$pack/report.py" identical "$work/tiny-dev-a/metrics.jsonl" "$tmp/bad.jsonl")
check "identical rejects it ($same)" test "${same%%:*}" = FAIL

# --- a failing bench row, a library found nowhere -------------------------------------------
write_env libnothing.so.1
fake_run "$tmp/out3" "$tmp/work3" KILN_GPU_CHECK_STAGES="env kiln-bench" \
  KILN_GPU_CHECK_PRESETS=qwen2.5-0.5b KILN_GPU_CHECK_FAKE_PRESET=no-such-preset >"$tmp/log3" 2>&1
s3=$tmp/out3/summary.md
cat "$s3"
check "a library found nowhere fails env" grep -qE '^\| env \| FAIL \|.*unresolved: libnothing.so.1 \(dlopen\)' "$s3"
check "failing row" grep -qE '^\| kiln-bench qwen2.5-0.5b 1x256 [^|]*\| FAIL \|' "$s3"
check "rerun small with CUDA_LAUNCH_BLOCKING=1, naming the error" \
  grep -qE "^\| kiln-bench no-such-preset rerun 1x256 CUDA_LAUNCH_BLOCKING=1 \| FAIL \|.*unknown preset 'no-such-preset'" "$s3"
check "rerun under memcheck: missing here" \
  grep -qE "^\| kiln-bench no-such-preset rerun memcheck \(kiln's kernels\) \| missing \|" "$s3"
check "only the stages asked for" bash -c "! grep -q '^| tiny' '$s3'"
write_env libcublasLt.so.99

# --- killed at an arbitrary moment: summary.md has every row so far -------------------------
for rows_before_kill in 2 5; do
  out4=$tmp/out4-$rows_before_kill
  # In a session of its own, so that it and everything it started die together.
  setsid bash -c 'fake_run "$@"' _ "$out4" "$tmp/work4" KILN_GPU_CHECK_TIME_SCALE=0.05 \
    >/dev/null 2>&1 &
  runner=$!
  for _ in $(seq 600); do
    [[ -f $out4/results.jsonl ]] &&
      (($(grep -c '"kind": "row"' "$out4/results.jsonl") >= rows_before_kill)) && break
    sleep 0.1
  done
  kill -KILL -- -"$runner" 2>/dev/null
  wait "$runner" 2>/dev/null
  n=$(grep -c '"kind": "row"' "$out4/results.jsonl")
  got=$(table_rows "$out4/summary.md")
  check "killed after $n rows: summary.md has them all ($got)" test "$got" -ge "$n" -a "$n" -ge "$rows_before_kill"
  check "... and says it is in progress" grep -q '^\*\*In progress\*\*' "$out4/summary.md"
done

# --- the sanitizer's filters select tests; every kernel is kiln's ---------------------------
while read -r t f; do
  if [[ -z ${built[$t]:-} ]]; then
    echo "SKIP filter of $t: not built here"
    continue
  fi
  n=$("${built[$t]}" --gtest_list_tests --gtest_filter="$f" | grep -c '^  ')
  check "filter $f selects $n tests of $t" test "$n" -ge 1
done < <(bash "$root/scripts/gpu_check_run.sh" --list-filters)
check "a filter that selects nothing is seen as such" \
  test "$("${built[backend_parity_test]}" --gtest_list_tests --gtest_filter='NoSuch*' | grep -c '^  ')" -eq 0
if [[ -n ${built[kernels_lib]:-} ]]; then
  stubs=$(nm "${built[kernels_lib]}" 2>/dev/null | grep -o '__device_stub__[A-Za-z0-9_]*' | sort -u)
  check "CUDA kernels found ($(wc -l <<<"$stubs"))" test -n "$stubs"
  check "every CUDA kernel is in namespace kiln (kns=kiln)" bash -c "! grep -v '__device_stub__ZN4kiln' <<<'$stubs'"
fi

# --- no GPU and no fake: one line, exit 2, before anything is unpacked ----------------------
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
