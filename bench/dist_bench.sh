#!/usr/bin/env bash
# FSDP memory and overhead on this machine, printed as figures:
#  1. peak resident memory per rank for full_shard with 1, 2 and 4 workers on a model whose
#     states dominate memory (default: the qwen2.5-0.5b shape, short sequences), next to the
#     theoretical sharded state (params + grads + AdamW m, v = 16 bytes x parameters / workers);
#  2. tokens/s of 1 worker x 2 threads versus 2 workers x 1 thread, same global batch.
# Usage: bash bench/dist_bench.sh [preset] [steps]      (needs build/bin/kiln)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-qwen2.5-0.5b}
steps=${2:-4}
kiln=build/bin/kiln
work=${KILN_BENCH_DIR:-/tmp/kiln_dist_bench}
mkdir -p "$work"
[ -f "$work/$preset/config.json" ] || $kiln init --config "$preset" --seed 0 --dtype bf16 --out "$work/$preset" >/dev/null
cat > "$work/recipe.yaml" <<YAML
model: {path: $work/$preset}
data: {train: $PWD/assets/demo/tokens.jsonl, seq_len: 64}
optimizer: {lr: 1.0e-5}
train: {max_steps: $steps, micro_batch_size: 4, log_every: 1}
output: {dir: $work/run}
YAML
median_tps() {  # median tokens/s over steps after the first
  python3 - "$1" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
print(f"{statistics.median(r['tokens_per_s'] for r in rows):.1f}")
PY
}
echo "preset $preset; global batch 4 x 64 tokens; $steps steps"
printf '%-24s %8s %15s %15s %15s\n' "run" "tok/s" "peak RSS/rank" "sharded state" "theory 16P/W"
for w in 1 2 4; do
  mb=$((4 / w))
  log="$work/w$w.log"
  $kiln train "$work/recipe.yaml" dist.nproc_per_node=$w dist.threads_per_worker=$(( w == 1 ? 2 : 1 )) \
    train.micro_batch_size=$mb dist.strategy=full_shard > "$log" 2>&1
  tps=$(median_tps "$work/run/metrics.jsonl")
  rss=$(grep -o 'peak RSS [0-9]* MiB' "$log" | awk '{print $3}' | sort -n | tail -1)
  state=$(grep -o 'sharded params+grads [0-9]* MiB, optimizer state [0-9]* MiB' "$log" | head -1 | awk '{print $3 + $7}')
  params=$(grep -o '[0-9.]*M parameters' "$log" | head -1 | tr -d 'M parameters')
  theory=$(python3 -c "print(round(16 * $params * 1e6 / $w / 1048576))")
  printf '%-24s %8s %11s MiB %11s MiB %11s MiB\n' "full_shard ${w}w x $(( w == 1 ? 2 : 1 ))t" "$tps" "$rss" "$state" "$theory"
done
