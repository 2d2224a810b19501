// A byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (Qwen2, Qwen2.5, Qwen3,
// Llama 3). Encoding gives the same ids as Hugging Face tokenizers:
//
//   text -> added tokens (<|im_start|>, ...) cut out, leftmost-longest, before anything else
//        -> each stretch between them: NFC -> Split regex -> byte-level BPE
//
// What is supported is what that family uses: NFC (or no) normaliser; Split (Regex or String
// pattern, any behaviour, invert) and ByteLevel (use_regex either way) pre-tokenizers; a BPE
// model with merges in either form ("a b" or ["a", "b"]), unk_token, fuse_unk, ignore_merges;
// the ByteLevel decoder; a ByteLevel or TemplateProcessing post-processor, or a Sequence of them.
// Anything else is refused at load with an error naming the field.
//
// encode() gives the ids of the text alone, as HF's encode(text, add_special_tokens=False) does
// (and apply_chat_template, whose template renders its own BOS); encode_with_special_tokens()
// adds the post-processor's special tokens as HF's tokenizer(text) does: Llama 3's
// <|begin_of_text|> first, nothing for the Qwen family (a ByteLevel post-processor).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

namespace text {
struct TokenizerImpl;
}

class Tokenizer {
 public:
  // Loads `path`: a tokenizer.json, or a model directory holding one. Errors are kiln::Error
  // naming the file and the JSON field ("…/tokenizer.json: model.type is 'WordPiece', expected
  // 'BPE'").
  static Tokenizer load(const std::filesystem::path& tokenizer_json_or_model_dir);
  // Builds a tokenizer from the text of a tokenizer.json; `what` names it in errors.
  static Tokenizer from_json_text(std::string_view json_text, const std::string& what);

  // The ids of `text` (valid UTF-8, else kiln::Error). With parse_special, every added token's
  // text is matched as that token (Hugging Face's default); without, added tokens marked special
  // (<|im_start|>, <|endoftext|>, ...) are ordinary text, as with HF's split_special_tokens,
  // while non-special added tokens (<think>, <tool_call>, ...) still match. Thread-safe.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;
  // The same, appending to `out`.
  void encode(std::string_view text, std::vector<int32_t>& out, bool parse_special = true) const;

  // What Hugging Face's tokenizer(text) gives (add_special_tokens=True): encode(text) between
  // special_prefix() and special_suffix().
  std::vector<int32_t> encode_with_special_tokens(std::string_view text,
                                                  bool parse_special = true) const;
  // The ids the post-processor puts before and after a single sequence (TemplateProcessing's
  // "single"; the pair template is never used); empty when it adds none.
  std::span<const int32_t> special_prefix() const;
  std::span<const int32_t> special_suffix() const;

  // The text of `ids`: their bytes joined, ill-formed UTF-8 replaced by U+FFFD. Special tokens
  // are rendered as their text, or left out with skip_special. An id outside the vocabulary is a
  // kiln::Error.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;

  // The id of a token given in the vocabulary's own spelling ("Ġthe", "<|im_end|>"), or -1.
  int32_t token_id(std::string_view token) const;
  // The vocabulary's spelling of an id; nullopt when the id is unused or out of range.
  std::optional<std::string> token_str(int32_t id) const;
  // One past the largest id (model vocabulary and added tokens).
  int64_t vocab_size() const;
  bool is_special(int32_t id) const;
  bool is_added(int32_t id) const;

  // The file (or name) it was loaded from, for messages.
  const std::string& source() const;

 private:
  explicit Tokenizer(std::shared_ptr<const text::TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const text::TokenizerImpl> impl_;  // immutable, so copies share it safely
};

}  // namespace kiln
