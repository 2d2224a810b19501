#include "kiln/data/source_lines.h"

#include "kiln/base/error.h"

namespace kiln {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

std::vector<SourceLine> jsonl_lines(std::string_view text) {
  std::vector<SourceLine> lines;
  for (size_t number = 1; !text.empty(); ++number) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!is_blank(line)) lines.push_back({number, line});
  }
  return lines;
}

// Walks a JSON array's top level: element boundaries, and the line of each position.
class ArrayScanner {
 public:
  ArrayScanner(std::string_view text, const std::string& name) : t_(text), name_(name) {}

  std::vector<SourceLine> scan() {
    skip_space();
    ++at_;  // '['
    std::vector<SourceLine> out;
    skip_space();
    if (peek() == ']') {
      ++at_;
      return finish(out);
    }
    while (true) {
      skip_space();
      const size_t begin = at_, line = line_, column = column_of(at_);
      skip_value();
      out.push_back({line, t_.substr(begin, at_ - begin), column});
      skip_space();
      const size_t comma_line = line_, comma_column = column_of(at_);
      const char c = peek();
      ++at_;
      if (c == ']') return finish(out);
      if (c != ',')
        fail("{}:{}: malformed JSON array: expected ',' or ']' after element {}", name_, line_,
             out.size() - 1);
      skip_space();
      if (peek() == ']') {
        fail(
            "{}:{}: malformed JSON array: a ',' after the last element at line {}, column {} "
            "(JSON allows none before ']')",
            name_, comma_line, comma_line, comma_column);
      }
    }
  }

 private:
  char peek() const {
    if (at_ >= t_.size()) fail("{}:{}: malformed JSON array: unexpected end of file", name_, line_);
    return t_[at_];
  }
  void skip_space() {
    for (; at_ < t_.size() && is_space(t_[at_]); ++at_) newline_at(at_);
  }
  void newline_at(size_t i) {
    if (t_[i] != '\n') return;
    ++line_;
    line_start_ = i + 1;
  }
  size_t column_of(size_t i) const { return i - line_start_ + 1; }
  // One element: a container to its closing bracket, a scalar to the next ',', ']' or space.
  void skip_value() {
    int depth = 0;
    bool in_string = false;
    for (; at_ < t_.size(); ++at_) {
      const char c = t_[at_];
      newline_at(at_);
      if (in_string) {
        if (c == '\\') {
          ++at_;
        } else if (c == '"') {
          in_string = false;
          if (depth == 0) break;  // a string element
        }
        continue;
      }
      if (c == '"') {
        in_string = true;
      } else if (c == '{' || c == '[') {
        ++depth;
      } else if (c == '}' || c == ']') {
        if (depth == 0) return;  // the array's own ']'
        if (--depth == 0) break;
      } else if (depth == 0 && (c == ',' || is_space(c))) {
        return;
      }
    }
    if (at_ < t_.size()) ++at_;  // past the closing bracket or quote
  }
  std::vector<SourceLine> finish(std::vector<SourceLine>& out) {
    skip_space();
    if (at_ < t_.size()) fail("{}:{}: unexpected text after the JSON array", name_, line_);
    return std::move(out);
  }

  std::string_view t_;
  const std::string& name_;
  size_t at_ = 0, line_ = 1, line_start_ = 0;
};

}  // namespace

std::vector<SourceLine> source_lines(std::string_view text, const std::string& name) {
  const size_t first = text.find_first_not_of(" \t\r\n\f\v");
  if (first == std::string_view::npos || text[first] != '[') return jsonl_lines(text);
  return ArrayScanner(text, name).scan();
}

}  // namespace kiln
