// Preference pairs for the tests that train with a dpo section, made from the demo tokens
// (assets/demo/tokens.jsonl) without a tokenizer: pair i's prompt is line i's first 10 tokens,
// its chosen completion line i's next 30, its rejected one line i + 1's tokens 10 to 33
// (data.format preference, TRL's pre-tokenized form).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kiln/base/file.h"
#include "kiln/base/json.h"

namespace kiln::testing {

inline std::filesystem::path write_demo_pairs(const std::filesystem::path& file, int pairs = 200) {
  const std::string text =
      read_file(std::filesystem::path(KILN_SOURCE_DIR) / "assets/demo/tokens.jsonl");
  std::vector<std::vector<int>> lines;
  size_t at = 0;
  while (at < text.size() && static_cast<int>(lines.size()) <= pairs) {
    const size_t nl = text.find('\n', at);
    const std::string line = text.substr(at, nl - at);
    at = nl == std::string::npos ? text.size() : nl + 1;
    if (!line.empty()) lines.push_back(Json::parse(line).at("input_ids").get<std::vector<int>>());
  }
  std::string out;
  for (int i = 0; i + 1 < static_cast<int>(lines.size()); ++i) {
    const std::vector<int>& a = lines[i];
    const std::vector<int>& b = lines[i + 1];
    const Json pair = {{"prompt_input_ids", std::vector<int>(a.begin(), a.begin() + 10)},
                       {"chosen_input_ids", std::vector<int>(a.begin() + 10, a.begin() + 40)},
                       {"rejected_input_ids", std::vector<int>(b.begin() + 10, b.begin() + 34)}};
    out += pair.dump() + "\n";
  }
  write_file_atomic(file, out);
  return file;
}

}  // namespace kiln::testing
