// Shared helpers for the tokenizer tests: the vendored Qwen3 tokenizer (loaded once per test
// binary), the tiny one, and the reference fixtures from tools/tokenizer_ref/gen.mjs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/text/tokenizer.h"

namespace kiln::test {

inline const fs::path kFixtures = fs::path(KILN_SOURCE_DIR) / "tests/fixtures/tokenizer";
inline const fs::path kQwen3Json =
    fs::path(KILN_SOURCE_DIR) / "assets/tokenizer/qwen3/tokenizer.json";
inline const fs::path kTinyJson = kFixtures / "tiny_tokenizer.json";
// Llama 3's tokenizer.json layout with a vocabulary of 273 (tools/make_llama3_test_tokenizer.py).
inline const fs::path kTinyLlama3Json = kFixtures / "llama3_tiny_tokenizer.json";

inline std::vector<Json> read_jsonl(const fs::path& path) {
  std::istringstream in(read_file(path));
  std::vector<Json> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(parse_json(line, path.string()));
  }
  return out;
}

inline std::vector<std::string> corpus() {
  std::vector<std::string> out;
  for (const Json& j : read_jsonl(kFixtures / "corpus.jsonl")) out.push_back(j.at("text"));
  return out;
}

inline const Tokenizer& qwen3() {
  static const Tokenizer t = Tokenizer::load(kQwen3Json);
  return t;
}

inline const Tokenizer& tiny() {
  static const Tokenizer t = Tokenizer::load(kTinyJson);
  return t;
}

inline const Tokenizer& tiny_llama3() {
  static const Tokenizer t = Tokenizer::load(kTinyLlama3Json);
  return t;
}

inline std::vector<int32_t> ids_of(const Json& j) { return j.get<std::vector<int32_t>>(); }

// A fresh temporary directory for the running test; ctest runs tests in parallel processes, so
// the name carries the test's name and the process id.
inline fs::path fresh_temp_dir(const std::string& prefix) { return testing::fresh_dir(prefix); }

}  // namespace kiln::test
