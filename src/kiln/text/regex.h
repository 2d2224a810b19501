// A compiled PCRE2 pattern (UTF + UCP, JIT where available) for the Split pre-tokenizer.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::text {

class Regex {
 public:
  // Compiles `pattern` (a literal string when `literal`); on a bad pattern throws kiln::Error
  // "<what>: bad regex at offset N: <reason>".
  Regex(std::string_view pattern, bool literal, const std::string& what);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the [begin, end) byte ranges of the successive non-overlapping matches in `subject`
  // (valid UTF-8). Empty matches are skipped, the search moving on by one character, as the
  // Hugging Face tokenizers' find_iter does. Safe to call from many threads at once.
  void find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::text
