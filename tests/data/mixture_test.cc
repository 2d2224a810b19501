// Mixture: data.train's weights (0.5 takes a seeded half of a file per epoch, 2 takes it twice)
// and data.eval_split's seeded held-out examples, and the samplers over it resuming exactly.
#include "kiln/data/mixture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "kiln/base/error.h"
#include "kiln/data/packing_sampler.h"
#include "kiln/data/sampler.h"
#include "kiln/data/token_dataset.h"

namespace kiln {
namespace {

// n examples whose first token is first, first + 1, ... (the example's identity).
TokenDataset numbered(int first, int n, const std::string& what) {
  std::vector<Example> ex;
  for (int i = 0; i < n; ++i) ex.push_back({{first + i, 7, 8}, {first + i, 7, 8}});
  return TokenDataset::from_examples(std::move(ex), what);
}

std::vector<int> ids(const ExampleSource& s) {
  std::vector<int> out;
  for (size_t i = 0; i < s.size(); ++i) out.push_back(s.example(i).input_ids[0]);
  return out;
}

std::map<int, int> counts(const ExampleSource& s) {
  std::map<int, int> c;
  for (int id : ids(s)) ++c[id];
  return c;
}

TEST(Mixture, WeightOneIsTheFileItself) {
  const TokenDataset a = numbered(0, 5, "a.jsonl"), b = numbered(100, 3, "b.jsonl");
  const Mixture m({{&a, 1.0}, {&b, 1.0}}, 0.0, 0);
  EXPECT_EQ(ids(m.train()), (std::vector<int>{0, 1, 2, 3, 4, 100, 101, 102}));
  EXPECT_EQ(m.held_out(), nullptr);
}

TEST(Mixture, HalfWeightTakesASeededHalf) {
  const TokenDataset a = numbered(0, 100, "a.jsonl");
  const Mixture m({{&a, 0.5}}, 0.0, 7);
  const std::vector<int> got = ids(m.train());
  ASSERT_EQ(got.size(), 50u);
  EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));  // file order, no repeats
  EXPECT_EQ(std::set<int>(got.begin(), got.end()).size(), 50u);
  std::vector<int> first_half(50);
  std::iota(first_half.begin(), first_half.end(), 0);
  EXPECT_NE(got, first_half);                                 // drawn, not simply the first half
  EXPECT_EQ(ids(Mixture({{&a, 0.5}}, 0.0, 7).train()), got);  // the same for the same seed
  EXPECT_NE(ids(Mixture({{&a, 0.5}}, 0.0, 8).train()), got);  // another for another seed
  EXPECT_NE(m.train().what().find("weight 0.5: 50 of 100"), std::string::npos) << m.train().what();
}

TEST(Mixture, WeightTwoTakesEveryExampleTwice) {
  const TokenDataset a = numbered(0, 6, "a.jsonl"), b = numbered(100, 4, "b.jsonl");
  const Mixture m({{&a, 2.0}, {&b, 1.0}}, 0.0, 3);
  EXPECT_EQ(m.train().size(), 16u);
  for (const auto& [id, n] : counts(m.train())) EXPECT_EQ(n, id < 100 ? 2 : 1) << id;
  // 2.5 of 4: two copies of each and two more, distinct.
  const Mixture m25({{&b, 2.5}}, 0.0, 3);
  std::map<int, int> c = counts(m25.train());
  EXPECT_EQ(m25.train().size(), 10u);
  int threes = 0;
  for (const auto& [id, n] : c) {
    EXPECT_TRUE(n == 2 || n == 3) << id;
    threes += n == 3 ? 1 : 0;
  }
  EXPECT_EQ(threes, 2);
}

// Weights that give no whole count: round(w * n) examples, floor(w) copies of each and the
// rest drawn without repeats. 0.5 of 3 is 1.5, rounded to 2 (neither floor's 1 nor a half of
// each); 0.4 of 3 is 1.2, rounded to 1 (not ceil's 2); 1.5 of 3 is 4.5: every example once and
// 2 of them again.
TEST(Mixture, FractionalWeightsRoundTheirCount) {
  const TokenDataset a = numbered(0, 3, "a.jsonl");
  struct Case {
    double weight;
    size_t count, least, most;  // examples, and copies of each example
  };
  for (const Case c : {Case{0.5, 2, 0, 1}, Case{0.4, 1, 0, 1}, Case{0.7, 2, 0, 1},
                       Case{1.5, 5, 1, 2}, Case{2.34, 7, 2, 3}}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      SCOPED_TRACE("weight " + std::to_string(c.weight) + " seed " + std::to_string(seed));
      const Mixture m({{&a, c.weight}}, 0.0, seed);
      ASSERT_EQ(m.train().size(), c.count);
      std::map<int, int> n = counts(m.train());
      size_t more = 0;
      for (int id = 0; id < 3; ++id) {
        EXPECT_GE(static_cast<size_t>(n[id]), c.least) << id;
        EXPECT_LE(static_cast<size_t>(n[id]), c.most) << id;
        more += static_cast<size_t>(n[id]) > c.least ? 1 : 0;
      }
      EXPECT_EQ(more, c.count - 3 * c.least);  // the drawn rest: distinct examples
      EXPECT_EQ(ids(Mixture({{&a, c.weight}}, 0.0, seed).train()), ids(m.train()));
    }
  }
  // After a held-out example (a quarter of 4 is 1), 0.5 of the 3 kept is 2 of them.
  const TokenDataset b = numbered(10, 4, "b.jsonl");
  const Mixture held({{&b, 0.5}}, 0.25, 4);
  EXPECT_EQ(held.held_out()->size(), 1u);
  EXPECT_EQ(held.train().size(), 2u);
  EXPECT_NE(held.train().what().find("weight 0.5: 2 of 3"), std::string::npos)
      << held.train().what();
  // 0.5 of 5 is 2.5: round half away from zero, 3.
  const TokenDataset five = numbered(20, 5, "five.jsonl");
  EXPECT_EQ(Mixture({{&five, 0.5}}, 0.0, 1).train().size(), 3u);
}

