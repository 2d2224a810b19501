#include "kiln/data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "kiln/base/error.h"

namespace kiln {
namespace {

using Ids = std::vector<int32_t>;
constexpr int32_t X = kIgnoreIndex;

// n examples; example i is [i+1, i+1, ...] of length 1 + i % 4, so a row's first token names it.
TokenDataset numbered(size_t n) {
  std::vector<Example> examples;
  for (size_t i = 0; i < n; ++i) {
    Ids ids(1 + i % 4, static_cast<int32_t>(i + 1));
    examples.push_back({ids, ids});
  }
  return TokenDataset::from_examples(std::move(examples), "numbered");
}

// The example index of each row of the next `batches` batches.
std::vector<size_t> draw(Sampler& s, int batches) {
  std::vector<size_t> out;
  Batch b;
  for (int i = 0; i < batches; ++i) {
    s.next(b);
    for (int r = 0; r < b.B; ++r) out.push_back(static_cast<size_t>(b.input_ids[r * b.T] - 1));
  }
  return out;
}

TEST(Sampler, ShiftAndMasking) {
  TokenDataset ds = TokenDataset::from_examples({{{5, 6, 7, 8}, {X, 6, X, 8}}}, "one");
  Sampler s(ds, 1, 6, false, 0);
  Batch b;
  s.next(b);
  EXPECT_EQ(b.B, 1);
  EXPECT_EQ(b.T, 6);
  EXPECT_EQ(b.input_ids, (Ids{5, 6, 7, 8, 0, 0}));
  EXPECT_EQ(b.targets, (Ids{6, X, 8, X, X, X}));
  EXPECT_EQ(b.positions, (Ids{0, 1, 2, 3, 0, 0}));
  EXPECT_EQ(b.doc_start, (Ids{0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(b.num_targets(), 2);
}

TEST(Sampler, PaddingAndTruncation) {
  TokenDataset ds = TokenDataset::from_examples(
      {{{1, 2, 3, 4, 5, 6}, {1, 2, 3, 4, 5, 6}}, {{7}, {7}}, {{8, 9}, {8, 9}}}, "three");
  Sampler s(ds, 3, 4, false, 0);
  Batch b;
  s.next(b);
  // Row 0 is cut to 4 tokens: its last kept position has no target. Row 1 (one token) has none.
  EXPECT_EQ(b.input_ids, (Ids{1, 2, 3, 4, 7, 0, 0, 0, 8, 9, 0, 0}));
  EXPECT_EQ(b.targets, (Ids{2, 3, 4, X, X, X, X, X, 9, X, X, X}));
  EXPECT_EQ(b.positions, (Ids{0, 1, 2, 3, 0, 0, 0, 0, 0, 1, 0, 0}));
  EXPECT_EQ(b.doc_start, Ids(12, 0));
}

TEST(Sampler, InOrderWithoutShuffle) {
  TokenDataset ds = numbered(5);
  Sampler s(ds, 2, 8, false, 123);
  EXPECT_EQ(s.batches_per_epoch(), 2);
  EXPECT_EQ(draw(s, 4), (std::vector<size_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(s.epoch(), 1u);
}

TEST(Sampler, EpochsArePermutations) {
  TokenDataset ds = numbered(50);
  Sampler s(ds, 1, 8, true, 7);
  std::vector<size_t> e0 = draw(s, 50), e1 = draw(s, 50);
  EXPECT_EQ(s.epoch(), 1u);
  EXPECT_NE(e0, e1);
  for (auto* e : {&e0, &e1}) {
    std::vector<size_t> sorted = *e;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) EXPECT_EQ(sorted[i], i);
  }
  EXPECT_EQ(e0, epoch_permutation(50, 7, 0));
  EXPECT_EQ(e1, epoch_permutation(50, 7, 1));
}

TEST(Sampler, DeterministicForSeed) {
  TokenDataset ds = numbered(40);
  Sampler a(ds, 4, 8, true, 42), b(ds, 4, 8, true, 42), c(ds, 4, 8, true, 43);
  std::vector<size_t> da = draw(a, 25), db = draw(b, 25), dc = draw(c, 25);
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
  // Pinned: the order must not change across platforms or releases, or resumed runs would
  // diverge. Values from an independent Python transcription of splitmix64 + Fisher-Yates:
  //   M = 2**64 - 1
  //   def mix(s):  # returns (new state, output)
  //       s = (s + 0x9E3779B97F4A7C15) & M; z = s
  //       z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
  //       z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
  //       return s, z ^ (z >> 31)
  //   def perm(n, seed, epoch):
  //       s = mix(seed)[1] ^ ((epoch * 0xD1B54A32D192ED03) & M); o = list(range(n))
  //       for i in range(n, 1, -1):
  //           while True:
  //               s, r = mix(s)
  //               if r >= (2**64 - i) % i: break
  //           j = r % i; o[i - 1], o[j] = o[j], o[i - 1]
  //       return o
  EXPECT_EQ(epoch_permutation(10, 0, 0), (std::vector<size_t>{0, 1, 4, 6, 3, 9, 8, 7, 2, 5}));
  EXPECT_EQ(epoch_permutation(10, 42, 3), (std::vector<size_t>{8, 6, 4, 5, 3, 0, 1, 7, 2, 9}));
  std::vector<size_t> p = epoch_permutation(1, 5, 9);
  EXPECT_EQ(p, (std::vector<size_t>{0}));
  EXPECT_TRUE(epoch_permutation(0, 5, 9).empty());
}

// Every rank's share of one epoch: disjoint, equal in size, and together the first
// world * B * batches_per_epoch positions of the epoch's order.
void check_shares(size_t n, int world, int micro_batch, bool shuffle) {
  SCOPED_TRACE(fmt::format("n={} world={} B={} shuffle={}", n, world, micro_batch, shuffle));
  TokenDataset ds = numbered(n);
  std::vector<size_t> order = epoch_permutation(n, 11, 0);
  if (!shuffle) std::sort(order.begin(), order.end());
  int64_t per_epoch = static_cast<int64_t>(n / world / micro_batch);
  std::set<size_t> all;
  for (int r = 0; r < world; ++r) {
    Sampler s(ds, micro_batch, 8, shuffle, 11, r, world);
    ASSERT_EQ(s.batches_per_epoch(), per_epoch);
    std::vector<size_t> got = draw(s, static_cast<int>(per_epoch));
    for (size_t k = 0; k < got.size(); ++k) EXPECT_EQ(got[k], order[r + k * world]);
    for (size_t i : got) EXPECT_TRUE(all.insert(i).second) << "example " << i << " twice";
  }
  size_t used = static_cast<size_t>(per_epoch) * world * micro_batch;
  EXPECT_EQ(all, std::set<size_t>(order.begin(), order.begin() + used));
}

TEST(Sampler, RankSharesDisjointAndCovering) {
  check_shares(12, 2, 2, true);  // divides evenly: all covered
  check_shares(12, 3, 2, true);
  check_shares(13, 2, 2, true);  // one example dropped
  check_shares(17, 3, 2, true);  // 17/3 = 5 per rank, 2 batches each, 5 dropped
  check_shares(10, 3, 1, false);
}

TEST(Sampler, ResumeContinuesIdentically) {
  TokenDataset ds = numbered(23);
  for (int taken : {0, 3, 5, 7, 12}) {
    SCOPED_TRACE(taken);
    Sampler a(ds, 2, 8, true, 9, 1, 2);
    ASSERT_EQ(a.batches_per_epoch(), 5);
    draw(a, taken);
    SamplerState st = a.state();
    // A micro-batch of the group (2 ranks x 2 rows) takes 4 positions; 3 are skipped at the end.
    EXPECT_EQ(st.epoch * 5 + st.position / 4, static_cast<uint64_t>(taken));

    Sampler b(ds, 2, 8, true, 9, 1, 2);
    b.restore(st);
    EXPECT_EQ(b.state(), st);
    Batch ba, bb;
    for (int i = 0; i < 12; ++i) {
      a.next(ba);
      b.next(bb);
      EXPECT_EQ(ba.input_ids, bb.input_ids);
      EXPECT_EQ(ba.targets, bb.targets);
      EXPECT_EQ(ba.positions, bb.positions);
    }
    EXPECT_EQ(a.state(), b.state());
  }
}

TEST(Sampler, RestoreRejectsForeignState) {
  TokenDataset ds = numbered(10);
  Sampler s(ds, 2, 8, true, 0);
  EXPECT_NO_THROW(s.restore({3, 10}));  // end of epoch 3: the next batch starts epoch 4
  Batch b;
  s.next(b);
  EXPECT_EQ(s.state(), (SamplerState{4, 2}));
  try {
    s.restore({0, 11});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("numbered: the data position 11 is past the 10 examples"),
              std::string::npos)
        << e.what();
  }
}

// The examples a group of `world` ranks takes in `steps` micro-batches, in the group's order (row
// g = b * W + r of a micro-batch is rank r's row b), continuing from `state`; returns the state
// after.
SamplerState group_draw(const TokenDataset& ds, int B, int world, int steps, SamplerState state,
                        std::vector<size_t>& seen) {
  std::vector<Sampler> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back(ds, B, 8, true, 5, r, world);
    ranks.back().restore(state);
  }
  for (int i = 0; i < steps; ++i) {
    std::vector<std::vector<size_t>> rows(world);
    for (int r = 0; r < world; ++r) rows[r] = draw(ranks[r], 1);
    for (int b = 0; b < B; ++b) {
      for (int r = 0; r < world; ++r) seen.push_back(rows[r][b]);
    }
  }
  for (int r = 1; r < world; ++r) EXPECT_EQ(ranks[r].state(), ranks[0].state());
  return ranks[0].state();
}

// A run saved and resumed on 1, then 2, then 4, then 1 rank takes the very examples, in the very
// order, of an uninterrupted run: every example once per epoch.
TEST(Sampler, ResumeOnAnyWorldSizeContinuesTheOrder) {
  const TokenDataset ds = numbered(32);
  std::vector<size_t> uninterrupted;
  group_draw(ds, 2, 1, 24, {}, uninterrupted);  // 48 examples: an epoch and a half
  std::vector<size_t> seen;
  SamplerState st = group_draw(ds, 2, 1, 2, {}, seen);  // positions 0..3
  st = group_draw(ds, 2, 2, 3, st, seen);               // 4..15
  st = group_draw(ds, 2, 4, 1, st, seen);               // 16..23
  st = group_draw(ds, 2, 1, 12, st, seen);              // 24..31, then 16 of epoch 1
  EXPECT_EQ(st, (SamplerState{1, 16}));
  EXPECT_EQ(seen, uninterrupted);
  const std::vector<size_t> order = epoch_permutation(32, 5, 0);
  EXPECT_EQ(std::vector<size_t>(seen.begin(), seen.begin() + 32), order);
}

TEST(Sampler, TooFewExamples) {
  TokenDataset ds = numbered(5);
  EXPECT_NO_THROW(Sampler(ds, 5, 8, true, 0));
  try {
    Sampler(ds, 2, 8, true, 0, 0, 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "numbered: 5 examples are too few for micro_batch_size 2 on each of 3 ranks"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln
