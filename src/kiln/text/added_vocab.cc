#include "kiln/text/added_vocab.h"

#include <utf8proc.h>

#include <algorithm>

#include "kiln/text/utf8.h"

namespace kiln::text {
namespace {

// Unicode White_Space, as Rust's \s and char::is_whitespace.
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Rust regex's \w: letters, marks, decimal digits, connector punctuation, joiners.
bool is_word(char32_t c) {
  if (c < 0x80)
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The code point that ends at `end` (text[0, end) is valid UTF-8).
char32_t code_point_before(std::string_view text, size_t end, size_t& begin) {
  begin = end - 1;
  while (begin > 0 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80) --begin;
  size_t i = begin;
  return next_code_point(text, i);
}

}  // namespace

AddedMatcher::AddedMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns)
    : tokens_(std::move(tokens)), patterns_(std::move(patterns)) {
  for (uint32_t i = 0; i < tokens_.size(); ++i) {
    if (patterns_[i].empty()) continue;
    by_first_byte_[static_cast<uint8_t>(patterns_[i][0])].push_back(i);
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](uint32_t a, uint32_t b) {
      return patterns_[a].size() > patterns_[b].size();
    });
  }
}

void AddedMatcher::find(std::string_view text, bool parse_special,
                        std::vector<AddedMatch>& out) const {
  out.clear();
  if (tokens_.empty()) return;
  size_t consumed = 0;  // end of the previous kept match
  size_t i = 0;
  while (i < text.size()) {
    const auto& candidates = by_first_byte_[static_cast<uint8_t>(text[i])];
    const uint32_t* hit = nullptr;
    for (const uint32_t& t : candidates) {
      if (text.substr(i).starts_with(patterns_[t])) {
        hit = &t;  // longest first: the first hit is the leftmost-longest match at i
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    const AddedToken& tok = tokens_[*hit];
    size_t begin = i, end = i + patterns_[*hit].size();
    i = end;  // the scan resumes after this occurrence, kept or not
    if (tok.special && !parse_special) continue;
    if (tok.single_word) {
      size_t b;
      const bool word_before = begin > 0 && is_word(code_point_before(text, begin, b));
      size_t e = end;
      const bool word_after = end < text.size() && is_word(next_code_point(text, e));
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) {
      size_t b = begin;
      while (b > consumed) {
        size_t cb;
        if (!is_space(code_point_before(text, b, cb))) break;
        b = cb;
      }
      begin = std::max(b, consumed);
    }
    if (tok.rstrip) {
      while (end < text.size()) {
        size_t e = end;
        if (!is_space(next_code_point(text, e))) break;
        end = e;
      }
    }
    out.push_back({begin, end, tok.id});
    consumed = end;
    // Stripped whitespace on the right is consumed; the next match starts after it.
    i = std::max(i, end);
  }
}

}  // namespace kiln::text
