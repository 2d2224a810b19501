#include "kiln/text/pre_tokenizer.h"

#include <algorithm>

namespace kiln::text {

void PreTokenizer::add_split(Regex regex, SplitBehavior behavior, bool invert) {
  steps_.push_back({std::move(regex), behavior, invert});
}

void PreTokenizer::split(std::string_view text, std::vector<Span>& out) const {
  out.clear();
  if (text.empty()) return;
  out.emplace_back(0, text.size());
  std::vector<Span> next;
  for (const Step& step : steps_) {
    next.clear();
    for (const Span& piece : out) apply(step, text, piece, next);
    out.swap(next);
  }
}

// Mirrors tokenizers' NormalizedString::split: the piece is cut into alternating
// (range, is_match) parts, which the behaviour then keeps, drops or glues together.
void PreTokenizer::apply(const Step& step, std::string_view text, Span piece,
                         std::vector<Span>& out) const {
  thread_local std::vector<Span> matches;
  thread_local std::vector<std::pair<Span, bool>> parts;
  matches.clear();
  parts.clear();
  const std::string_view sub = text.substr(piece.first, piece.second - piece.first);
  step.regex.find_all(sub, matches);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev < b) parts.push_back({{prev, b}, step.invert});
    parts.push_back({{b, e}, !step.invert});
    prev = e;
  }
  if (prev < sub.size()) parts.push_back({{prev, sub.size()}, step.invert});

  const size_t first = out.size();
  auto push = [&](Span s) { out.emplace_back(piece.first + s.first, piece.first + s.second); };
  bool previous_match = false;
  switch (step.behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& [s, m] : parts) {
        if (!m) push(s);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const auto& [s, m] : parts) push(s);
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const auto& [s, m] : parts) {
        if (m && !previous_match && out.size() > first) {
          out.back().second = piece.first + s.second;
        } else {
          push(s);
        }
        previous_match = m;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t i = parts.size(); i-- > 0;) {
        const auto& [s, m] = parts[i];
        if (m && !previous_match && out.size() > first) {
          out.back().first = piece.first + s.first;
        } else {
          push(s);
        }
        previous_match = m;
      }
      std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
      break;
    case SplitBehavior::kContiguous:
      for (const auto& [s, m] : parts) {
        if (m == previous_match && out.size() > first) {
          out.back().second = piece.first + s.second;
        } else {
          push(s);
        }
        previous_match = m;
      }
      break;
  }
}

}  // namespace kiln::text
