// tokenizer_config.json beside a tokenizer.json, as transformers reads its special tokens: the one
// reader for kiln init's fitted ids (model_files/tokenizer_fit.h) and the preference data's
// completion end (data/preference_pairs.h).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "kiln/base/json.h"

namespace kiln {

// tokenizer_config.json beside `tokenizer_json`, or an empty object.
Json tokenizer_config_beside(const std::filesystem::path& tokenizer_json);

// A special token's text from a tokenizer_config.json object: "<|im_end|>" or {"content":
// "<|im_end|>"}; nullopt when the key is missing or neither.
std::optional<std::string> configured_token(const Json& config, const char* key);

}  // namespace kiln
