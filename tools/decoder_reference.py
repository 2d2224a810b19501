#!/usr/bin/python3
"""Independent float64 PyTorch reference for Qwen2ForCausalLM, Qwen3ForCausalLM and
LlamaForCausalLM (loss + all gradients).

Regenerate the golden fixtures (from the repository root):

    /usr/bin/python3 tools/decoder_reference.py --out tests/fixtures/reference

Run the self-check (independent loop implementations + finite differences):

    /usr/bin/python3 tools/decoder_reference.py --check

Needs only PyTorch and numpy (Debian's python3-torch / python3-numpy, installed
by hand).  Neither `transformers` nor `safetensors` is used: the forward pass
re-implements Hugging Face's modeling_qwen2.py, modeling_qwen3.py and
modeling_llama.py (eager attention) and modeling_rope_utils.py's default,
linear and llama3 frequencies, and the safetensors files are written by hand.
Nothing in the build or CI runs this script; it only produces the checked-in
files under tests/fixtures/reference/.

Math (all in float64, from float32 weights; d = config head_dim, else C / H):
  x = embed_tokens.weight[input_ids]
  per layer:
    xn = rmsnorm(x, input_layernorm.weight)
    q,k,v = xn @ W^T (+ b: Qwen2 always, others when attention_bias) ; split heads
    Qwen3: q = rmsnorm(q, q_norm.weight), k = rmsnorm(k, k_norm.weight) over d, per head
    RoPE (HF rotate_half convention; inv_freq scaled per rope_scaling)
    GQA: query head h uses kv head h // (H / KV)
    attn = softmax(q k^T / sqrt(d) + causal mask) ; out = (attn @ v) merged @ Wo^T
    x = x + out
    xn2 = rmsnorm(x, post_attention_layernorm.weight)
    x = x + down(silu(gate(xn2)) * up(xn2))
  x = rmsnorm(x, model.norm.weight); logits = x @ head^T
    (head = lm_head.weight, or embed_tokens.weight if tie_word_embeddings)
  loss = CE(logits[:, :-1], labels[:, 1:], ignore_index=-100), mean over targets

LoRA cases (LORA_CASES; PEFT's LoraLayer.forward): each targeted
projection becomes y = x W^T (+ b) + s * (dropout(x) A^T) B^T with A (r, in),
B (out, r), s = lora_alpha / r (lora_alpha / sqrt(r) with use_rslora). The
fixture holds the base model, adapter_config.json and adapter_model.safetensors
in PEFT's format (names base_model.model.model.layers.N.self_attn.q_proj.
lora_A.weight, ...), and grads.safetensors holds the adapters' gradients only
(the base is frozen).

Dropout (a case with lora_dropout > 0, in training mode): PEFT's nn.Dropout(p),
one per target module, with kiln's mask (src/kiln/kernels/dropout_mask.h and
lora_ops.cc, repeated here in numpy) so that kiln can be held to it: target t
(q, k, v, o, gate, up, down = 0..6) of layer i draws from the stream seed
s_t = splitmix64(dropout_seed, i * 7 + t); element j of its input x, flattened
(B * T, in) row-major, is kept when the top 32 bits of splitmix64(s_t, j) are
>= round(float32(p) * 2^32), and scaled by 1 / (1 - p). splitmix64(s, k) is the
published generator's output number k + 1 from state s. expected.json then also
holds dropout_seed (Decoder::set_dropout_seed).
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

IGNORE_INDEX = -100

# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------

CASES = {
    "tied_gqa": dict(family="qwen2",
        seed=1234, hidden_size=32, intermediate_size=80, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=101,
        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        batch=2, seq=11),
    "untied_mha": dict(family="qwen2",
        seed=5678, hidden_size=48, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=67,
        rope_theta=1000000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
        batch=2, seq=9),
    "untied_mqa": dict(family="qwen2",
        seed=9012, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=1, vocab_size=53,
        rope_theta=500.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
        batch=1, seq=16),
    # Qwen3: q/k norms, no biases, head_dim larger than hidden / heads (q_proj (64, 32)).
    "qwen3_tied_hd16": dict(family="qwen3", head_dim=16,
        seed=3141, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=71,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
        batch=2, seq=10),
    # Qwen3 untied, head_dim smaller than hidden / heads (q_proj (24, 48)), MQA.
    "qwen3_untied_hd6": dict(family="qwen3", head_dim=6,
        seed=2718, hidden_size=48, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, vocab_size=59,
        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False,
        batch=1, seq=13),
    # Llama 3: llama3 rope scaling over an original context of 16 (head_dim 8, theta 10000:
    # wavelengths 6.3 below 64/4 = 16 (kept), 63 between (smoothed), 628 and 6283 above 64/1
    # (divided): all three bands).
    "llama_tied_llama3": dict(family="llama", head_dim=8,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        seed=1618, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=83,
        rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
        batch=2, seq=12),
    # Llama untied, head_dim 16 with hidden 32 and 4 heads, linear rope scaling.
    "llama_untied_linear": dict(family="llama", head_dim=16,
        rope_scaling={"rope_type": "linear", "factor": 4.0},
        seed=1414, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, vocab_size=61,
        rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
        batch=2, seq=9),
}

# LoRA on a base case: rank, alpha, targets (PEFT module names), rslora; A and B random
# (B non-zero, so every adapter matters), from the seed.
LORA_CASES = {
    "lora_qwen2_tied_gqa": dict(base="tied_gqa", seed=77, r=4, lora_alpha=8.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                        "down_proj"], use_rslora=False),
    "lora_qwen3_untied_hd6": dict(base="qwen3_untied_hd6", seed=78, r=3, lora_alpha=5.0,
        target_modules=["q_proj", "v_proj", "o_proj", "down_proj"], use_rslora=True),
    "lora_llama_tied_llama3": dict(base="llama_tied_llama3", seed=79, r=2, lora_alpha=16.0,
        target_modules=["k_proj", "gate_proj", "up_proj"], use_rslora=False),
    # Dropout: every target, so q/k/v and gate/up (one fused product in kiln without dropout)
    # each draw their own mask, as PEFT's modules do.
    "lora_dropout_qwen2_tied_gqa": dict(base="tied_gqa", seed=80, r=4, lora_alpha=8.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                        "down_proj"], use_rslora=False, lora_dropout=0.3,
        dropout_seed=20261203),
}
LORA_MODULES = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
                "o_proj": "self_attn", "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
# kiln's LoraTarget order: a target's dropout stream within a layer.
LORA_TARGET_INDEX = {m: i for i, m in enumerate(
    ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])}

ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "llama": "LlamaForCausalLM"}


def head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def has_bias(cfg):
    # Qwen2's attention always has q/k/v biases; Qwen3's and Llama's follow attention_bias.
    return cfg.get("family", "qwen2") == "qwen2" or cfg.get("attention_bias", False)


def hf_config(c):
    family = c.get("family", "qwen2")
    out = {
        "architectures": [ARCHITECTURES[family]],
        "model_type": family,
        "hidden_size": c["hidden_size"],
        "intermediate_size": c["intermediate_size"],
        "num_hidden_layers": c["num_hidden_layers"],
        "num_attention_heads": c["num_attention_heads"],
        "num_key_value_heads": c["num_key_value_heads"],
        "vocab_size": c["vocab_size"],
        "rms_norm_eps": c["rms_norm_eps"],
        "rope_theta": c["rope_theta"],
        "tie_word_embeddings": c["tie_word_embeddings"],
        "max_position_embeddings": 128,
        "hidden_act": "silu",
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "use_cache": False,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": c["num_hidden_layers"],
        "bos_token_id": 0,
        "eos_token_id": 1,
        "torch_dtype": "float32",
    }
    if family != "qwen2":
        out.update(head_dim=head_dim(c), attention_bias=False,
                   rope_scaling=c.get("rope_scaling"))
    if family == "llama":
        out.update(mlp_bias=False, pretraining_tp=1)
    out["family"] = family
    return out


# --------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------

def param_shapes(cfg):
    """Ordered list of (HF name, shape, kind) for every checkpoint tensor."""
    C = cfg["hidden_size"]
    I = cfg["intermediate_size"]
    H = cfg["num_attention_heads"]
    KV = cfg["num_key_value_heads"]
    V = cfg["vocab_size"]
    d = head_dim(cfg)
    bias = has_bias(cfg)
    out = [("model.embed_tokens.weight", (V, C), "mat")]
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        out.append((p + "input_layernorm.weight", (C,), "norm"))
        for proj, rows in (("q", H * d), ("k", KV * d), ("v", KV * d)):
            out.append((p + "self_attn.%s_proj.weight" % proj, (rows, C), "mat"))
            if bias:
                out.append((p + "self_attn.%s_proj.bias" % proj, (rows,), "bias"))
        if cfg.get("family") == "qwen3":
            out += [(p + "self_attn.q_norm.weight", (d,), "norm"),
                    (p + "self_attn.k_norm.weight", (d,), "norm")]
        out += [
            (p + "self_attn.o_proj.weight", (C, H * d), "mat"),
            (p + "post_attention_layernorm.weight", (C,), "norm"),
            (p + "mlp.gate_proj.weight", (I, C), "mat"),
            (p + "mlp.up_proj.weight", (I, C), "mat"),
            (p + "mlp.down_proj.weight", (C, I), "mat"),
        ]
    out.append(("model.norm.weight", (C,), "norm"))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, C), "mat"))
    return out


def make_params(cfg, seed):
    """Random float32 weights (seeded), returned as float32 tensors."""
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape, kind in param_shapes(cfg):
        z = torch.randn(shape, generator=g, dtype=torch.float32)
        if kind == "mat":
            t = z * 0.2
        elif kind == "bias":
            t = z * 0.1
        else:
            t = 1.0 + z * 0.1
        params[name] = t.to(torch.float32).contiguous()
    return params


def lora_shapes(cfg, lora):
    """Ordered (PEFT name, shape) of every adapter tensor: A (r, in), B (out, r)."""
    C, I = cfg["hidden_size"], cfg["intermediate_size"]
    Q = cfg["num_attention_heads"] * head_dim(cfg)
    KV = cfg["num_key_value_heads"] * head_dim(cfg)
    dims = {"q_proj": (Q, C), "k_proj": (KV, C), "v_proj": (KV, C), "o_proj": (C, Q),
            "gate_proj": (I, C), "up_proj": (I, C), "down_proj": (C, I)}
    r = lora["r"]
    out = []
    for i in range(cfg["num_hidden_layers"]):
        for m in lora["target_modules"]:
            name = "base_model.model.model.layers.%d.%s.%s" % (i, LORA_MODULES[m], m)
            rows, cols = dims[m]
            out += [(name + ".lora_A.weight", (r, cols)), (name + ".lora_B.weight", (rows, r))]
    return out


def make_adapter(cfg, lora):
    g = torch.Generator().manual_seed(lora["seed"])
    return {name: (torch.randn(shape, generator=g, dtype=torch.float32) * 0.2).contiguous()
            for name, shape in lora_shapes(cfg, lora)}


def lora_scale(lora):
    r = lora["r"]
    return lora["lora_alpha"] / (math.sqrt(r) if lora["use_rslora"] else r)


def peft_adapter_config(lora):
    """adapter_config.json as PEFT's LoraConfig.save_pretrained writes its main fields."""
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": "",
            "r": lora["r"], "lora_alpha": lora["lora_alpha"],
            "lora_dropout": lora.get("lora_dropout", 0.0),
            "target_modules": lora["target_modules"], "bias": "none",
            "use_rslora": lora["use_rslora"], "fan_in_fan_out": False,
            "inference_mode": True}


