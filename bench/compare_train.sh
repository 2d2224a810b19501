#!/usr/bin/env bash
# kiln vs PyTorch training throughput on the same machine, in one run: for every shape of
# `kiln bench train`'s fixed set (or --quick), runs kiln and bench/pytorch_train_bench.py on the
# same shape, batch, sequence length, optimizer and thread count, alternating kiln and PyTorch
# for --rounds rounds, and prints the median tokens/s of each and the median per-round ratio,
# with kiln's GFLOP/s and its fraction of the machine's measured FMA peak.
# Alternating matters on a shared machine whose speed drifts over minutes: each ratio is taken
# from two runs seconds apart.
#
#   bench/compare_train.sh [--kiln PATH] [--threads N] [--quick] [--bf16] [--recompute MODE]
#                          [--rounds N] [--lora RANK]
#
# --kiln     the kiln binary (default: build/bin/kiln)
# --threads  OMP_NUM_THREADS for kiln and torch.set_num_threads for PyTorch (default: nproc)
# --quick    only the small shapes (hidden-64 and 25m)
# --bf16     also run kiln --dtype bf16 and PyTorch --bf16 (autocast); kiln bf16 rows are
#            compared with PyTorch fp32 (the issue's target) and PyTorch bf16
# --recompute off|on: activation checkpointing for both sides (default off: the throughput
#            comparison; `kiln bench train --recompute both` shows what it saves)
# --rounds   kiln/PyTorch pairs per shape (default 3)
# --lora RANK  LoRA on a frozen base on both sides (kiln bench train --lora, the script's
#            hand-written PEFT adapters on the same seven projections, alpha 2 x rank); the
#            GFLOP/s are then the LoRA step's (no base weight gradients); default 0: full
#            fine-tuning
# --only PRESET:BxT  only this row of the set, e.g. --only bench-h512:4x512 (repeatable)
# --baseline PATH  another kiln binary (an older build) in PyTorch's place: the ratio is then
#            kiln / baseline, for "no slower than before" checks
#
# PyTorch comes from Debian (apt-get install python3-torch libopenblas0-openmp) and is run with
# /usr/bin/python3; it is never needed by the build. Every row is kept in $OUT_DIR (default: a
# fresh directory under /tmp).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
kiln="$here/../build/bin/kiln"
threads="$(nproc)"
quick=0
bf16=0
recompute=off
rounds=3
lora=0
only=()
baseline=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --kiln) kiln="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --bf16) bf16=1; shift ;;
    --baseline) baseline="$2"; shift 2 ;;
    --recompute) recompute="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --lora) lora="$2"; shift 2 ;;
    --only) only+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "compare_train.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x "$kiln" ]] || { echo "compare_train.sh: kiln binary '$kiln' not found (--kiln PATH)" >&2; exit 2; }
