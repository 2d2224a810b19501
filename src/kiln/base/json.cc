#include "kiln/base/json.h"

#include <optional>

#include "kiln/base/error.h"

namespace kiln {

namespace {

struct TextPos {
  size_t line = 1;
  size_t column = 1;
};

// The position of the bracket that first opens level max_depth + 1, outside strings; nullopt
// when the text never nests that deep. One linear pass, no recursion.
std::optional<TextPos> too_deep(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  TextPos pos;
  for (const char c : text) {
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
      if (++depth > max_depth) return pos;
    } else if (c == ']' || c == '}') {
      --depth;
    }
    if (c == '\n') {
      ++pos.line;
      pos.column = 1;
    } else {
      ++pos.column;
    }
  }
  return std::nullopt;
}

// One parser for both key orders: the depth limit first, then nlohmann's errors as kiln's.
template <typename J>
J parse_checked(std::string_view text, const std::string& what) {
  if (const auto p = too_deep(text, kMaxJsonDepth)) {
    fail("{}: malformed JSON: nested deeper than {} levels at line {}, column {}", what,
         kMaxJsonDepth, p->line, p->column);
  }
  try {
    return J::parse(text);
  } catch (const typename J::parse_error& e) {
    fail("{}: malformed JSON: {}", what, e.what());
  } catch (const typename J::exception& e) {
    // out_of_range 406: a number such as 1e400 that no double holds.
    fail("{}: bad JSON value: {}", what, e.what());
  }
}

}  // namespace

Json parse_json(std::string_view text, const std::string& what) {
  return parse_checked<Json>(text, what);
}

OrderedJson parse_json_ordered(std::string_view text, const std::string& what) {
  return parse_checked<OrderedJson>(text, what);
}

Json read_json_file(const fs::path& path) { return parse_json(read_file(path), path.string()); }

}  // namespace kiln
