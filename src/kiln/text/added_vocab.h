// Added tokens (<|im_start|>, <think>, ...): matched in the text before normalisation and
// pre-tokenization, leftmost-longest, as Hugging Face's AddedVocabulary does.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::text {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special); matched only with parse_special
  bool lstrip = false;       // swallows the whitespace on its left
  bool rstrip = false;       // swallows the whitespace on its right
  bool single_word = false;  // matches only when not inside a word
  bool normalized = false;   // matched in the normalised text rather than the raw one
};

struct AddedMatch {
  size_t begin, end;  // the span consumed, stripped whitespace included
  int32_t id;
  bool operator==(const AddedMatch&) const = default;
};

// One matching set: the tokens that match either in raw text or in normalised text.
class AddedMatcher {
 public:
  // `patterns[i]` is what token i matches (its content, normalised for the normalised set).
  AddedMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);
  AddedMatcher() = default;

  bool empty() const { return tokens_.empty(); }

  // Replaces `out` with the matches in `text`, in order. With !parse_special, special tokens
  // are treated as text; a special token's occurrence still hides a shorter non-special match
  // inside it, as Hugging Face's encode_special_tokens does.
  void find(std::string_view text, bool parse_special, std::vector<AddedMatch>& out) const;

 private:
  std::vector<AddedToken> tokens_;
  std::vector<std::string> patterns_;
  std::array<std::vector<uint32_t>, 256> by_first_byte_;  // token indices, longest first
};

}  // namespace kiln::text
