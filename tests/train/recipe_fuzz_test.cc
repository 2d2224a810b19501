// Runs the libFuzzer entry point of the recipe loader (fuzz/recipe_yaml_fuzz.cc, linked in) in
// the ordinary test suite: over the seed corpus, every truncation of each seed, seeded random
// byte edits, and hostile values spliced in for each key's value (deep nesting, huge and
// non-finite numbers, wrong types, long strings). The entry point aborts when a loaded recipe
// does not round-trip; anything but kiln::Error escaping is a failure here.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "kiln/base/file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kiln {
namespace {

const fs::path kSeeds = fs::path(KILN_SOURCE_DIR) / "fuzz/corpus/recipe";

void run_one(const std::string& input, const std::string& label) {
  try {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  } catch (const std::exception& e) {
    ADD_FAILURE() << label << ": an exception escaped: " << e.what() << "\ninput:\n" << input;
  } catch (...) {
    ADD_FAILURE() << label << ": an unknown exception escaped";
  }
}

std::vector<std::string> seeds() {
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(kSeeds)) paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(read_file(p));
  return out;
}

TEST(RecipeFuzz, SeedsAndTheirTruncations) {
  const auto all = seeds();
  ASSERT_GE(all.size(), 2u);
  for (const std::string& s : all) {
    for (size_t n = 0; n <= s.size(); ++n) run_one(s.substr(0, n), "truncated");
  }
}

TEST(RecipeFuzz, RandomByteEdits) {
  std::mt19937 rng(7);
  for (const std::string& s : seeds()) {
    for (int i = 0; i < 2000; ++i) {
      std::string m = s;
      for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) {
        m[rng() % m.size()] = static_cast<char>(rng() % 256);
      }
      run_one(m, "byte edit");
    }
  }
}

// Every "key: value" line of the seeds with its value replaced by each hostile value.
TEST(RecipeFuzz, HostileValues) {
  const std::vector<std::string> values = {std::string(20000, '[') + std::string(20000, ']'),
                                           std::string(20000, '{'),
                                           "1e400",
                                           "-1e400",
                                           ".nan",
                                           ".inf",
                                           "-0",
                                           "18446744073709551616",
                                           "-9223372036854775809",
                                           "[1, 2, 3]",
                                           "{a: 1}",
                                           "~",
                                           "''",
                                           std::string(100000, 'x'),
                                           "!!binary AAAA",
                                           "&a [*a]",
                                           "0x7fffffff",
                                           "true",
                                           "\"\\u0000\""};
  for (const std::string& s : seeds()) {
    size_t pos = 0;
    while ((pos = s.find(": ", pos)) != std::string::npos) {
      const size_t end = s.find('\n', pos);
      for (const std::string& v : values) {
        run_one(s.substr(0, pos + 2) + v + (end == std::string::npos ? "" : s.substr(end)),
                "hostile value");
      }
      pos += 2;
    }
  }
}

}  // namespace
}  // namespace kiln
