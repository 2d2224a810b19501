#!/usr/bin/python3
"""PyTorch baseline for `kiln bench train`: trains the same Qwen2 shapes with the same batch,
sequence length and optimizer (AdamW, lr 1e-4, betas 0.9/0.999, eps 1e-8, no weight decay) and
prints the same columns, so kiln/PyTorch ratios are taken on one machine in one run
(bench/compare_train.sh does that).

Run it with Debian's Python, /usr/bin/python3 (NOT a pyenv/venv `python3` earlier on PATH):

    /usr/bin/python3 bench/pytorch_train_bench.py [--bf16] [--threads N] [--quick] [--lora RANK]

It needs `apt-get install python3-torch libopenblas0-openmp`: without libopenblas0-openmp,
Debian's torch silently uses the reference BLAS and is about ten times slower. Never needed by
the build or the tests.

The model is a plain Qwen2 written here: RMSNorm, rotate-half RoPE, grouped-query causal
attention (matmuls + mask; torch 1.13 has no scaled_dot_product_attention), SwiGLU MLP, q/k/v
biases, tied LM head, cross-entropy over next tokens (the last position of each row ignored).
--bf16 runs forward and loss under torch.autocast("cpu", dtype=torch.bfloat16) with fp32 master
weights and optimizer, like kiln's train.dtype bf16. --recompute on wraps each decoder layer in
torch.utils.checkpoint (activation checkpointing).

--lora RANK trains LoRA adapters on a frozen base instead, as `kiln bench train --lora RANK` does:
every base parameter (embedding and tied head, norms, projections and biases) has
requires_grad False, and each of the seven projections (q, k, v, o, gate, up, down) gets a
hand-written adapter with PEFT's math (PEFT is not packaged here): y = W x + b + s B (A x),
A (r, in) Kaiming-uniform with a = sqrt(5), B (out, r) zeros, s = alpha / r with alpha = 2 r, no
dropout; AdamW steps the adapters only. The params column then reads trainable/base.

Each row runs in a fresh child process so that its peak RSS (ru_maxrss) is its own.
"""

import argparse
import math
import os
import resource
import subprocess
import sys
import time

# name: (hidden, intermediate, layers, heads, kv_heads, vocab, rope_theta[, head_dim]); all tied
# embeddings. The same numbers as kiln's presets (src/kiln/model/config.cc). Qwen3 presets (a
# head_dim given) have no q/k/v biases and RMSNorm each head of q and k before RoPE.
PRESETS = {
    "bench-h64": (64, 176, 2, 4, 2, 4096, 10000.0),
    "25m": (384, 1024, 8, 6, 2, 32000, 10000.0),
    "bench-h512": (512, 1408, 8, 8, 2, 151936, 1000000.0),
    "qwen2.5-0.5b": (896, 4864, 24, 14, 2, 151936, 1000000.0),
    "qwen3-0.6b": (1024, 3072, 28, 16, 8, 151936, 1000000.0, 128),
}


