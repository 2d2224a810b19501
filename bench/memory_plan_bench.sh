#!/usr/bin/env bash
# The memory plan against the measured peak: for each run, the largest process's predicted peak
# (the trainer's plan) beside its measured peak RSS over the whole run (load and final save
# included), as printed by every rank after the final save. Rows are packed (data.pack), so
# every row is full, as the benchmark's rows are.
# Usage: bash bench/memory_plan_bench.sh [ROW ...]   (needs build/bin/kiln, or KILN=path)
#   ROW: preset:micro_batch:seq_len:workers[:dtype[:strategy[:lora_rank]]], e.g.
#   qwen2.5-0.5b:1:256:2:fp32, or qwen2.5-0.5b:1:256:1:bf16:full_shard:16 for rank-16 LoRA
#   adapters on every projection (alpha 2 x rank)
#   No rows: the `kiln bench train` shapes on one worker, then qwen2.5-0.5b full_shard with 1, 2
#   and 4 workers (global batch 4 x 64 tokens, as bench/dist_bench.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=${KILN:-build/bin/kiln}
work=${KILN_BENCH_DIR:-/tmp/kiln_plan_bench}
steps=${STEPS:-3}
mkdir -p "$work"
rows=("$@")
if [ ${#rows[@]} -eq 0 ]; then
  rows=(bench-h64:1:256:1 bench-h64:4:256:1 25m:1:256:1 bench-h512:1:256:1 bench-h512:4:512:1
        qwen2.5-0.5b:1:256:1 qwen2.5-0.5b:1:512:1
        qwen2.5-0.5b:4:64:1 qwen2.5-0.5b:2:64:2 qwen2.5-0.5b:1:64:4)
fi
printf '%-14s %5s %4s %3s %-4s %-13s %4s %10s %10s %7s\n' preset batch seq W dtype strategy \
  lora "predicted" "measured" "error"
for row in "${rows[@]}"; do
  IFS=: read -r preset mb seq w dtype strategy lora <<<"$row"
  dtype=${dtype:-fp32}
  strategy=${strategy:-full_shard}
  lora=${lora:-0}
  [ -f "$work/$preset/config.json" ] ||
    $kiln init --config "$preset" --seed 0 --dtype bf16 --out "$work/$preset" >/dev/null
  cat >"$work/recipe.yaml" <<YAML
model: {path: $work/$preset}
data: {train: $PWD/assets/demo/tokens.jsonl, seq_len: $seq, pack: true}
optimizer: {lr: 1.0e-5}
train: {max_steps: $steps, micro_batch_size: $mb, log_every: 1, dtype: $dtype}
output: {dir: $work/run, tensorboard: false}
YAML
  [ "$lora" = 0 ] || echo "lora: {rank: $lora, alpha: $((2 * lora))}" >>"$work/recipe.yaml"
  log="$work/$preset-$mb-$seq-$w-$dtype-$strategy-$lora.log"
  rm -rf "$work/run"
  $kiln train "$work/recipe.yaml" dist.nproc_per_node="$w" dist.strategy="$strategy" \
    dist.threads_per_worker=$((w == 1 ? 2 : 1)) >"$log" 2>&1 || { echo "$row: failed, see $log"; continue; }
  # "rank R: peak RSS X MiB, predicted Y MiB": the rank with the largest measured peak.
  read -r measured predicted < <(grep -o 'peak RSS [0-9]* MiB, predicted [0-9]* MiB' "$log" |
    awk '{print $3, $6}' | sort -n | tail -1)
  err=$(python3 -c "print(f'{100 * ($predicted - $measured) / $measured:+.1f}%')")
  printf '%-14s %5s %4s %3s %-4s %-13s %4s %6s MiB %6s MiB %7s\n' "$preset" "$mb" "$seq" "$w" \
    "$dtype" "$strategy" "$lora" "$predicted" "$measured" "$err"
done
