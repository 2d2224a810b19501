// Runs the libFuzzer entry point of the JSONL data reader (fuzz/jsonl_fuzz.cc, linked in) in the
// ordinary test suite: over the seed corpus, then over deterministic mutations of its lines:
// truncations, byte edits, and JSON-level edits (a value replaced by another type, an extreme
// number, a long or ill-formed string; a key dropped). The entry point aborts when a loaded
// dataset breaks an invariant; anything but kiln::Error escaping is a failure here.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/fuzz_json.h"
#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kiln {
namespace {

const fs::path kSeeds = fs::path(KILN_SOURCE_DIR) / "fuzz/corpus/jsonl";

int run_one(const std::string& input, const std::string& label) {
  try {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    return 1;
  } catch (const std::exception& e) {
    ADD_FAILURE() << label << ": an exception escaped: " << e.what();
  } catch (...) {
    ADD_FAILURE() << label << ": an unknown exception escaped";
  }
  return 0;
}

std::vector<std::string> seed_lines() {
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(kSeeds)) paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> lines;
  for (const auto& p : paths) {
    std::istringstream in(read_file(p));
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) lines.push_back(line);
    }
  }
  return lines;
}

TEST(JsonlFuzz, SeedsLoadOrFailCleanly) {
  std::vector<fs::path> paths;
  for (const auto& e : fs::directory_iterator(kSeeds)) paths.push_back(e.path());
  ASSERT_GE(paths.size(), 5u);
  for (const auto& p : paths) run_one(read_file(p), p.filename().string());
}

TEST(JsonlFuzz, ByteMutations) {
  std::mt19937_64 rng(1);
  int runs = 0;
  const std::vector<std::string> lines = seed_lines();
  ASSERT_GE(lines.size(), 8u);
  for (const std::string& line : lines) {
    for (size_t len = 0; len < line.size(); len += 1 + len / 6) {
      runs += run_one(line.substr(0, len), "truncate");
    }
    for (int k = 0; k < 60; ++k) {
      std::string m = line;
      const size_t at = rng() % m.size();
      switch (rng() % 4) {
        case 0:
          m[at] = static_cast<char>(m[at] ^ (1 << (rng() % 8)));
          break;
        case 1:
          m[at] = static_cast<char>(rng() % 256);
          break;
        case 2:
          m.erase(at, 1 + rng() % 4);
          break;
        default:
          m.insert(at, 1, "{}[]\",:\\\n\x80\xff"[rng() % 13]);
          break;
      }
      // Alone, and between two good lines (the reader must still name the right line).
      runs += run_one(m, "byte edit");
      runs += run_one(lines[0] + "\n" + m + "\n" + lines[1], "byte edit in context");
    }
  }
  EXPECT_GT(runs, 1500);
}

TEST(JsonlFuzz, JsonMutations) {
  const std::vector<Json> replacements = {nullptr,
                                          true,
                                          0,
                                          -1,
                                          -100,
                                          2147483648LL,
                                          -9223372036854775807LL - 1,
                                          18446744073709551615ULL,
                                          1.5,
                                          "",
                                          "assistant",
                                          "system",
                                          "<|im_end|>",
                                          std::string(5000, 'x'),
                                          Json::array(),
                                          Json::array({1, 2, 3}),
                                          Json::object(),
                                          Json{{"role", "user"}, {"content", "x"}}};
  int runs = 0;
  for (const std::string& line : seed_lines()) {
    Json doc;
    try {
      doc = Json::parse(line);
    } catch (const std::exception&) {
      continue;  // the deliberately bad seed lines
    }
    std::vector<Json::json_pointer> nodes;
    testing::fuzz_json_nodes(doc, Json::json_pointer(), nodes);
    for (const auto& at : nodes) {
      for (const Json& r : replacements) {
        Json m = doc;
        m[at] = r;
        runs += run_one(m.dump(), "replace " + at.to_string());
      }
      if (!at.empty()) {
        Json m = doc;
        m[at.parent_pointer()].is_object()
            ? (void)m[at.parent_pointer()].erase(at.back())
            : (void)m[at.parent_pointer()].erase(static_cast<size_t>(std::stoul(at.back())));
        runs += run_one(m.dump(), "drop " + at.to_string());
        // An ill-formed UTF-8 string where the value was, written by hand (dump would refuse).
        Json marker = doc;
        marker[at] = "@@MARK@@";
        std::string t = marker.dump();
        const size_t pos = t.find("\"@@MARK@@\"");
        if (pos != std::string::npos) {
          t.replace(pos, 10, "\"\xc3\x28 \xed\xa0\x80 \xf0\x28\x8c\x28\"");
          runs += run_one(t, "ill-formed utf-8 " + at.to_string());
        }
      }
    }
  }
  EXPECT_GT(runs, 800);
}

}  // namespace
}  // namespace kiln
