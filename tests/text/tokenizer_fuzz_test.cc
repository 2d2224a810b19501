// Runs the libFuzzer entry point (fuzz/tokenizer_json_fuzz.cc, linked in) in the ordinary test
// suite: over the seed corpus, then over deterministic mutations of it: truncations, byte edits,
// and JSON-level edits (a value replaced by another type or an extreme number, a key dropped,
// hostile regexes). Every input must load or throw kiln::Error; the entry point aborts when a
// loaded tokenizer misbehaves, and anything but kiln::Error escaping is a failure here.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kiln {
namespace {

const fs::path kSeeds = fs::path(KILN_SOURCE_DIR) / "fuzz/corpus/tokenizer_json";

struct Tally {
  int loaded = 0;
  int rejected = 0;
};

void run_one(const std::string& input, const std::string& label, Tally& tally) {
  const std::vector<uint8_t> buf(input.begin(), input.end());
  try {
    LLVMFuzzerTestOneInput(buf.data(), buf.size());
    Tokenizer::from_json_text(input, "fuzz.json");
    ++tally.loaded;
  } catch (const Error& e) {
    ++tally.rejected;
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << label << ": multi-line error: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << label << ": a non-kiln exception escaped: " << e.what();
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

// Every node of a JSON document, as a JSON pointer.
void collect(const Json& j, const Json::json_pointer& at, std::vector<Json::json_pointer>& out) {
  out.push_back(at);
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) collect(v, at / k, out);
  } else if (j.is_array()) {
    // Only the first few elements of a long array: the vocabulary has hundreds.
    for (size_t i = 0; i < std::min<size_t>(j.size(), 4); ++i) collect(j[i], at / i, out);
  }
}

TEST(TokenizerFuzz, SeedsLoadOrFailCleanly) {
  Tally tally;
  for (const std::string& s : seeds()) run_one(s, "seed", tally);
  EXPECT_GE(tally.loaded, 5);
  EXPECT_GE(tally.rejected, 1);  // bad_model_type.json
}

TEST(TokenizerFuzz, ByteMutations) {
  std::mt19937_64 rng(1);
  Tally tally;
  for (const std::string& seed : seeds()) {
    for (size_t len = 0; len < seed.size(); len += 1 + len / 8) {
      run_one(seed.substr(0, len), "truncate", tally);
    }
    for (int round = 0; round < 300; ++round) {
      std::string s = seed;
      for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) {
        const size_t at = rng() % s.size();
        switch (rng() % 4) {
          case 0:
            s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8)));
            break;
          case 1:
            s[at] = "{}[]\",:0-1 \\ua\xC3\xFF"[rng() % 17];
            break;
          case 2:
            s.erase(at, 1 + rng() % 8);
            break;
          default:
            s.insert(at, s.substr(rng() % s.size(), 1 + rng() % 16));
            break;
        }
        if (s.empty()) s.push_back('{');  // (not s = "{": a GCC 12 -Wrestrict false positive)
      }
      run_one(s, "byte edit", tally);
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
  Tally tally;
  for (const std::string& seed : seeds()) {
    const Json doc = parse_json(seed, "seed");
    std::vector<Json::json_pointer> nodes;
    collect(doc, Json::json_pointer(), nodes);
    for (int round = 0; round < 400; ++round) {
      Json j = doc;
      for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
        const Json::json_pointer& at = nodes[rng() % nodes.size()];
        if (!j.contains(at)) continue;
        if (at.empty()) {
          j = replacements[rng() % replacements.size()];
        } else if (rng() % 4 == 0 && j.at(at.parent_pointer()).is_object()) {
          j.at(at.parent_pointer()).erase(at.back());
        } else {
          j.at(at) = replacements[rng() % replacements.size()];
        }
      }
      run_one(j.dump(), "json edit", tally);
    }
  }
  EXPECT_GT(tally.loaded, 100);
  EXPECT_GT(tally.rejected, 100);
}

TEST(TokenizerFuzz, HostileRegexes) {
  Json doc = read_json_file(kSeeds / "qwen_like_pairs.json");
  Tally tally;
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
