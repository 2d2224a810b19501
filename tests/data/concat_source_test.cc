// ConcatSource reads several sources as one, in order, skipping empty parts.
#include "kiln/data/concat_source.h"

#include <gtest/gtest.h>

#include "kiln/base/error.h"
#include "kiln/data/token_dataset.h"

namespace kiln {
namespace {

// n examples whose first token is first, first + 1, ...
TokenDataset numbered(int first, int n, const std::string& what) {
  std::vector<Example> ex;
  for (int i = 0; i < n; ++i) ex.push_back({{first + i, 7}, {first + i, 7}});
  return TokenDataset::from_examples(std::move(ex), what);
}

TEST(ConcatSource, ReadsThePartsInOrder) {
  const TokenDataset a = numbered(100, 3, "a.jsonl"), c = numbered(200, 2, "c.jsonl");
  const TokenDataset b = TokenDataset::from_examples({}, "b.jsonl");  // empty
  const ConcatSource all({&a, &b, &c});
  ASSERT_EQ(all.size(), 5u);
  const int want[] = {100, 101, 102, 200, 201};
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all.example(i).input_ids[0], want[i]) << i;
  EXPECT_EQ(all.what(), "a.jsonl + b.jsonl + c.jsonl");
  EXPECT_THROW(all.example(5), Error);
}

TEST(ConcatSource, OnePartIsThatPart) {
  const TokenDataset a = numbered(5, 4, "a.jsonl");
  const ConcatSource one({&a});
  ASSERT_EQ(one.size(), 4u);
  EXPECT_EQ(one.example(3).input_ids[0], 8);
  EXPECT_EQ(one.what(), "a.jsonl");
}

}  // namespace
}  // namespace kiln
