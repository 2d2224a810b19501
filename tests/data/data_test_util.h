// Shared helpers for the data tests: the vendored Qwen3 tokenizer (loaded once per binary) and
// temporary directories.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "kiln/base/file.h"
#include "kiln/text/tokenizer.h"

namespace kiln::test {

inline const fs::path kQwenTokenizer =
    fs::path(KILN_SOURCE_DIR) / "assets/tokenizer/qwen3/tokenizer.json";
inline const fs::path kTinyTokenizer =
    fs::path(KILN_SOURCE_DIR) / "tests/fixtures/tokenizer/tiny_tokenizer.json";

inline const Tokenizer& qwen() {
  static const Tokenizer t = Tokenizer::load(kQwenTokenizer);
  return t;
}

// Qwen2 special token ids.
inline constexpr int32_t kImStart = 151644, kImEnd = 151645, kEndOfText = 151643;
inline constexpr int32_t kVocab = 151936;  // Qwen2.5's embedding rows

// A fresh directory, removed with the object.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() /
              ("kiln_data_test_" + std::to_string(::getpid()) + "_" + name)) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

}  // namespace kiln::test
