// JSON helpers over nlohmann::json that name the file and field in every error.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kiln/base/file.h"

namespace kiln {

using Json = nlohmann::json;
// Keeps the keys of each object in their order, for text that is rendered back (chat tools and
// tool-call arguments, a base model's config.json).
using OrderedJson = nlohmann::ordered_json;

// The deepest nesting of arrays and objects kiln accepts in any JSON it reads. nlohmann's
// parser is iterative, but dump(), copies and kiln's own walks recurse once per level: a
// 70k-deep line would overflow a worker thread's stack. Real files (tokenizer.json, config.json,
// manifests, data lines) nest fewer than 10 levels.
inline constexpr int kMaxJsonDepth = 256;

// A JSON value for a message (Json or OrderedJson), cut short so a huge value cannot flood the
// line.
template <typename J>
std::string json_preview(const J& v) {
  std::string s = v.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

// A position in a text: 1-based line and column (columns count bytes).
struct TextPosition {
  size_t line = 1;
  size_t column = 1;
  bool operator==(const TextPosition&) const = default;
};

// The position of byte `offset` of `text` (offset == size() is just past the end), counted from
// `origin`, the position of the text's first byte in its file.
TextPosition text_position(std::string_view text, size_t offset, TextPosition origin = {});

// Parses a JSON document; errors name `what` (usually the file path, or "path:line" for one
// record of a data file) and the position of the fault in the file, counted from `origin` (where
// `text` starts in it): "config.json: malformed JSON: syntax error while parsing object key -
// unexpected '}'; expected string literal at line 23, column 1". Documents nested deeper than
// kMaxJsonDepth and numbers a double cannot hold are errors (kiln::Error) like any malformed text.
Json parse_json(std::string_view text, const std::string& what, TextPosition origin = {});
Json read_json_file(const fs::path& path);
// The same, keeping each object's keys in their order.
OrderedJson parse_json_ordered(std::string_view text, const std::string& what,
                               TextPosition origin = {});

}  // namespace kiln