def make_batch(cfg, seed):
    g = torch.Generator().manual_seed(seed + 1)
    B, T, V = cfg["batch"], cfg["seq"], cfg["vocab_size"]
    ids = torch.randint(0, V, (B, T), generator=g)
    labels = ids.clone()
    # Row 0: a masked prompt prefix, as a chat template would produce.
    prefix = max(2, T // 3)
    labels[0, :prefix] = IGNORE_INDEX
    if B > 1:
        # Row 1: a few scattered masked positions (incl. the last one).
        labels[1, 2] = IGNORE_INDEX
        labels[1, T - 1] = IGNORE_INDEX
    else:
        # Single row: also mask one position after the prefix.
        labels[0, prefix + 3] = IGNORE_INDEX
    return ids.tolist(), labels.tolist()


# --------------------------------------------------------------------------
# Model (float64)
# --------------------------------------------------------------------------

def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_inv_freq(d, theta, scaling=None, dtype=torch.float64):
    """modeling_rope_utils: default, linear and llama3 frequencies (d/2)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=dtype) / d))
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
    if kind == "default":
        return inv_freq
    if kind == "linear":
        return inv_freq / scaling["factor"]
    assert kind == "llama3", kind
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_ctx = scaling["original_max_position_embeddings"]
    low_freq_wavelen = old_ctx / low
    high_freq_wavelen = old_ctx / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_ctx / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_cos_sin(T, d, theta, dtype=torch.float64, scaling=None):
    inv_freq = rope_inv_freq(d, theta, scaling, dtype)
    pos = torch.arange(T, dtype=dtype)
    freqs = torch.outer(pos, inv_freq)               # [T, d/2]
    emb = torch.cat((freqs, freqs), dim=-1)          # [T, d]
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):
    # x: [B, heads, T, d]; cos/sin: [T, d]
    return x * cos + rotate_half(x) * sin


def attention(q, k, v):
    """q: [B,H,T,d], k/v: [B,KV,T,d] (already roped). Returns [B,H,T,d]."""
    B, H, T, d = q.shape
    KV = k.shape[1]
    groups = H // KV
    k = k.repeat_interleave(groups, dim=1)  # head h -> kv head h // groups
    v = v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v)


def splitmix64(seed, k):
    """splitmix64's output number k + 1 from state seed; k a uint64 numpy array (wrapping)."""
    z = np.uint64(seed) + (np.asarray(k, dtype=np.uint64) + np.uint64(1)) * \
        np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def dropout_keep(seed, n, p):
    """kiln's mask (dropout_mask.h): element j of n kept when splitmix64(seed, j) >> 32 >=
    round(float32(p) * 2^32)."""
    threshold = np.uint64(np.rint(np.float64(np.float32(p)) * 2.0 ** 32))
    with np.errstate(over="ignore"):
        return (splitmix64(seed, np.arange(n, dtype=np.uint64)) >> np.uint64(32)) >= threshold


def lora_dropout(x, lora, drop, module):
    """PEFT's nn.Dropout(lora_dropout) in training on the input of `module` (kiln's mask);
    drop = (dropout_seed, layer), or None (evaluation: the identity)."""
    p = lora.get("lora_dropout", 0.0)
    if drop is None or p == 0:
        return x
    seed, layer = drop
    with np.errstate(over="ignore"):
        stream = int(splitmix64(seed, layer * 7 + LORA_TARGET_INDEX[module]))
    keep = dropout_keep(stream, x.numel(), p).reshape(x.shape)
    scale = 1.0 / (1.0 - float(np.float32(p)))
    return x * torch.from_numpy(keep.astype(np.float64)) * scale


def linear(P, p, module, x, lora, drop=None):
    """HF's nn.Linear for model.layers.N.<module>, with PEFT's LoRA when it targets it (its
    input through lora_dropout)."""
    zero = torch.zeros((), dtype=torch.float64)
    y = x @ P[p + module + ".weight"].T + P.get(p + module + ".bias", zero)
    target = module.split(".")[1]
    if lora and target in lora["target_modules"]:
        name = "base_model.model." + p + module
        xd = lora_dropout(x, lora, drop, target)
        y = y + lora_scale(lora) * ((xd @ P[name + ".lora_A.weight"].T)
                                    @ P[name + ".lora_B.weight"].T)
    return y


def forward(cfg, P, input_ids, lora=None, dropout_seed=None):
    """P: dict name -> float64 tensor (with the adapters' under lora). Returns logits
    [B, T, V]. dropout_seed: training mode (lora_dropout applies), else evaluation."""
    C = cfg["hidden_size"]
    H = cfg["num_attention_heads"]
    KV = cfg["num_key_value_heads"]
    d = head_dim(cfg)
    eps = cfg["rms_norm_eps"]
    ids = torch.as_tensor(input_ids, dtype=torch.long)
    B, T = ids.shape
    x = P["model.embed_tokens.weight"][ids]
    cos, sin = rope_cos_sin(T, d, cfg["rope_theta"], scaling=cfg.get("rope_scaling"))
    zero = torch.zeros((), dtype=torch.float64)
    for i in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % i
        drop = None if dropout_seed is None else (dropout_seed, i)
        h = x
        xn = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        q = linear(P, p, "self_attn.q_proj", xn, lora, drop)
        k = linear(P, p, "self_attn.k_proj", xn, lora, drop)
        v = linear(P, p, "self_attn.v_proj", xn, lora, drop)
        q = q.view(B, T, H, d)
        k = k.view(B, T, KV, d)
        if cfg.get("family") == "qwen3":  # Qwen3Attention: norm over head_dim before RoPE
            q = rms_norm(q, P[p + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, P[p + "self_attn.k_norm.weight"], eps)
        q = q.transpose(1, 2)
        k = k.transpose(1, 2)
        v = v.view(B, T, KV, d).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        a = attention(q, k, v)
        a = a.transpose(1, 2).reshape(B, T, H * d)
        x = h + linear(P, p, "self_attn.o_proj", a, lora, drop)
        h2 = x
        xn2 = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        gate = linear(P, p, "mlp.gate_proj", xn2, lora, drop)
        up = linear(P, p, "mlp.up_proj", xn2, lora, drop)
        mlp = linear(P, p, "mlp.down_proj", torch.nn.functional.silu(gate) * up, lora, drop)
        x = h2 + mlp
    x = rms_norm(x, P["model.norm.weight"], eps)
    head = (P["model.embed_tokens.weight"] if cfg["tie_word_embeddings"]
            else P["lm_head.weight"])
    return x @ head.T


def causal_lm_loss(logits, labels):
    labels = torch.as_tensor(labels, dtype=torch.long)
    V = logits.shape[-1]
    sl = logits[:, :-1, :].reshape(-1, V)
    tl = labels[:, 1:].reshape(-1)
    loss = torch.nn.functional.cross_entropy(
        sl, tl, ignore_index=IGNORE_INDEX, reduction="mean")
    return loss, int((tl != IGNORE_INDEX).sum())


def loss_and_grads(cfg, params32, input_ids, labels, lora=None, dropout_seed=None):
    P = {n: t.to(torch.float64).clone().requires_grad_(True)
         for n, t in params32.items()}
    logits = forward(cfg, P, input_ids, lora, dropout_seed)
    loss, n = causal_lm_loss(logits, labels)
    loss.backward()
    grads = {name: P[name].grad.detach().clone() for name in P}
    return loss.item(), n, grads


# --------------------------------------------------------------------------
# safetensors (hand-written)
# --------------------------------------------------------------------------

def write_safetensors(path, tensors):
    """tensors: ordered dict name -> tensor; stored as little-endian F32."""
    header = {}
    blobs = []
    off = 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(t.detach().to(torch.float32).numpy(), dtype="<f4")
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32"
        b, e = info["data_offsets"]
        a = np.frombuffer(data[base + b:base + e], dtype="<f4").reshape(info["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out


# --------------------------------------------------------------------------
# Fixture generation
# --------------------------------------------------------------------------

def report_bands(case, cfg):
    """Prints which band each llama3 frequency falls in (the cases want all three)."""
    s = cfg["rope_scaling"]
    if s.get("rope_type") != "llama3":
        return
    d = head_dim(cfg)
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    wl = 2 * math.pi / inv
    old = s["original_max_position_embeddings"]
    bands = ["kept" if w < old / s["high_freq_factor"] else
             "divided" if w > old / s["low_freq_factor"] else "smoothed" for w in wl.tolist()]
    print("%s llama3 bands: %s" % (case, " ".join(bands)))
    assert {"kept", "divided", "smoothed"} <= set(bands), bands


def write_case(d, c, params, ids, labels, loss, n, extra=None):
    """A case's config.json, model.safetensors, batch.json and expected.json (plus `extra`'s
    keys)."""
    written = hf_config(c)
    del written["family"]
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(written, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(d, "model.safetensors"), params)
    with open(os.path.join(d, "batch.json"), "w") as f:
        f.write('{\n  "input_ids": %s,\n  "labels": %s\n}\n' % (
            json.dumps(ids), json.dumps(labels)))
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump({"loss": loss, "num_targets": n, **(extra or {})}, f, indent=2)
        f.write("\n")


def generate(out_dir):
    for case, c in CASES.items():
        d = os.path.join(out_dir, case)
        os.makedirs(d, exist_ok=True)
        cfg = hf_config(c)
        cfg.update(batch=c["batch"], seq=c["seq"])
        if cfg.get("rope_scaling"):
            report_bands(case, cfg)
        params = make_params(cfg, c["seed"])
        ids, labels = make_batch(cfg, c["seed"])
        loss, n, grads = loss_and_grads(cfg, params, ids, labels)

        write_case(d, c, params, ids, labels, loss, n)
        write_safetensors(os.path.join(d, "grads.safetensors"),
                          {name: grads[name] for name in params})

        # Round-trip sanity: the written weights reproduce the same loss.
        back = read_safetensors(os.path.join(d, "model.safetensors"))
        assert set(back) == set(params)
        loss2, _, _ = loss_and_grads(cfg, back, ids, labels)
        assert loss2 == loss, (loss, loss2)
        gmax = max(float(g.abs().max()) for g in grads.values())
        print("%-11s loss=%.17g num_targets=%d max|grad|=%.3g" % (case, loss, n, gmax))


def generate_lora(out_dir):
    for case, lora in LORA_CASES.items():
        d = os.path.join(out_dir, case)
        os.makedirs(d, exist_ok=True)
        c = CASES[lora["base"]]
        cfg = hf_config(c)
        cfg.update(batch=c["batch"], seq=c["seq"])
        params = make_params(cfg, c["seed"])
        adapter = make_adapter(cfg, lora)
        ids, labels = make_batch(cfg, c["seed"])
        seed = lora.get("dropout_seed")
        loss, n, grads = loss_and_grads(cfg, {**params, **adapter}, ids, labels, lora, seed)

        write_case(d, c, params, ids, labels, loss, n,
                   None if seed is None else {"dropout_seed": seed})
        with open(os.path.join(d, "adapter_config.json"), "w") as f:
            json.dump(peft_adapter_config(lora), f, indent=2)
            f.write("\n")
        write_safetensors(os.path.join(d, "adapter_model.safetensors"), adapter)
        write_safetensors(os.path.join(d, "grads.safetensors"),
                          {name: grads[name] for name in adapter})
        base_loss = loss_and_grads(cfg, params, ids, labels)[0]
        print("%-22s loss=%.17g (base %.6g) num_targets=%d" % (case, loss, base_loss, n))
        if seed is not None:
            no_drop = loss_and_grads(cfg, {**params, **adapter}, ids, labels, lora)[0]
            print("%-22s loss without dropout %.17g" % ("", no_drop))


# --------------------------------------------------------------------------
# Self-check
# --------------------------------------------------------------------------

def loop_rms_norm(x, w, eps):
    out = torch.empty_like(x)
    flat = x.reshape(-1, x.shape[-1])
    o = out.view(-1, x.shape[-1])
    for r in range(flat.shape[0]):
        ss = 0.0
        for j in range(flat.shape[1]):
            ss += float(flat[r, j]) ** 2
        s = 1.0 / math.sqrt(ss / flat.shape[1] + eps)
        for j in range(flat.shape[1]):
            o[r, j] = float(w[j]) * float(flat[r, j]) * s
    return out


def loop_inv_freq(d, theta, scaling=None):
    """The frequencies one at a time, by the rule as the issue states it."""
    out = []
    for j in range(d // 2):
        f = theta ** (-(2.0 * j) / d)
        kind = (scaling or {}).get("rope_type", "default")
        if kind == "linear":
            f = f / scaling["factor"]
        elif kind == "llama3":
            old = scaling["original_max_position_embeddings"]
            lo, hi, fac = scaling["low_freq_factor"], scaling["high_freq_factor"], scaling["factor"]
            wl = 2 * math.pi / f
            if wl < old / hi:
                pass
            elif wl > old / lo:
                f = f / fac
            else:
                sm = (old / wl - lo) / (hi - lo)
                f = (1 - sm) * f / fac + sm * f
        out.append(f)
    return out


def loop_rope(x, theta, scaling=None):
    """x: [T, d] for one head; rotate pairs (j, j + d/2) by angle pos*inv_freq[j]."""
    T, d = x.shape
    half = d // 2
    inv = loop_inv_freq(d, theta, scaling)
    out = torch.empty_like(x)
    for t in range(T):
        for j in range(half):
            ang = t * inv[j]
            c, s = math.cos(ang), math.sin(ang)
            a, b = float(x[t, j]), float(x[t, j + half])
            out[t, j] = a * c - b * s
            out[t, j + half] = b * c + a * s
    return out


def loop_attention_head(q, k, v):
    """q/k/v: [T, d] for one (query head, its kv head). Causal."""
    T, d = q.shape
    out = torch.zeros_like(q)
    for i in range(T):
        sc = [sum(float(q[i, m]) * float(k[j, m]) for m in range(d)) / math.sqrt(d)
              for j in range(i + 1)]
        mx = max(sc)
        e = [math.exp(s - mx) for s in sc]
        z = sum(e)
        for m in range(d):
            out[i, m] = sum(e[j] / z * float(v[j, m]) for j in range(i + 1))
    return out


def loop_loss(logits, labels):
    B, T, V = logits.shape
    tot, n = 0.0, 0
    for b in range(B):
        for t in range(T - 1):
            y = labels[b][t + 1]
            if y == IGNORE_INDEX:
                continue
            row = [float(logits[b, t, j]) for j in range(V)]
            mx = max(row)
            lse = mx + math.log(sum(math.exp(r - mx) for r in row))
            tot += lse - row[y]
            n += 1
    return tot / n, n


def check():
    torch.manual_seed(0)
    ok = True

    def report(what, err, tol):
        nonlocal ok
        good = err <= tol
        ok = ok and good
        print("  %-60s max err %.3e (tol %.0e) %s" % (what, err, tol, "ok" if good else "FAIL"))

    print("component checks (float64):")
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    w = 1 + 0.1 * torch.randn(16, dtype=torch.float64)
    report("rms_norm vs loop", float((rms_norm(x, w, 1e-6) - loop_rms_norm(x, w, 1e-6)).abs().max()), 1e-13)

    T, d, theta = 7, 8, 10000.0
    xh = torch.randn(1, 1, T, d, dtype=torch.float64)
    cos, sin = rope_cos_sin(T, d, theta)
    report("rope (rotate_half) vs per-pair rotation",
           float((apply_rope(xh, cos, sin)[0, 0] - loop_rope(xh[0, 0], theta)).abs().max()), 1e-12)
    for sc in ({"rope_type": "linear", "factor": 4.0},
               {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 64}):
        err = float((rope_inv_freq(d, theta, sc) -
                     torch.tensor(loop_inv_freq(d, theta, sc), dtype=torch.float64)).abs().max())
        report("%s frequencies vs per-frequency rule" % sc["rope_type"], err, 1e-15)

    B, H, KV, T, d = 2, 4, 2, 6, 8
    q = torch.randn(B, H, T, d, dtype=torch.float64)
    k = torch.randn(B, KV, T, d, dtype=torch.float64)
    v = torch.randn(B, KV, T, d, dtype=torch.float64)
    a = attention(q, k, v)
    err = 0.0
    for b in range(B):
        for h in range(H):
            ref = loop_attention_head(q[b, h], k[b, h // (H // KV)], v[b, h // (H // KV)])
            err = max(err, float((a[b, h] - ref).abs().max()))
    report("GQA causal attention vs loops (all heads)", err, 1e-12)

    # Full model, tiny case.
    tiny = dict(hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, vocab_size=11,
                rope_theta=10000.0, rms_norm_eps=1e-6, batch=2, seq=5)
    variants = [dict(family="qwen2", tie_word_embeddings=True),
                dict(family="qwen2", tie_word_embeddings=False),
                dict(family="qwen3", head_dim=8, tie_word_embeddings=False),
                dict(family="llama", head_dim=4, tie_word_embeddings=True,
                     rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 16})]
    for var in variants:
        cfg = dict(tiny, **var)
        tie = "%s, tie=%s" % (cfg["family"], cfg["tie_word_embeddings"])
        params = make_params(cfg, 42 + int(cfg["tie_word_embeddings"]))
        ids, labels = make_batch(cfg, 42)
        P = {n: t.double() for n, t in params.items()}
        logits = forward(cfg, P, ids)
        l_vec, n_vec = causal_lm_loss(logits, labels)
        l_loop, n_loop = loop_loss(logits, labels)
        report("loss vs loop CE (%s)" % tie, abs(l_vec.item() - l_loop), 1e-13)
        if n_vec != n_loop:
            ok = False
            print("  num_targets mismatch", n_vec, n_loop)

        # Independent full forward: per-head loops for rope + attention.
        P2 = P
        C, Hh, KVh = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        dh = head_dim(cfg)
        zero = torch.zeros((), dtype=torch.float64)
        idt = torch.tensor(ids)
        Bb, Tt = idt.shape
        xx = P2["model.embed_tokens.weight"][idt]
        for i in range(cfg["num_hidden_layers"]):
            p = "model.layers.%d." % i
            xn = loop_rms_norm(xx, P2[p + "input_layernorm.weight"], cfg["rms_norm_eps"])
            qq = xn @ P2[p + "self_attn.q_proj.weight"].T + P2.get(p + "self_attn.q_proj.bias", zero)
            kk = xn @ P2[p + "self_attn.k_proj.weight"].T + P2.get(p + "self_attn.k_proj.bias", zero)
            vv = xn @ P2[p + "self_attn.v_proj.weight"].T + P2.get(p + "self_attn.v_proj.bias", zero)
            att = torch.zeros(Bb, Tt, Hh * dh, dtype=torch.float64)
            for b in range(Bb):
                for h in range(Hh):
                    g = h // (Hh // KVh)
                    qh, kh = qq[b, :, h * dh:(h + 1) * dh], kk[b, :, g * dh:(g + 1) * dh]
                    if cfg["family"] == "qwen3":
                        qh = loop_rms_norm(qh, P2[p + "self_attn.q_norm.weight"], cfg["rms_norm_eps"])
                        kh = loop_rms_norm(kh, P2[p + "self_attn.k_norm.weight"], cfg["rms_norm_eps"])
                    sc = cfg.get("rope_scaling")
                    qh = loop_rope(qh, cfg["rope_theta"], sc)
                    kh = loop_rope(kh, cfg["rope_theta"], sc)
                    vh = vv[b, :, g * dh:(g + 1) * dh]
                    att[b, :, h * dh:(h + 1) * dh] = loop_attention_head(qh, kh, vh)
            xx = xx + att @ P2[p + "self_attn.o_proj.weight"].T
            xn2 = loop_rms_norm(xx, P2[p + "post_attention_layernorm.weight"], cfg["rms_norm_eps"])
            gt = xn2 @ P2[p + "mlp.gate_proj.weight"].T
            upv = xn2 @ P2[p + "mlp.up_proj.weight"].T
            xx = xx + ((gt / (1 + torch.exp(-gt))) * upv) @ P2[p + "mlp.down_proj.weight"].T
        xx = loop_rms_norm(xx, P2["model.norm.weight"], cfg["rms_norm_eps"])
        head = (P2["model.embed_tokens.weight"] if cfg["tie_word_embeddings"]
                else P2["lm_head.weight"])
        logits2 = xx @ head.T
        report("full forward vs loop model (%s)" % tie,
               float((logits - logits2).abs().max()), 1e-11)

        # Autograd vs central finite differences on every parameter entry.
        loss, n, grads = loss_and_grads(cfg, params, ids, labels)
        eps = 1e-6
        maxerr, maxg = 0.0, 0.0
        for name, t in P.items():
            flat = t.reshape(-1)
            gflat = grads[name].reshape(-1)
            for j in range(flat.numel()):
                Pp = dict(P)
                tp = t.clone(); tp.view(-1)[j] += eps
                Pp[name] = tp
                lp = causal_lm_loss(forward(cfg, Pp, ids), labels)[0].item()
                tm = t.clone(); tm.view(-1)[j] -= eps
                Pp[name] = tm
                lm = causal_lm_loss(forward(cfg, Pp, ids), labels)[0].item()
                fd = (lp - lm) / (2 * eps)
                maxerr = max(maxerr, abs(fd - float(gflat[j])))
                maxg = max(maxg, abs(float(gflat[j])))
        report("autograd vs finite diff, all %d params (%s)"
               % (sum(t.numel() for t in P.values()), tie), maxerr, 1e-7)
        if maxg == 0.0:
            ok = False
            print("  all gradients are zero")

    # LoRA: the adapted forward equals the base with W + s B A merged in (PEFT's merge).
    print("LoRA checks (float64):")
    for case, lora in LORA_CASES.items():
        c = CASES[lora["base"]]
        cfg = hf_config(c)
        params = {k: v.to(torch.float64) for k, v in make_params(cfg, c["seed"]).items()}
        adapter = {k: v.to(torch.float64) for k, v in make_adapter(cfg, lora).items()}
        ids, _ = make_batch(dict(cfg, batch=c["batch"], seq=c["seq"]), c["seed"])
        merged = dict(params)
        for name in adapter:
            if name.endswith(".lora_A.weight"):
                base = name[len("base_model.model."):-len(".lora_A.weight")] + ".weight"
                b = adapter[name.replace("lora_A", "lora_B")]
                merged[base] = merged[base] + lora_scale(lora) * (b @ adapter[name])
        got = forward(cfg, {**params, **adapter}, ids, lora)
        want = forward(cfg, merged, ids)
        report("%s forward vs merged weights" % case, float((got - want).abs().max()), 1e-12)
        report("%s adapters change the logits" % case,
               0.0 if float((got - forward(cfg, params, ids)).abs().max()) > 1e-3 else 1.0, 0.0)
        if lora.get("lora_dropout", 0) > 0:
            dropped = forward(cfg, {**params, **adapter}, ids, lora, lora["dropout_seed"])
            report("%s dropout changes the logits" % case,
                   0.0 if float((dropped - got).abs().max()) > 1e-3 else 1.0, 0.0)

    # The dropout mask: splitmix64's published first outputs from state 0, and the kept
    # fraction of 2^20 elements within 5 sigma of 1 - p.
    with np.errstate(over="ignore"):
        first = [int(v) for v in splitmix64(0, np.arange(3, dtype=np.uint64))]
    report("splitmix64 known outputs",
           0.0 if first == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F] else 1.0,
           0.0)
    n, p = 1 << 20, 0.3
    kept = int(dropout_keep(1234, n, p).sum())
    report("dropout kept fraction (sigmas from 1 - p)",
           abs(kept - n * (1 - p)) / math.sqrt(n * p * (1 - p)), 5.0)

    # safetensors round trip.
    import tempfile
    with tempfile.TemporaryDirectory() as td:
        pth = os.path.join(td, "t.safetensors")
        src = {"a": torch.randn(3, 5), "b.c": torch.randn(7)}
        write_safetensors(pth, src)
        with open(pth, "rb") as f:
            raw = f.read()
        n = struct.unpack("<Q", raw[:8])[0]
        good = n % 8 == 0 and len(raw) == 8 + n + 4 * (15 + 7)
        back = read_safetensors(pth)
        good = good and all(torch.equal(back[k], src[k]) for k in src)
        report("safetensors round trip", 0.0 if good else 1.0, 0.0)

    print("CHECK PASSED" if ok else "CHECK FAILED")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="write fixtures to this directory")
    ap.add_argument("--check", action="store_true", help="run the self-check")
    args = ap.parse_args()
    if not args.out and not args.check:
        ap.error("give --out DIR and/or --check")
    torch.set_num_threads(1)  # deterministic reductions
    if args.check and not check():
        sys.exit(1)
    if args.out:
        generate(args.out)
        generate_lora(args.out)


if __name__ == "__main__":
    main()
