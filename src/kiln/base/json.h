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

// Parses a JSON document; errors name `what` (usually the file path, or "path:line" for one line
// of a JSONL file) and the parser's line and column. Documents nested deeper than kMaxJsonDepth
// and numbers a double cannot hold are errors (kiln::Error) like any malformed text.
Json parse_json(std::string_view text, const std::string& what);
Json read_json_file(const fs::path& path);
// The same, keeping each object's keys in their order.
OrderedJson parse_json_ordered(std::string_view text, const std::string& what);

}  // namespace kiln
