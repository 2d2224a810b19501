// Runs the libFuzzer entry point of the recipe loader (fuzz/recipe_yaml_fuzz.cc, linked in) in
// the ordinary test suite (tests/common/fuzz_driver.h): over the seed corpus, every truncation of
// each seed, seeded byte edits, and hostile values spliced in for each key's value (deep nesting,
// huge and non-finite numbers, wrong types, long strings). The entry point aborts when a loaded
// recipe does not round-trip; any exception escaping it is a failure here.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/fuzz_driver.h"

namespace kiln {
namespace {

using testing::fuzz_mutate;
using testing::fuzz_truncations;

const fs::path kSeeds = fs::path(KILN_SOURCE_DIR) / "fuzz/corpus/recipe";

void run_one(const std::string& input, const std::string& label) {
  testing::run_fuzz_input(input, label);
}

std::vector<std::string> seeds() { return testing::fuzz_seeds(kSeeds); }

TEST(RecipeFuzz, SeedsAndTheirTruncations) {
  const auto all = seeds();
  ASSERT_GE(all.size(), 2u);
  for (const std::string& s : all) {
    for (const std::string& t : fuzz_truncations(s)) run_one(t, "truncated");
  }
}

TEST(RecipeFuzz, RandomByteEdits) {
  std::mt19937_64 rng(7);
  for (const std::string& s : seeds()) {
    for (int i = 0; i < 2000; ++i)
      run_one(fuzz_mutate(s, rng, ":-[]{}#&*!|>'\"%@`,? \n"), "byte edit");
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