[[ "$recompute" == off || "$recompute" == on ]] ||
  { echo "compare_train.sh: --recompute off or on" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare_train.sh: --rounds N (N >= 1)" >&2; exit 2; }
[[ "$lora" =~ ^[0-9]+$ ]] || { echo "compare_train.sh: --lora RANK (0: full fine-tuning)" >&2; exit 2; }
[[ -n "$baseline" ]] || /usr/bin/python3 -c "import torch" 2>/dev/null ||
  { echo "compare_train.sh: /usr/bin/python3 cannot import torch (apt-get install python3-torch libopenblas0-openmp)" >&2; exit 2; }

# (preset batch seq timed-steps warm-up): kiln bench train's own set, so the two never differ.
quick_flag=()
[[ $quick == 1 ]] && quick_flag=(--quick)
mapfile -t shapes < <("$kiln" bench train --list "${quick_flag[@]}")
[[ ${#shapes[@]} -gt 0 ]] || { echo "compare_train.sh: '$kiln bench train --list' printed no rows" >&2; exit 2; }

if [[ ${#only[@]} -gt 0 ]]; then
  picked=()
  for s in "${shapes[@]}"; do
    read -r preset b t _ <<<"$s"
    for o in "${only[@]}"; do [[ "$o" == "$preset:${b}x$t" ]] && picked+=("$s"); done
  done
  [[ ${#picked[@]} -gt 0 ]] || { echo "compare_train.sh: --only ${only[*]} matches no row of the set" >&2; exit 2; }
  shapes=("${picked[@]}")
fi

out="${OUT_DIR:-$(mktemp -d /tmp/kiln-compare-train.XXXXXX)}"
mkdir -p "$out"
mode="full fine-tuning"
[[ $lora -gt 0 ]] && mode="LoRA rank $lora (all-linear, alpha $((2 * lora)), frozen base)"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, threads $threads, $rounds rounds, $mode; load: $(cut -d' ' -f1-3 /proc/loadavg); rows in $out"

# The machine's measured peaks, for PyTorch's peak column.
peaks="$(OMP_NUM_THREADS="$threads" "$kiln" bench train --preset bench-h64 --steps 1 --warmup 0 \
  --recompute off | sed -n 1p)"
echo "$peaks"
peak32="$(sed -n 's/.*measured peak fp32 \([0-9.]*\) GFLOP.*/\1/p' <<<"$peaks")"
peak16="$(sed -n 's/.*bf16 \([0-9.]*\) GFLOP.*/\1/p' <<<"$peaks")"

lora_flag=()  # only when asked: an older --baseline binary may not know --lora
[[ $lora -gt 0 ]] && lora_flag=(--lora "$lora")
kiln_row() {  # preset batch seq steps warmup dtype [binary]
  OMP_NUM_THREADS="$threads" "${7:-$kiln}" bench train --preset "$1" --batch "$2" --seq "$3" \
    --steps "$4" --warmup "$5" --dtype "$6" --recompute "$recompute" "${lora_flag[@]}" | tail -1
}
torch_row() {  # preset batch seq steps warmup dtype
  if [[ -n "$baseline" ]]; then
    kiln_row "$@" "$baseline"
    return
  fi
  local flag=()
  [[ "$6" == bf16 ]] && flag=(--bf16)
  /usr/bin/python3 "$here/pytorch_train_bench.py" --preset "$1" --batch "$2" --seq "$3" \
    --steps "$4" --warmup "$5" "${flag[@]}" --threads "$threads" --recompute "$recompute" \
    --peak-fp32 "${peak32:-0}" --peak-bf16 "${peak16:-0}" "${lora_flag[@]}" | tail -1
}

# Rows: shape params BxT type rcmp step_s tokens/s GFLOP/s peak rss_MiB ...; tokens/s is column
# 7, GFLOP/s 8, peak (% of the measured FMA peak) 9, rss_MiB 10.
dtypes=(fp32)
[[ $bf16 == 1 ]] && dtypes+=(bf16)
for s in "${shapes[@]}"; do
  read -r preset b t steps warmup <<<"$s"
  for ((r = 1; r <= rounds; ++r)); do
    for dt in "${dtypes[@]}"; do
      kiln_row "$preset" "$b" "$t" "$steps" "$warmup" "$dt" | tee -a "$out/kiln-$dt.txt" |
        sed "s/^/round $r kiln    /"
      torch_row "$preset" "$b" "$t" "$steps" "$warmup" "$dt" | tee -a "$out/torch-$dt.txt" |
        sed "s/^/round $r pytorch /"
    done
  done
done

# Per shape: the median over rounds of kiln and PyTorch tokens/s, and of the round's ratio
# (a kiln row divided by the PyTorch row that ran right after it, as the inverse ratio of their
# step times: the printed tokens/s are rounded to units, too coarse at 0.5b), with its range; kiln's median
# GFLOP/s and fraction of the measured peak (fp32's FMA loop, or bf16's for a bf16 row).
summary() {  # kiln-dtype torch-dtype
  awk -v K="$out/kiln-$1.txt" -v T="$out/torch-$2.txt" -v KD="$1" -v TD="$2" '
    function median(a, n,   i, j, x) {
      for (i = 2; i <= n; ++i) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; --j) a[j + 1] = a[j]; a[j + 1] = x }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    BEGIN {
      n = 0
      while ((getline l < K) > 0) { split(l, f); k = f[1] " " f[3]; if (!(k in cnt)) order[++n] = k; c = ++cnt[k]; kt[k, c] = f[7]; ks[k, c] = f[6]; km[k, c] = f[10]; kg[k, c] = f[8]; kp[k, c] = f[9] + 0 }
      while ((getline l < T) > 0) { split(l, f); k = f[1] " " f[3]; tc[k]++; tt[k, tc[k]] = f[7]; ts[k, tc[k]] = f[6]; tm[k, tc[k]] = f[10] }
      for (i = 1; i <= n; ++i) {
        k = order[i]; m = cnt[k] < tc[k] ? cnt[k] : tc[k]
        if (m == 0) continue
        lo = 1e30; hi = 0
        for (j = 1; j <= m; ++j) { a[j] = kt[k, j]; b[j] = tt[k, j]; q[j] = ts[k, j] / ks[k, j]; x[j] = km[k, j]; y[j] = tm[k, j]; g[j] = kg[k, j]; p[j] = kp[k, j]
                                   if (q[j] < lo) lo = q[j]; if (q[j] > hi) hi = q[j] }
        split(k, f, " ")
        printf "%-13s %-8s %-4s %-4s %10.1f %10.1f %6.2fx %5.2f-%-5.2f %9.0f %9.0f %9.1f %5.1f%%\n", f[1], f[2], KD, TD, median(a, m), median(b, m), median(q, m), lo, hi, median(x, m), median(y, m), median(g, m), median(p, m)
      }
    }'
}
echo
other="PyTorch"
[[ -n "$baseline" ]] && other="baseline $baseline (in the torch columns)"
echo "kiln / $other tokens/s, $mode (same machine, same run; medians of $rounds alternating rounds; kiln_GF/s and peak: kiln's GFLOP/s and its share of the measured FMA peak)"
printf "%-13s %-8s %-4s %-4s %10s %10s %7s %11s %9s %9s %9s %6s\n" shape BxT kiln torch kiln_tok/s \
  torch_tok/s ratio range kiln_MiB torch_MiB kiln_GF/s peak
summary fp32 fp32
if [[ $bf16 == 1 ]]; then
  summary bf16 fp32
  summary bf16 bf16
fi
