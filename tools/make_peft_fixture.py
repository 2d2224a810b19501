#!/usr/bin/env python3
"""Writes tests/fixtures/peft_tiny_adapter/: a LoRA adapter directory laid out exactly as PEFT's
PeftModel.save_pretrained writes one, for kiln's tests of its PEFT reader and writer.

The format, from PEFT's documentation (docs/source/developer_guides/checkpoint.md) and source
(PeftConfigMixin.save_pretrained, PeftModel.save_pretrained) and the safetensors format:
  adapter_config.json        the LoraConfig as json.dumps(config, indent=2, sort_keys=True), with
                             the keys of the documented LoRA example; target_modules (a set in
                             PEFT) saved as a list, here sorted;
  adapter_model.safetensors  the adapter's state dict with the adapter name stripped:
                             base_model.model.model.layers.{i}.self_attn.{q,v}_proj.lora_{A,B}.weight,
                             A (r, in), B (out, r), float32 (PEFT keeps adapter weights in fp32),
                             metadata {"format": "pt"}; the safetensors writer orders tensors of
                             one dtype by name, writes the header as compact JSON (__metadata__
                             first, then each tensor's dtype, shape and data_offsets in data
                             order) padded with spaces to a multiple of 8 bytes after its u64
                             little-endian length.

The base is kiln's tiny-qwen3 preset (hidden 64, 4 heads of 64, 2 KV heads, 2 layers): q_proj
W (256, 64), v_proj W (128, 64). r 4, lora_alpha 8, lora_dropout 0.05. Values are deterministic
and exact in float32: element k of a tensor is value(layer, target, factor, k) below, which
tests/model/peft_adapter_test.cc recomputes.

Needs python3 only (json, struct). Usage, from the repository root:
    python3 tools/make_peft_fixture.py tests/fixtures/peft_tiny_adapter
Generated data; the project's own, under the project's licence.
"""
import json
import os
import struct
import sys

HIDDEN, Q_DIM, KV_DIM, LAYERS = 64, 256, 128, 2
RANK = 4
TARGETS = {"q_proj": (Q_DIM, HIDDEN), "v_proj": (KV_DIM, HIDDEN)}  # W (out, in)
TARGET_INDEX = {"q_proj": 0, "v_proj": 2}  # kiln's LoraTarget order: q k v o gate up down


def value(layer, target, factor, k):
    """Element k of a factor: a multiple of 1/16 in [-0.5, 0.5], exact in float32."""
    f = 0 if factor == "A" else 1
    return ((k * 7 + layer * 3 + TARGET_INDEX[target] * 5 + f * 11) % 17 - 8) / 16.0


def tensors():
    out = {}
    for layer in range(LAYERS):
        for target, (w_out, w_in) in TARGETS.items():
            for factor, shape in (("A", [RANK, w_in]), ("B", [w_out, RANK])):
                name = f"base_model.model.model.layers.{layer}.self_attn.{target}.lora_{factor}.weight"
                n = shape[0] * shape[1]
                out[name] = (shape, [value(layer, target, factor, k) for k in range(n)])
    return out


def safetensors_bytes(named):
    header = {"__metadata__": {"format": "pt"}}
    data = b""
    for name in sorted(named):
        shape, values = named[name]
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def adapter_config():
    return {
        "alpha_pattern": {},
        "auto_mapping": None,
        "base_model_name_or_path": "kiln/tiny-qwen3",
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "layer_replication": None,
        "layers_pattern": None,
        "layers_to_transform": None,
        "loftq_config": {},
        "lora_alpha": 8,
        "lora_dropout": 0.05,
        "megatron_config": None,
        "megatron_core": "megatron.core",
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": RANK,
        "rank_pattern": {},
        "revision": None,
        "target_modules": sorted(TARGETS),
        "task_type": "CAUSAL_LM",
        "use_dora": False,
        "use_rslora": False,
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/peft_tiny_adapter"
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "adapter_config.json"), "w") as f:
        f.write(json.dumps(adapter_config(), indent=2, sort_keys=True))
    with open(os.path.join(out, "adapter_model.safetensors"), "wb") as f:
        f.write(safetensors_bytes(tensors()))


if __name__ == "__main__":
    main()
