#!/usr/bin/env bash
# CPU scale-out: tokens/s of 2 workers x 1 thread against 1 worker x 2 threads, same global
# batch, full_shard. The two sides alternate, round after round, so a noisy machine hits both
# alike; prints each round and the medians (median tokens/s over the steps after the first).
# Usage: bash bench/scaleout_bench.sh [--kiln BIN] [--rounds R] [--steps S] [--seq T]
#          [--batch B] [--preset P] [key=value ...]
#   defaults: build/bin/kiln, 3 rounds, 6 steps, seq 256, global batch 4, preset 25m;
#   key=value pairs are recipe overrides given to both sides (e.g. dist.reduce_dtype=bf16).
set -euo pipefail
cd "$(dirname "$0")/.."
kiln=build/bin/kiln rounds=3 steps=6 seq=256 batch=4 preset=25m
overrides=()
while (($#)); do
  case $1 in
    --kiln) kiln=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --preset) preset=$2; shift 2 ;;
    *=*) overrides+=("$1"); shift ;;
    *) echo "scaleout_bench: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=${KILN_BENCH_DIR:-/tmp/kiln_scaleout_bench}
mkdir -p "$work"
[ -f "$work/$preset/config.json" ] ||
  $kiln init --config "$preset" --seed 0 --out "$work/$preset" >/dev/null
cat > "$work/recipe.yaml" <<YAML
model: {path: $work/$preset}
data: {train: $PWD/assets/demo/tokens.jsonl, seq_len: $seq, pack: true}
optimizer: {lr: 1.0e-5}
train: {max_steps: $steps, micro_batch_size: $batch, log_every: 1}
dist: {strategy: full_shard}
output: {dir: $work/run, overwrite: true}
YAML
median_tps() {  # median tokens/s over the steps after the first
  python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
print(f"{statistics.median(r['tokens_per_s'] for r in rows):.1f}")
PY
}
run_side() {  # workers threads -> tokens/s
  local w=$1 t=$2
  $kiln train "$work/recipe.yaml" dist.nproc_per_node="$w" dist.threads_per_worker="$t" \
    train.micro_batch_size=$((batch / w)) "${overrides[@]}" > "$work/w$w.log" 2>&1 ||
    { cat "$work/w$w.log" >&2; exit 1; }
  median_tps "$work/run/metrics.jsonl"
}
echo "# preset $preset, global batch $batch x $seq tokens, $steps steps, $rounds rounds" \
  "${overrides[*]:-}"
printf '%-6s %14s %14s %8s\n' round "1w x 2t tok/s" "2w x 1t tok/s" ratio
a_all=() b_all=()
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then a=$(run_side 1 2); b=$(run_side 2 1); else b=$(run_side 2 1); a=$(run_side 1 2); fi
  a_all+=("$a") b_all+=("$b")
  printf '%-6s %14s %14s %8s\n' "$r" "$a" "$b" "$(python3 -c "print(f'{$b / $a:.3f}')")"
done
python3 - "${a_all[*]}" "${b_all[*]}" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"median {ma:14.1f} {mb:14.1f} {mb / ma:8.3f}")
PY
