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

// Parses a JSON document; errors name `what` (usually the file path) and the parser's position.
Json parse_json(std::string_view text, const std::string& what);
Json read_json_file(const fs::path& path);
OrderedJson parse_json_ordered(std::string_view text, const std::string& what);

}  // namespace kiln
