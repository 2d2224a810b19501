// The pre-tokenizer: splits normalised text into the pieces that BPE encodes one by one. Only
// byte ranges are produced here; the byte-level spelling is applied by the BPE model.
#pragma once

#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/text/regex.h"

namespace kiln::text {

// How a Split step treats the pattern's matches (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

using Span = std::pair<size_t, size_t>;  // [begin, end) byte offsets

class PreTokenizer {
 public:
  // Appends a Split step; steps run in order, each splitting every piece of the one before.
  void add_split(Regex regex, SplitBehavior behavior, bool invert);
  size_t num_steps() const { return steps_.size(); }

  // Replaces `out` with the pieces of `text` (none empty), in order.
  void split(std::string_view text, std::vector<Span>& out) const;

 private:
  struct Step {
    Regex regex;
    SplitBehavior behavior;
    bool invert;
  };
  void apply(const Step& step, std::string_view text, Span piece, std::vector<Span>& out) const;
  std::vector<Step> steps_;
};

// GPT-2's pattern, the one a ByteLevel pre-tokenizer with use_regex=true splits with.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace kiln::text
