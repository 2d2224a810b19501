#!/usr/bin/env bash
# The demo: set up, build, then fine-tune a tiny randomly initialised Qwen2 model with two worker
# processes (full_shard): first on token ids, then on the bundled chat dataset, and finally ask
# the chat model one of its questions. Run as root on a fresh Debian 12 machine.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only the kiln binary, without the CUDA backend: the demo runs on CPUs, and neither the test suite
# nor the CUDA kernels (three architectures) are needed to run it. scripts/test.sh builds
# everything (KILN_CUDA=AUTO again: the CUDA backend wherever the toolkit is).
bash scripts/build.sh --target kiln -DKILN_CUDA=OFF
kiln=build/bin/kiln
rm -rf runs/demo
$kiln doctor || true   # what this machine offers (GPUs, network, BLAS); the demo needs only CPUs

# 1. Token ids: repeated random motifs; the loss falls from ln(1024) = 6.9 to below 0.1.
$kiln init --config tiny --seed 0 --out runs/demo/init
$kiln train examples/demo-tiny.yaml
$kiln eval --model runs/demo/train/final --data assets/demo/tokens.jsonl
$kiln export --checkpoint runs/demo/train --out runs/demo/export-bf16 --dtype bf16

# 2. Chat: 200 short conversations, loss on the assistant replies only, packed sequences. The
# model is sized for the demo tokenizer, whose files init copies in.
$kiln init --config tiny --seed 0 --tokenizer assets/tokenizer/demo/tokenizer.json \
  --out runs/demo/chat-init
$kiln train examples/demo-chat.yaml
echo
echo "Q: What is the capital of Canada?"
echo -n "A: "
$kiln generate --model runs/demo/chat/final --chat --prompt "What is the capital of Canada?" \
  --temperature 0 --max-new-tokens 32
echo
echo "demo done: runs/demo/train (token ids) and runs/demo/chat (chat), each with metrics.jsonl,"
echo "checkpoints/ and final/ (Hugging Face layout); bf16 export in runs/demo/export-bf16"
echo "next, a real model (the network to the Hugging Face hub; README, \"A real model\"):"
echo "  $kiln download Qwen/Qwen3-0.6B && $kiln train examples/lora-qwen3-0.6b.yaml"