def preset(name):
    """(hidden, intermediate, layers, heads, kv_heads, vocab, theta, head_dim, qwen3)."""
    p = PRESETS[name]
    return p[:7] + ((p[7], True) if len(p) > 7 else (p[0] // p[3], False))

# (preset, batch, seq, timed steps, warm-up steps): kiln bench train's fixed set.
SHAPES = [
    ("bench-h64", 1, 256, 20, 3),
    ("bench-h64", 4, 256, 10, 2),
    ("25m", 1, 256, 5, 2),
    ("bench-h512", 1, 256, 4, 1),
    ("bench-h512", 4, 512, 3, 1),
    ("qwen2.5-0.5b", 1, 256, 3, 1),
    ("qwen2.5-0.5b", 1, 512, 3, 1),
]
QUICK = [("bench-h64", 1, 256, 10, 2), ("25m", 1, 256, 3, 1)]


def param_count(h, i, l, nh, kv, v, hd, qwen3):
    q, k = nh * hd, kv * hd
    extra = 2 * hd if qwen3 else q + 2 * k  # q/k norms, or q/k/v biases
    layer = h * q + 2 * h * k + extra + q * h + 3 * h * i + 2 * h
    return v * h + l * layer + h


def lora_params(h, i, l, nh, kv, hd, rank):
    """Adapter parameters on all seven projections: r * (in + out) each."""
    q, k = nh * hd, kv * hd
    return l * rank * ((h + q) + 2 * (h + k) + (q + h) + 3 * (h + i))


def train_flops(h, i, l, nh, kv, v, tokens, t, hd, rank=0):
    """Same formula as kiln's train_flops (src/kiln/model/phase_costs.cc): 6 FLOPs per matmul
    parameter and token; with LoRA (rank > 0) 4 per frozen base matmul parameter (forward and
    input gradients) and 6 per adapter parameter; attention alike."""
    q, k = nh * hd, kv * hd
    layer_matmul = h * q + 2 * h * k + q * h + 3 * h * i
    matmul_params = l * layer_matmul + v * h
    attn = l * 2.0 * 2.0 * (t / 2.0) * q
    if rank > 0:
        return (4.0 * matmul_params + 6.0 * lora_params(h, i, l, nh, kv, hd, rank)) * tokens + \
            3.0 * attn * tokens
    return 6.0 * matmul_params * tokens + 3.0 * attn * tokens


def run_row(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.utils.checkpoint as cp

    torch.set_num_threads(args.threads)
    h, inter, nl, nh, nkv, vocab, theta, hd, qwen3 = preset(args.preset)
    B, T = args.batch, args.seq

    class RMSNorm(nn.Module):
        def __init__(self, n, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))
            self.eps = eps

        def forward(self, x):
            xf = x.float()
            r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
            return (xf * r).to(x.dtype) * self.weight

    class LoraLinear(nn.Module):
        """PEFT's LoRA Linear, by hand: y = base(x) + s * B(A(x)), base frozen."""

        def __init__(self, base, rank):
            super().__init__()
            self.base = base
            self.lora_A = nn.Linear(base.in_features, rank, bias=False)
            self.lora_B = nn.Linear(rank, base.out_features, bias=False)
            nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
            nn.init.zeros_(self.lora_B.weight)
            alpha = 2.0 * rank
            self.scaling = alpha / rank

        def forward(self, x):
            return self.base(x) + self.lora_B(self.lora_A(x)) * self.scaling

    def rotate_half(x):
        a, b = x.chunk(2, dim=-1)
        return torch.cat((-b, a), dim=-1)

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = RMSNorm(h)
            self.q = nn.Linear(h, nh * hd, bias=not qwen3)
            self.k = nn.Linear(h, nkv * hd, bias=not qwen3)
            self.v = nn.Linear(h, nkv * hd, bias=not qwen3)
            self.qn = RMSNorm(hd) if qwen3 else nn.Identity()
            self.kn = RMSNorm(hd) if qwen3 else nn.Identity()
            self.o = nn.Linear(nh * hd, h, bias=False)
            self.ln2 = RMSNorm(h)
            self.gate = nn.Linear(h, inter, bias=False)
            self.up = nn.Linear(h, inter, bias=False)
            self.down = nn.Linear(inter, h, bias=False)

        def forward(self, x, cos, sin, mask):
            xn = self.ln1(x)
            q = self.qn(self.q(xn).view(B, T, nh, hd)).transpose(1, 2)
            k = self.kn(self.k(xn).view(B, T, nkv, hd)).transpose(1, 2)
            v = self.v(xn).view(B, T, nkv, hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k = k.repeat_interleave(nh // nkv, dim=1)
            v = v.repeat_interleave(nh // nkv, dim=1)
            s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd)) + mask
            p = torch.softmax(s.float(), dim=-1).to(q.dtype)
            y = (p @ v).transpose(1, 2).reshape(B, T, nh * hd)
            x = x + self.o(y)
            xn = self.ln2(x)
            return x + self.down(F.silu(self.gate(xn)) * self.up(xn))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, h)
            self.layers = nn.ModuleList([Layer() for _ in range(nl)])
            self.norm = RMSNorm(h)
            for name, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)
                elif name.endswith(".bias"):
                    nn.init.zeros_(p)

        def forward(self, ids, targets, cos, sin, mask):
            x = self.embed(ids)
            for layer in self.layers:
                if args.recompute == "on":
                    x = cp.checkpoint(layer, x, cos, sin, mask, use_reentrant=False)
                else:
                    x = layer(x, cos, sin, mask)
            x = self.norm(x)
            logits = x @ self.embed.weight.t()  # tied head
            return F.cross_entropy(logits.float().view(-1, vocab), targets.view(-1),
                                   ignore_index=-100)

    torch.manual_seed(7)
    model = Model()
    base_count = sum(p.numel() for p in model.parameters())
    if args.lora > 0:
        for p in model.parameters():
            p.requires_grad_(False)
        for layer in model.layers:
            for name in ("q", "k", "v", "o", "gate", "up", "down"):
                setattr(layer, name, LoraLinear(getattr(layer, name), args.lora))
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    ids = torch.randint(0, vocab, (B, T))
    targets = torch.full((B, T), -100, dtype=torch.long)
    targets[:, :-1] = ids[:, 1:]
    inv = theta ** (-torch.arange(0, hd // 2, dtype=torch.float64) * 2.0 / hd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    ang = torch.cat((ang, ang), dim=-1)
    cos, sin = ang.cos().float(), ang.sin().float()
    mask = torch.full((T, T), float("-inf")).triu(1)

    times = []
    for s in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        if args.bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(ids, targets, cos, sin, mask)
        else:
            loss = model(ids, targets, cos, sin, mask)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if s >= args.warmup:
            times.append(dt)
    times.sort()
    med = times[len(times) // 2]
    tokens = B * T
    gflops = train_flops(h, inter, nl, nh, nkv, vocab, tokens, T, hd, args.lora) / med / 1e9
    peak = args.peak_bf16 if args.bf16 else args.peak_fp32
    frac = "%6.1f%%" % (100.0 * gflops / peak) if peak > 0 else "     - "
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    count = param_count(h, inter, nl, nh, nkv, vocab, hd, qwen3)
    assert count == base_count, (count, base_count)
    if args.lora > 0:
        n_trained = sum(p.numel() for p in trained)
        assert n_trained == lora_params(h, inter, nl, nh, nkv, hd, args.lora)
        params = "%.2fM/%.1fM" % (n_trained / 1e6, count / 1e6)
        est = (4.0 * count + 16.0 * n_trained) / 1048576.0
    else:
        params = "%.1fM" % (count / 1e6)
        est = 16.0 * count / 1048576.0
    print("%-13s %8s %3dx%-4d %-4s %-4s %9.4f %9.0f %8.1f %s %8.0f %8.0f %7s %9s" %
          (args.preset, params, B, T,
           "bf16" if args.bf16 else "fp32", args.recompute, med, tokens / med, gflops, frac,
           rss, est, "-", "-"), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bf16", action="store_true", help="torch.autocast cpu bf16")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads")
    ap.add_argument("--quick", action="store_true", help="only the hidden-64 and 25m shapes")
    ap.add_argument("--preset", action="append", help="only these presets (repeatable)")
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default: per shape)")
    ap.add_argument("--warmup", type=int, default=-1, help="warm-up steps (default: per shape)")
    ap.add_argument("--recompute", default="off", choices=["off", "on", "both"],
                    help="activation checkpointing per layer (torch.utils.checkpoint)")
    ap.add_argument("--peak-fp32", type=float, default=0.0,
                    help="machine peak in GFLOP/s for the peak column (kiln bench train prints it)")
    ap.add_argument("--peak-bf16", type=float, default=0.0)
    ap.add_argument("--lora", type=int, default=0,
                    help="LoRA rank on a frozen base (all seven projections, alpha 2 x rank); "
                         "0: full fine-tuning")
    ap.add_argument("--row", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=None,
                    help="with one --preset: only this batch (and --seq), not the fixed set's rows")
    ap.add_argument("--seq", type=int, default=None, help="sequence length (with --batch)")
    args = ap.parse_args()
    if args.lora < 0:
        sys.exit("pytorch_train_bench: --lora must be a rank >= 1, or 0, got %d" % args.lora)
    if args.row:
        args.preset = args.preset[0]
        run_row(args)
        return

    # OpenBLAS 0.3.21 does not recognise this CPU generation and falls back to its generic
    # Prescott kernels; kiln re-executes itself with OPENBLAS_CORETYPE=SkylakeX in that case
    # (src/kiln/kernels/cpu/blas_setup.cc). Give PyTorch's OpenBLAS the same, for like with like.
    if "OPENBLAS_CORETYPE" not in os.environ:
        flags = set()
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
        if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
            os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    import torch
    shapes = QUICK if args.quick else SHAPES
    if args.preset:
        unknown = [p for p in args.preset if p not in PRESETS]
        if unknown:
            sys.exit("pytorch_train_bench: unknown preset %s (known: %s)" %
                     (", ".join(unknown), ", ".join(PRESETS)))
        shapes = [s for s in SHAPES if s[0] in args.preset]
        if args.batch is not None or args.seq is not None:
            if len(args.preset) != 1:
                sys.exit("pytorch_train_bench: --batch/--seq need exactly one --preset")
            shapes = [(args.preset[0], args.batch or 1, args.seq or 256, 5, 2)]
    with open("/proc/self/maps") as f:
        blas = "OpenBLAS" if "openblas" in f.read() else "not OpenBLAS (see torch.__config__)"
    print("pytorch %s train bench: %d threads, dtype %s, %s, %s, OPENBLAS_CORETYPE=%s" %
          (torch.__version__, args.threads, "bf16 autocast" if args.bf16 else "fp32",
           "LoRA rank %d (all-linear, alpha %d, frozen base)" % (args.lora, 2 * args.lora)
           if args.lora > 0 else "full fine-tuning", blas,
           os.environ.get("OPENBLAS_CORETYPE", "(unset)")))
    print("%-13s %8s %-8s %-4s %-4s %9s %9s %8s %7s %8s %8s %7s %9s" %
          ("shape", "params", "BxT", "type", "rcmp", "step_s", "tokens/s", "GFLOP/s", "peak",
           "rss_MiB", "est_MiB", "base", "other_cpu"), flush=True)
    modes = ["off", "on"] if args.recompute == "both" else [args.recompute]
    for preset, b, t, steps, warmup in shapes:
        for mode in modes:
            cmd = [sys.executable, os.path.abspath(__file__), "--row", "--preset", preset,
                   "--batch", str(b), "--seq", str(t),
                   "--steps", str(args.steps or steps),
                   "--warmup", str(args.warmup if args.warmup >= 0 else warmup),
                   "--recompute", mode, "--threads", str(args.threads),
                   "--peak-fp32", str(args.peak_fp32), "--peak-bf16", str(args.peak_bf16),
                   "--lora", str(args.lora)]
            if args.bf16:
                cmd.append("--bf16")
            rc = subprocess.call(cmd)
            if rc != 0:
                sys.exit("pytorch_train_bench: row %s %dx%d failed (exit %d)" % (preset, b, t, rc))


if __name__ == "__main__":
    main()
