// Runs the libFuzzer entry point (fuzz/tokenizer_json_fuzz.cc, linked in) in the ordinary test
// suite: over the seed corpus, then over deterministic mutations of it: truncations, byte edits,
// and JSON-level edits (a value replaced by another type or an extreme number, a key dropped,
// hostile regexes). Every input must load or throw kiln::Error; the entry point aborts when a
// loaded tokenizer misbehaves, and anything but kiln::Error escaping is a failure here.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "common/fuzz_driver.h"
#include "common/fuzz_json.h"
#include "kiln/base/json.h"
#include "kiln/text/tokenizer.h"

namespace kiln {
namespace {

using testing::fuzz_json_edit;
using testing::fuzz_json_nodes;
using testing::FuzzTally;

const fs::path kSeeds = fs::path(KILN_SOURCE_DIR) / "fuzz/corpus/tokenizer_json";

// The entry point, then the loader itself to count loaded and rejected inputs.
void run_one(const std::string& input, const std::string& label, FuzzTally& tally) {
  testing::run_fuzz_input(input, label, &tally, [](const std::string& text) {
    Tokenizer::from_json_text(text, "fuzz.json");
    return true;
  });
}

std::vector<std::string> seeds() { return testing::fuzz_seeds(kSeeds); }

TEST(TokenizerFuzz, SeedsLoadOrFailCleanly) {
  FuzzTally tally;
  for (const std::string& s : seeds()) run_one(s, "seed", tally);
  EXPECT_GE(tally.loaded, 5);
  EXPECT_GE(tally.rejected, 1);  // bad_model_type.json
}

TEST(TokenizerFuzz, ByteMutations) {
  std::mt19937_64 rng(1);
  FuzzTally tally;
  for (const std::string& seed : seeds()) {
    for (const std::string& t : testing::fuzz_truncations(seed, /*sparse=*/true)) {
      run_one(t, "truncate", tally);
    }
    for (int round = 0; round < 300; ++round) {
      run_one(testing::fuzz_mutate(seed, rng, "{}[]\",:0-1 \\ua\xC3\xFF"), "byte edit", tally);
    }
  }
  EXPECT_GT(tally.rejected, 0);
}

TEST(TokenizerFuzz, JsonMutations) {
  const Json replacements = parse_json(R"([null, true, false, 0, -1, 1, 3, 1e30, -1e30, 0.5,
      1099511627776, 9223372036854775808, 16777215, "", "x", "a b", "\u0120", "<|im_start|>",
      "Word\nPiece\u0001", [], {}, ["a", "b"], ["a"], {"type": "NFC"}, {"Regex": "("},
      {"Regex": "(a*)*$"}, {"Regex": ""}, {"String": ""}])",
                                       "replacements");

  std::mt19937_64 rng(2);
  FuzzTally tally;
  for (const std::string& seed : seeds()) {
    const Json doc = parse_json(seed, "seed");
    std::vector<Json::json_pointer> nodes;
    fuzz_json_nodes(doc, Json::json_pointer(), nodes, 4);
    for (int round = 0; round < 400; ++round) {
      run_one(fuzz_json_edit(doc, nodes, replacements, rng).dump(), "json edit", tally);
    }
  }
  EXPECT_GT(tally.loaded, 100);
  EXPECT_GT(tally.rejected, 100);
}

TEST(TokenizerFuzz, HostileRegexes) {
  Json doc = read_json_file(kSeeds / "qwen_like_pairs.json");
  FuzzTally tally;
  for (const char* re : {"(", "[", "\\", "(?<=a+)b", "(a*)*b", "(a|a)*c", "", "x*", "\\b", "$",
                         "(?=a)", "\\p{Nope}", "(?i)\\X+", "[^\\s\\S]", "\\K", "(?<=\\K)a"}) {
    doc["pre_tokenizer"]["pretokenizers"][0]["pattern"] = Json::object({{"Regex", re}});
    for (const char* behavior :
         {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"}) {
      doc["pre_tokenizer"]["pretokenizers"][0]["behavior"] = behavior;
      for (const bool invert : {false, true}) {
        doc["pre_tokenizer"]["pretokenizers"][0]["invert"] = invert;
        run_one(doc.dump(), std::string("regex ") + re, tally);
      }
    }
  }
  EXPECT_GT(tally.loaded, 0);
  EXPECT_GT(tally.rejected, 0);
}

}  // namespace
}  // namespace kiln
