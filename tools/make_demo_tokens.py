#!/usr/bin/env python3
"""Writes assets/demo/tokens.jsonl: the demo's small token dataset (no tokenizer needed).

Each example repeats a random motif of 3-8 token ids (from a 1024-token vocabulary) until it is
64 tokens long. The first occurrence of the motif cannot be predicted, so its labels are -100;
every later token can be predicted by copying from earlier in the sequence, which a two-layer
attention model learns in a few hundred steps: the loss falls from ln(1024) = 6.9 towards 0.

Usage: python3 tools/make_demo_tokens.py > assets/demo/tokens.jsonl
Public domain (generated data).
"""
import json
import random

rng = random.Random(1234)
for _ in range(512):
    motif = [rng.randrange(4, 1024) for _ in range(rng.randrange(3, 9))]
    ids = (motif * 64)[:64]
    labels = [-100] * len(motif) + ids[len(motif):]
    print(json.dumps({"input_ids": ids, "labels": labels}, separators=(",", ":")))