TEST(Mixture, EvalSplitHoldsOutASeededShareOfEachFile) {
  const TokenDataset a = numbered(0, 50, "a.jsonl"), b = numbered(100, 100, "b.jsonl");
  const Mixture m({{&a, 1.0}, {&b, 2.0}}, 0.1, 11);
  ASSERT_NE(m.held_out(), nullptr);
  const std::vector<int> out = ids(*m.held_out());
  ASSERT_EQ(out.size(), 15u);  // 5 of a, 10 of b
  EXPECT_EQ(std::count_if(out.begin(), out.end(), [](int id) { return id < 100; }), 5);
  const std::map<int, int> train = counts(m.train());
  EXPECT_EQ(m.train().size(), 45u + 2 * 90u);
  for (int id : out) EXPECT_EQ(train.count(id), 0u) << id;  // never trained on
  EXPECT_EQ(train.size() + out.size(), 150u);               // and nothing else left out
  EXPECT_EQ(ids(*Mixture({{&a, 1.0}, {&b, 2.0}}, 0.1, 11).held_out()), out);
}

// Issue 34: a file listed twice held out different examples per listing, so each listing trained
// on what the other held out. The draw follows the examples' content: both listings hold out the
// same examples, and no example trained on has the tokens of one held out, duplicates in another
// file included.
TEST(Mixture, EvalSplitNeverTrainsOnWhatItHoldsOut) {
  const TokenDataset a = numbered(0, 200, "a.jsonl"), b = numbered(150, 100, "b.jsonl");
  for (uint64_t seed : {1u, 2u, 3u}) {
    const Mixture twice({{&a, 1.0}, {&a, 1.0}}, 0.1, seed);
    const std::vector<int> out = ids(*twice.held_out());
    ASSERT_EQ(out.size(), 20u);  // the same 20 from each listing, evaluated once
    const std::set<int> distinct(out.begin(), out.end());
    EXPECT_EQ(distinct.size(), 20u);
    const std::map<int, int> train = counts(twice.train());
    for (int id : out) EXPECT_EQ(train.count(id), 0u) << id << " seed " << seed;
    EXPECT_EQ(train.size() + distinct.size(), 200u);
    // a and b share examples 150..199: one held out from either is trained on by neither.
    const Mixture shared({{&a, 1.0}, {&b, 2.0}}, 0.1, seed);
    const std::vector<int> held = ids(*shared.held_out());
    const std::map<int, int> trained = counts(shared.train());
    for (int id : held) EXPECT_EQ(trained.count(id), 0u) << id << " seed " << seed;
  }
}

TEST(Mixture, WeightsOrSplitsThatLeaveNothingAreErrors) {
  const TokenDataset a = numbered(0, 10, "a.jsonl"), one = numbered(0, 1, "one.jsonl");
  try {
    Mixture({{&a, 0.01}}, 0.0, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "a.jsonl: weight 0.01 of its 10 examples takes none of them");
  }
  try {
    Mixture({{&one, 1.0}}, 0.6, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "one.jsonl: holding out 1 of its 1 examples for evaluation leaves none to train "
                 "on");
  }
  // A share that rounds to none holds out nothing from that file.
  const Mixture m({{&a, 1.0}}, 0.01, 0);
  EXPECT_EQ(m.held_out()->size(), 0u);
  EXPECT_EQ(m.train().size(), 10u);
}

// The samplers see a mixture like any source: a sampler restored from another's state over an
// identically built mixture continues with exactly the same batches, packed or not.
TEST(Mixture, SamplersResumeExactly) {
  const TokenDataset a = numbered(0, 37, "a.jsonl"), b = numbered(100, 23, "b.jsonl");
  for (const bool packed : {false, true}) {
    const auto make = [&](const ExampleSource& s) -> std::unique_ptr<BatchSampler> {
      if (packed) return std::make_unique<PackingSampler>(s, 2, 8, true, 5, 1, 2);
      return std::make_unique<Sampler>(s, 2, 8, true, 5, 1, 2);
    };
    const Mixture m1({{&a, 0.5}, {&b, 3.0}}, 0.05, 5);
    auto s1 = make(m1.train());
    Batch b1, b2;
    for (int i = 0; i < 40; ++i) s1->next(b1);  // past the end of an epoch
    const SamplerState st = s1->state();
    const Mixture m2({{&a, 0.5}, {&b, 3.0}}, 0.05, 5);
    auto s2 = make(m2.train());
    s2->restore(st);
    for (int i = 0; i < 30; ++i) {
      s1->next(b1);
      s2->next(b2);
      ASSERT_EQ(b1.input_ids, b2.input_ids) << "packed " << packed << " batch " << i;
      ASSERT_EQ(b1.targets, b2.targets);
    }
  }
}

}  // namespace
}  // namespace kiln
