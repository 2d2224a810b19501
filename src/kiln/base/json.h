// JSON helpers over nlohmann::json that name the file and field in every error.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "kiln/base/file.h"

namespace kiln {

using Json = nlohmann::json;

// Parses a JSON document; errors name `what` (usually the file path) and the parser's position.
Json parse_json(std::string_view text, const std::string& what);
Json read_json_file(const fs::path& path);

}  // namespace kiln
