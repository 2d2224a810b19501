// The parts of a loaded tokenizer, shared by tokenizer.cc (encode/decode) and
// tokenizer_json.cc (the loader). Internal to kiln_text.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/base/json.h"
#include "kiln/text/added_vocab.h"
#include "kiln/text/bpe.h"
#include "kiln/text/pre_tokenizer.h"

namespace kiln::text {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct TokenizerImpl {
  std::string source;

  bool nfc = false;
  AddedMatcher raw_added;         // added tokens with normalized=false, matched in the raw text
  AddedMatcher normalized_added;  // normalized=true, matched after NFC
  PreTokenizer pre_tokenizer;
  std::unique_ptr<Bpe> bpe;

  // Per id (index = id): vocabulary spelling ("" for an unused id), flags, decoded bytes.
  enum : uint8_t { kPresent = 1, kAdded = 2, kSpecial = 4 };
  std::vector<std::string> spelling;
  std::vector<uint8_t> flags;
  std::string bytes;               // all ids' decoded bytes, back to back
  std::vector<uint32_t> bytes_at;  // id's bytes are bytes[bytes_at[id], bytes_at[id + 1])

  TokenMap model_ids;  // model vocabulary spelling -> id
  TokenMap added_ids;  // added token content -> id

  // The post-processor's special tokens around a single sequence (TemplateProcessing's
  // "single": Llama 3's <|begin_of_text|> before it); empty for a ByteLevel one or none.
  std::vector<int32_t> prefix, suffix;

  void encode(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;
  void encode_normalized(std::string_view text, bool parse_special,
                         std::vector<int32_t>& out) const;
  void encode_pieces(std::string_view text, std::vector<int32_t>& out) const;
};

// Builds a tokenizer from a parsed tokenizer.json; `what` names the file in errors.
std::shared_ptr<const TokenizerImpl> build_tokenizer(const Json& root, const std::string& what);

}  // namespace kiln::text
