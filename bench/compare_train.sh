#!/usr/bin/env bash
# kiln vs PyTorch training throughput on the same machine, in one run: runs `kiln bench train`
# (fixed shape set, or --quick) and bench/pytorch_train_bench.py on the same shapes, batch,
# sequence length, optimizer and thread count, then prints kiln/PyTorch tokens/s ratios.
#
#   bench/compare_train.sh [--kiln PATH] [--threads N] [--quick] [--bf16] [--recompute MODE]
#
# --kiln     the kiln binary (default: build/bin/kiln)
# --threads  OMP_NUM_THREADS for kiln and torch.set_num_threads for PyTorch (default: nproc)
# --quick    only the small shapes (hidden-64 and 25m)
# --bf16     also run kiln --dtype bf16 and PyTorch --bf16 (autocast) and print those ratios
# --recompute off|on|both: activation checkpointing for both sides (default off: the throughput
#            comparison; `both` also compares peak memory)
# --torch-recompute off|on|both: PyTorch's, when it should differ from kiln's
#
# PyTorch comes from Debian (apt-get install python3-torch libopenblas0-openmp) and is run with
# /usr/bin/python3; it is never needed by the build. The raw tables are kept in $OUT_DIR
# (default: a fresh directory under /tmp).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
kiln="$here/../build/bin/kiln"
threads="$(nproc)"
quick=()
bf16=0
recompute=off
torch_recompute=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --kiln) kiln="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --quick) quick=(--quick); shift ;;
    --bf16) bf16=1; shift ;;
    --recompute) recompute="$2"; shift 2 ;;
    --torch-recompute) torch_recompute="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "compare_train.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x "$kiln" ]] || { echo "compare_train.sh: kiln binary '$kiln' not found (--kiln PATH)" >&2; exit 2; }
/usr/bin/python3 -c "import torch" 2>/dev/null ||
  { echo "compare_train.sh: /usr/bin/python3 cannot import torch (apt-get install python3-torch libopenblas0-openmp)" >&2; exit 2; }

out="${OUT_DIR:-$(mktemp -d /tmp/kiln-compare-train.XXXXXX)}"
mkdir -p "$out"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs, threads $threads; tables in $out"

run_pair() {  # dtype
  local dtype="$1" pyflag=()
  [[ "$dtype" == bf16 ]] && pyflag=(--bf16)
  OMP_NUM_THREADS="$threads" "$kiln" bench train "${quick[@]}" --dtype "$dtype" \
    --recompute "$recompute" | tee "$out/kiln-$dtype.txt"
  local peak32 peak16
  peak32="$(sed -n 's/.*measured peak fp32 \([0-9.]*\) GFLOP.*/\1/p' "$out/kiln-$dtype.txt")"
  peak16="$(sed -n 's/.*bf16 \([0-9.]*\) GFLOP.*/\1/p' "$out/kiln-$dtype.txt")"
  /usr/bin/python3 "$here/pytorch_train_bench.py" "${quick[@]}" "${pyflag[@]}" \
    --threads "$threads" --recompute "${torch_recompute:-$recompute}" --peak-fp32 "${peak32:-0}" \
    --peak-bf16 "${peak16:-0}" | tee "$out/torch-$dtype.txt"
}

run_pair fp32
[[ $bf16 == 1 ]] && run_pair bf16

# Rows are keyed by shape, BxT, dtype and recompute (columns 1, 3, 4, 5); tokens/s is column 7.
echo
echo "kiln / PyTorch tokens/s (same machine, same run)"
printf "%-13s %-8s %-4s %-4s %10s %10s %7s %9s %9s\n" shape BxT type rcmp kiln torch ratio \
  kiln_MiB torch_MiB
for dtype in fp32 $([[ $bf16 == 1 ]] && echo bf16); do
  awk -v T="$out/torch-fp32.txt" '
    BEGIN { while ((getline l < T) > 0) { split(l, f); if (f[3] ~ /^[0-9]+x[0-9]+$/) { k = f[1] " " f[3] " " f[5]; tp[k] = f[7]; tm[k] = f[10] } } }
    $3 ~ /^[0-9]+x[0-9]+$/ { k = $1 " " $3 " " $5
      if (k in tp) printf "%-13s %-8s %-4s %-4s %10.0f %10.0f %6.2fx %9.0f %9.0f\n", $1, $3, $4, $5, $7, tp[k], $7 / tp[k], $10, tm[k] }
  ' "$out/kiln-$dtype.txt"
done
if [[ $bf16 == 1 ]]; then
  echo "(kiln bf16 rows are against PyTorch fp32, as the issue's target; PyTorch bf16 is in $out/torch-bf16.txt)"
fi
