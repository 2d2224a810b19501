#include "kiln/base/json.h"

#include <optional>

#include "kiln/base/error.h"

namespace kiln {

namespace {

// The offset of the bracket that first opens level max_depth + 1, outside strings; nullopt when
// the text never nests that deep. One linear pass, no recursion.
std::optional<size_t> too_deep(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::nullopt;
}

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 1, column
// 1: " prefix, whose position counts from the parsed text, not from the file.
std::string parse_error_reason(const std::string& what) {
  const size_t at = what.find(": ");
  const size_t col = what.find("column ");
  if (col != std::string::npos && at != std::string::npos && at > col) return what.substr(at + 2);
  const size_t bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

// One parser for both key orders: the depth limit first, then nlohmann's errors as kiln's, at
// their position in the file.
template <typename J>
J parse_checked(std::string_view text, const std::string& what, TextPosition origin) {
  if (const auto at = too_deep(text, kMaxJsonDepth)) {
    const TextPosition p = text_position(text, *at, origin);
    fail("{}: malformed JSON: nested deeper than {} levels at line {}, column {}", what,
         kMaxJsonDepth, p.line, p.column);
  }
  try {
    return J::parse(text);
  } catch (const typename J::parse_error& e) {
    // e.byte is the 1-based index of the byte the parser stopped at (size() + 1 at the end).
    const TextPosition p = text_position(text, e.byte > 0 ? e.byte - 1 : 0, origin);
    fail("{}: malformed JSON: {} at line {}, column {}", what, parse_error_reason(e.what()), p.line,
         p.column);
  } catch (const typename J::exception& e) {
    // out_of_range 406: a number such as 1e400 that no double holds.
    fail("{}: bad JSON value: {}", what, e.what());
  }
}

}  // namespace

TextPosition text_position(std::string_view text, size_t offset, TextPosition origin) {
  TextPosition p = origin;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++p.line;
      p.column = 1;
    } else {
      ++p.column;
    }
  }
  if (offset > text.size()) p.column += offset - text.size();
  return p;
}

Json parse_json(std::string_view text, const std::string& what, TextPosition origin) {
  return parse_checked<Json>(text, what, origin);
}

OrderedJson parse_json_ordered(std::string_view text, const std::string& what,
                               TextPosition origin) {
  return parse_checked<OrderedJson>(text, what, origin);
}

Json read_json_file(const fs::path& path) { return parse_json(read_file(path), path.string()); }

}  // namespace kiln
