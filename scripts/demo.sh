#!/usr/bin/env bash
# The demo: set up, build, then fine-tune a tiny randomly initialised Qwen2 model on the bundled
# token dataset and show the loss fall. Run as root on a fresh Debian 12 machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
kiln=build/bin/kiln
rm -rf runs/demo
$kiln init --config tiny --seed 0 --out runs/demo/init
$kiln eval --model runs/demo/init --data assets/demo/tokens.jsonl
$kiln train examples/demo-tiny.yaml
$kiln eval --model runs/demo/train/final --data assets/demo/tokens.jsonl
$kiln export --checkpoint runs/demo/train --out runs/demo/export-bf16 --dtype bf16
echo
echo "demo done: metrics in runs/demo/train/metrics.jsonl, model in runs/demo/train/final,"
echo "bf16 Hugging Face export in runs/demo/export-bf16"
