#!/usr/bin/env python3
"""PyTorch GPU baseline for `kiln bench train` on CUDA: trains Hugging Face's Qwen2ForCausalLM
at the Qwen2.5 0.5B / 1.5B shapes, or Qwen3ForCausalLM at Qwen3-0.6B's (built from a config here: no downloads, random weights) on
random tokens, with bf16 autocast, SDPA attention and fused AdamW (lr 1e-4, betas 0.9/0.999,
eps 1e-8, no weight decay, fp32 master weights: the settings of kiln's bench), then prints one
JSON object per shape:

    {"preset": ..., "batch": B, "seq": T, "params": P, "step_s": median, "tokens_per_s": ...,
     "tflops": achieved, "mfu": tflops / --peak-tflops (null without it),
     "peak_mem_gib": torch.cuda.max_memory_allocated, "torch": version, "device": name}

    python3 bench/pytorch_gpu_train_bench.py --preset qwen2.5-0.5b --batch 2 --seq 2048 \
        [--steps 10] [--warmup 3] [--peak-tflops 790] [--recompute]

FLOPs are counted with kiln's formula (src/kiln/model/config.cc train_flops: 6 x matmul
parameters x tokens + causal attention), so the two benches' TFLOP/s compare directly.
Exits 2 with one line when torch, transformers or a CUDA GPU is missing. scripts/gpu_check.sh
runs it on the GPU machine right after kiln's bench.
"""

import argparse
import json
import sys
import time

# name: (hidden, intermediate, layers, heads, kv_heads, vocab, rope_theta, head_dim, family);
# tied embeddings. The same numbers as kiln's presets (src/kiln/model/config.cc).
PRESETS = {
    "bench-h64": (64, 176, 2, 4, 2, 4096, 10000.0, 16, "qwen2"),
    "qwen2.5-0.5b": (896, 4864, 24, 14, 2, 151936, 1000000.0, 64, "qwen2"),
    "qwen2.5-1.5b": (1536, 8960, 28, 12, 2, 151936, 1000000.0, 128, "qwen2"),
    "qwen3-0.6b": (1024, 3072, 28, 16, 8, 151936, 1000000.0, 128, "qwen3"),
}


def train_flops(h, inter, layers, heads, kv, vocab, tokens, seq, hd):
    """kiln's train_flops (src/kiln/model/config.cc)."""
    q, k = heads * hd, kv * hd
    layer_matmul = h * q + 2 * h * k + q * h + 3 * h * inter
    matmul_params = layers * layer_matmul + vocab * h
    attn = layers * 2.0 * 2.0 * (seq / 2.0) * q
    return 6.0 * matmul_params * tokens + 3.0 * attn * tokens


def die(msg):
    print(f"pytorch_gpu_train_bench: {msg}", flush=True)
    sys.exit(2)


def import_stack(cpu):
    try:
        import torch
    except ImportError as e:
        die(f"no torch ({e})")
    if not cpu and not torch.cuda.is_available():
        die(f"no CUDA GPU visible to torch {torch.__version__}")
    try:
        import transformers
    except ImportError as e:
        die(f"no transformers ({e})")
    return torch, transformers


def build_model(torch, transformers, preset, seq, device):
    h, inter, layers, heads, kv, vocab, theta, hd, family = PRESETS[preset]
    names = {"qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
             "qwen3": ("Qwen3Config", "Qwen3ForCausalLM")}[family]
    if not hasattr(transformers, names[0]):
        die(f"transformers {transformers.__version__} has no {names[0]}")
    config = getattr(transformers, names[0])(
        vocab_size=vocab,
        hidden_size=h,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=hd,
        max_position_embeddings=max(seq, 32768),
        rope_theta=theta,  # transformers 4.x; 5.x reads rope_parameters
        rope_parameters={"rope_type": "default", "rope_theta": theta},
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        use_cache=False,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    with torch.device(device):  # initialised on the GPU: seconds, not minutes, at 1.5B
        model = getattr(transformers, names[1])(config)
    return model.float()


def bench(args):
    torch, transformers = import_stack(args.cpu_smoke_test)
    dev = torch.device("cpu" if args.cpu_smoke_test else "cuda")
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    model = build_model(torch, transformers, args.preset, args.seq, dev)
    if args.recompute:
        model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(
        model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, fused=True
    )
    vocab = PRESETS[args.preset][5]
    gen = torch.Generator(device=dev).manual_seed(7)
    ids = torch.randint(0, vocab, (args.batch, args.seq), device=dev, generator=gen)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            # labels=ids: HF shifts internally (next-token loss, last position ignored).
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    loss = None
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    tokens = args.batch * args.seq
    h, inter, layers, heads, kv, vocab, _, hd, _ = PRESETS[args.preset]
    tflops = train_flops(h, inter, layers, heads, kv, vocab, tokens, args.seq, hd) / med / 1e12
    out = {
        "preset": args.preset,
        "batch": args.batch,
        "seq": args.seq,
        "params": sum(p.numel() for p in model.parameters()),
        "recompute": bool(args.recompute),
        "steps": args.steps,
        "step_s": med,
        "tokens_per_s": tokens / med,
        "tflops": tflops,
        "mfu": tflops / args.peak_tflops if args.peak_tflops > 0 else None,
        "peak_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else 0.0,
        "last_loss": float(loss),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu",
    }
    print(json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="qwen2.5-0.5b", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peak-tflops", type=float, default=0.0, help="measured bf16 ceiling")
    ap.add_argument("--recompute", action="store_true", help="activation checkpointing")
    ap.add_argument(
        "--cpu-smoke-test",
        action="store_true",
        help="run on the CPU (tiny presets only): tests this script where no GPU is",
    )
    args = ap.parse_args()
    if args.batch < 1 or args.seq < 2 or args.steps < 1 or args.warmup < 0:
        die("--batch >= 1, --seq >= 2, --steps >= 1, --warmup >= 0")
    bench(args)


if __name__ == "__main__":
    main()
