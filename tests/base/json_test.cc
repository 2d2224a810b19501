// parse_json's limits: nesting deeper than kMaxJsonDepth and numbers no double holds are
// kiln::Errors naming the document and the position, never a crash or a foreign exception.
#include "kiln/base/json.h"

#include <gtest/gtest.h>

#include <string>

#include "common/error_of.h"
#include "kiln/base/error.h"

namespace kiln {
namespace {

std::string nested(int depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

std::string error_of(const std::string& text, const std::string& what) {
  return testing::error_of([&] { parse_json(text, what); });
}

TEST(Json, DepthAtTheLimitParses) {
  const Json j = parse_json(nested(kMaxJsonDepth), "ok.json");
  const Json* v = &j;
  int depth = 0;
  while (v->is_array()) {
    v = &(*v)[0];
    ++depth;
  }
  EXPECT_EQ(depth, kMaxJsonDepth);
  EXPECT_EQ(*v, 1);
  EXPECT_EQ(j.dump().size(), 2 * static_cast<size_t>(kMaxJsonDepth) + 1);
}

TEST(Json, OneLevelDeeperIsAnErrorNamingFileAndPosition) {
  EXPECT_EQ(error_of(nested(kMaxJsonDepth + 1), "deep.json"),
            "deep.json: malformed JSON: nested deeper than 256 levels at line 1, column 257");
}

// 70k levels fit in 140 KB: dump() or a copy of such a value overflowed a thread's stack.
TEST(Json, SeventyThousandLevelsInAnObjectFailOnTheRightLine) {
  const std::string text = "{\n  \"text\":\n" + nested(70000) + "}\n";
  EXPECT_EQ(error_of(text, "d.json"),
            "d.json: malformed JSON: nested deeper than 256 levels at line 3, column 256");
}

TEST(Json, BracketsInsideStringsDoNotCount) {
  const std::string brackets(100000, '[');
  const Json j = parse_json("{\"a\": \"" + brackets + "\\\"{\", \"b\": [[1]]}", "s.json");
  EXPECT_EQ(j["a"].get<std::string>().size(), brackets.size() + 2);
  EXPECT_EQ(j["b"][0][0], 1);
}

TEST(Json, ObjectsCountLikeArrays) {
  std::string text;
  for (int i = 0; i <= kMaxJsonDepth; ++i) text += "{\"k\":";
  text += "0" + std::string(kMaxJsonDepth + 1, '}');
  EXPECT_NE(error_of(text, "o.json").find("o.json: malformed JSON: nested deeper than 256"),
            std::string::npos);
}

TEST(Json, NumberOverflowingADoubleIsAnErrorNamingTheLine) {
  EXPECT_EQ(error_of("{\"input_ids\":[1e400]}", "n.jsonl:3").rfind("n.jsonl:3: bad JSON value:", 0),
            0u)
      << error_of("{\"input_ids\":[1e400]}", "n.jsonl:3");
}

TEST(Json, MalformedTextNamesTheDocument) {
  EXPECT_EQ(error_of("[1,", "m.json").rfind("m.json: malformed JSON: ", 0), 0u);
}

}  // namespace
}  // namespace kiln
