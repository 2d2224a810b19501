// Packing: row layout (documents, positions, targets), the greedy rule, determinism, resume and
// rank shards of the PackingSampler; and the acceptance check that a packed batch gives every
// example the loss and gradients it has alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "common/grad_check.h"
#include "common/small_model.h"
#include "common/test_backend.h"
#include "kiln/base/error.h"
#include "kiln/data/packing_sampler.h"
#include "kiln/kernels/device/host_cpu.h"
#include "kiln/model/decoder.h"
#include "kiln/train/train_data.h"

namespace kiln {
namespace {

using testing::randomize;
using testing::small_config;

using Ids = std::vector<int32_t>;
constexpr int32_t X = kIgnoreIndex;

// Example i has lengths[i] tokens 1000*(i+1) + t, labels equal to the ids: a token names its
// example and position.
TokenDataset numbered(const std::vector<int>& lengths) {
  std::vector<Example> ex;
  for (size_t i = 0; i < lengths.size(); ++i) {
    Ids ids(lengths[i]);
    for (int t = 0; t < lengths[i]; ++t) ids[t] = static_cast<int32_t>(1000 * (i + 1) + t);
    ex.push_back({ids, ids});
  }
  return TokenDataset::from_examples(std::move(ex), "numbered");
}

TEST(PackingSampler, RowLayout) {
  const TokenDataset ds = numbered({3, 2, 4, 1});
  PackingSampler s(ds, 2, 6, /*shuffle=*/false, 0);
  Batch b;
  s.next(b);
  ASSERT_EQ(b.B, 2);
  ASSERT_EQ(b.T, 6);
  // Row 0: examples 0 and 1 (5 tokens); example 2 does not fit, so it starts row 1 with 3.
  EXPECT_EQ(b.input_ids, (Ids{1000, 1001, 1002, 2000, 2001, 0, 3000, 3001, 3002, 3003, 4000, 0}));
  EXPECT_EQ(b.doc_start, (Ids{0, 0, 0, 3, 3, 5, 0, 0, 0, 0, 4, 5}));
  EXPECT_EQ(b.positions, (Ids{0, 1, 2, 0, 1, 0, 0, 1, 2, 3, 0, 0}));
  // No target at an example's last token: nothing predicts the next example's first token.
  EXPECT_EQ(b.targets, (Ids{1001, 1002, X, 2001, X, X, 3001, 3002, 3003, X, X, X}));
  // Example 0 of epoch 1 was looked at and did not fit: the sampler stands at its start.
  EXPECT_EQ(s.state(), (SamplerState{1, 0}));
  s.next(b);
  EXPECT_EQ(b.input_ids[0], 1000);
}

TEST(PackingSampler, LongExampleGetsARowOfItsOwn) {
  const TokenDataset ds = numbered({2, 9, 2});
  PackingSampler s(ds, 3, 4, false, 0);
  Batch b;
  s.next(b);
  // Row 1 is example 1 cut to 4 tokens; row 2 ends epoch 0 and begins epoch 1.
  EXPECT_EQ(b.input_ids, (Ids{1000, 1001, 0, 0, 2000, 2001, 2002, 2003, 3000, 3001, 1000, 1001}));
  EXPECT_EQ(b.targets, (Ids{1001, X, X, X, 2001, 2002, 2003, X, 3001, X, 1001, X}));
  EXPECT_EQ(b.doc_start, (Ids{0, 0, 2, 2, 0, 0, 0, 0, 0, 0, 2, 2}));
  EXPECT_EQ(s.state(), (SamplerState{1, 1}));
}

// The documents of a batch, as (example index, length, row, column), from their first tokens.
struct Doc {
  int example, len, row, at;
};
std::vector<Doc> docs_of(const Batch& b) {
  std::vector<Doc> out;
  for (int r = 0; r < b.B; ++r) {
    for (int t = 0; t < b.T;) {
      const size_t i = static_cast<size_t>(r) * b.T + t;
      int end = t;
      while (end < b.T && b.doc_start[static_cast<size_t>(r) * b.T + end] == t) ++end;
      EXPECT_GT(end, t);
      if (b.input_ids[i] != 0) out.push_back({b.input_ids[i] / 1000 - 1, end - t, r, t});
      t = end;
    }
  }
  return out;
}

std::vector<int> random_lengths(size_t n, int max_len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> v(n);
  for (int& x : v) x = 1 + static_cast<int>(rng() % static_cast<uint32_t>(max_len));
  return v;
}

TEST(PackingSampler, GreedyNoSplitEveryExampleOncePerEpoch) {
  const std::vector<int> lengths = random_lengths(101, 12, 1);
  const TokenDataset ds = numbered(lengths);
  const int B = 3, T = 16;
  PackingSampler s(ds, B, T, /*shuffle=*/true, 42);
  std::vector<int> seen;  // examples of epoch 0, in packing order
  Batch b;
  while (s.epoch() == 0) {
    s.next(b);
    const std::vector<Doc> docs = docs_of(b);
    for (size_t k = 0; k < docs.size(); ++k) {
      const Doc& d = docs[k];
      ASSERT_EQ(d.len, lengths[static_cast<size_t>(d.example)]) << "split example";
      // Greedy: a row ends only when the next example would not fit in it.
      if (k + 1 < docs.size() && docs[k + 1].row != d.row) {
        EXPECT_GT(d.at + d.len + docs[k + 1].len, T);
      }
    }
    for (const Doc& d : docs) seen.push_back(d.example);
  }
  // The batch that crossed into epoch 1 also holds epoch-1 examples: keep epoch 0's share.
  const std::vector<size_t> order = epoch_permutation(lengths.size(), 42, 0);
  ASSERT_GE(seen.size(), order.size());
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(seen[i], static_cast<int>(order[i])) << i;
}

std::vector<Batch> draw(BatchSampler& s, int n) {
  std::vector<Batch> out(n);
  for (Batch& b : out) s.next(b);
  return out;
}

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].input_ids, b[i].input_ids) << i;
    EXPECT_EQ(a[i].targets, b[i].targets) << i;
    EXPECT_EQ(a[i].positions, b[i].positions) << i;
    EXPECT_EQ(a[i].doc_start, b[i].doc_start) << i;
  }
}

TEST(PackingSampler, DeterministicAndResumable) {
  const TokenDataset ds = numbered(random_lengths(37, 9, 2));
  PackingSampler a(ds, 2, 12, true, 7), b(ds, 2, 12, true, 7), other(ds, 2, 12, true, 8);
  const std::vector<Batch> ref = draw(a, 40);  // several epochs
  expect_same(ref, draw(b, 40));
  EXPECT_NE(ref[0].input_ids, draw(other, 1)[0].input_ids);
  EXPECT_GE(a.epoch(), 2u);

  for (int k : {0, 1, 5, 13, 27}) {
    PackingSampler first(ds, 2, 12, true, 7);
    draw(first, k);
    const SamplerState st = first.state();
    PackingSampler resumed(ds, 2, 12, true, 7);
    resumed.restore(st);
    EXPECT_EQ(resumed.state(), st);
    expect_same(std::vector<Batch>(ref.begin() + k, ref.end()), draw(resumed, 40 - k));
  }
  PackingSampler c(ds, 2, 12, true, 7);
  EXPECT_THROW(c.restore({0, 38}), Error);  // past the 37 examples of an epoch
}

// The group's micro-batch: every rank's documents in the group's row order (row g = b * W + r).
std::vector<int> group_docs(std::vector<PackingSampler>& ranks, int B) {
  const int W = static_cast<int>(ranks.size());
  std::vector<std::vector<std::vector<int>>> rows(W, std::vector<std::vector<int>>(B));
  for (int r = 0; r < W; ++r) {
    Batch b;
    ranks[r].next(b);
    for (const Doc& d : docs_of(b)) rows[r][d.row].push_back(d.example);
  }
  std::vector<int> out;
  for (int b = 0; b < B; ++b) {
    for (int r = 0; r < W; ++r) out.insert(out.end(), rows[r][b].begin(), rows[r][b].end());
  }
  return out;
}

// The ranks fill the group's rows in order from one shared order: together they take it front to
// back, each example once per epoch, and agree on where they are.
TEST(PackingSampler, RanksFillTheGroupsRowsInOrder) {
  const size_t n = 50;
  const TokenDataset ds = numbered(random_lengths(n, 6, 3));
  const int W = 3;
  const std::vector<size_t> order = epoch_permutation(n, 9, 0);
  std::vector<PackingSampler> ranks;
  for (int r = 0; r < W; ++r) ranks.emplace_back(ds, 2, 10, true, 9, r, W);
  std::vector<int> all;
  while (all.size() < n) {
    const std::vector<int> g = group_docs(ranks, 2);
    all.insert(all.end(), g.begin(), g.end());
    for (int r = 1; r < W; ++r) EXPECT_EQ(ranks[r].state(), ranks[0].state());
  }
  for (size_t k = 0; k < n; ++k) EXPECT_EQ(all[k], static_cast<int>(order[k])) << k;
  // Fewer examples than ranks: the rows go on into the next epoch.
  std::vector<PackingSampler> few;
  const TokenDataset two = numbered({1, 2});
  for (int r = 0; r < 3; ++r) few.emplace_back(two, 1, 4, false, 0, r, 3);
  // Rows of 4 tokens: [0 1 0] [1 0] [1 0], the examples alternating across epochs.
  EXPECT_EQ(group_docs(few, 1), (std::vector<int>{0, 1, 0, 1, 0, 1, 0}));
}

// Resumed on 1, 2, 4, then 1 rank, packing continues with the next example of the same order as
// an uninterrupted run (rows differ, since there are more of them in a group, examples do not).
TEST(PackingSampler, ResumeOnAnyWorldSizeContinuesTheOrder) {
  const size_t n = 41;
  const TokenDataset ds = numbered(random_lengths(n, 7, 4));
  const auto run = [&](int W, int steps, SamplerState st, std::vector<int>& seen) {
    std::vector<PackingSampler> ranks;
    for (int r = 0; r < W; ++r) {
      ranks.emplace_back(ds, 2, 12, true, 3, r, W);
      ranks.back().restore(st);
    }
    for (int i = 0; i < steps; ++i) {
      const std::vector<int> g = group_docs(ranks, 2);
      seen.insert(seen.end(), g.begin(), g.end());
    }
    return ranks[0].state();
  };
  std::vector<int> seen;
  SamplerState st = run(1, 3, {}, seen);
  st = run(2, 2, st, seen);
  st = run(4, 2, st, seen);
  st = run(1, 6, st, seen);
  std::vector<int> expected;
  for (uint64_t e = 0; expected.size() < seen.size(); ++e) {
    for (size_t i : epoch_permutation(n, 3, e)) expected.push_back(static_cast<int>(i));
  }
  expected.resize(seen.size());
  EXPECT_EQ(seen, expected);
  EXPECT_GE(st.epoch, 1u);
}

TEST(MakeSampler, FollowsDataPack) {
  const TokenDataset ds = numbered({2, 2, 2});
  Recipe r;
  r.data.seq_len = 4;
  r.train.micro_batch_size = 1;
  r.data.shuffle = false;
  Batch b;
  make_sampler(ds, r, 0, 1)->next(b);
  EXPECT_EQ(b.input_ids, (Ids{1000, 1001, 0, 0}));
  r.data.pack = true;
  make_sampler(ds, r, 0, 1)->next(b);
  EXPECT_EQ(b.input_ids, (Ids{1000, 1001, 2000, 2001}));
}

// ---- Packed vs one by one through the model ----

// Random examples over a vocabulary of 23 with some labels masked.
TokenDataset random_examples(const std::vector<int>& lengths, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Example> out;
  for (int len : lengths) {
    Example ex;
    for (int t = 0; t < len; ++t) {
      ex.input_ids.push_back(static_cast<int32_t>(rng() % 23));
      ex.labels.push_back(rng() % 4 == 0 ? X : ex.input_ids.back());
    }
    out.push_back(std::move(ex));
  }
  return TokenDataset::from_examples(std::move(out), "random");
}

// How close packed and one-by-one results are depends on the fp32 GEMM kernel OpenBLAS chose: the
// packed GEMMs have 36 rows, the one-by-one ones at most 7, and the kernels' edge tiles sum in
// another order. Under the AVX-512 kernels (SkylakeX, Cooperlake, SapphireRapids) they agree to
// 1e-5; the 8-wide AVX2 kernels (Haswell, Zen) differ by up to 3e-5 (measured on an AVX2-only
// EPYC, and here with OPENBLAS_CORETYPE=Haswell), so they are held to 1e-4.
double packing_tolerance() {
  const std::string core = blas_core_name();
  const bool avx512 = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
  return avx512 ? 1e-5 : 1e-4;
}

TEST(Packing, SameLossesAndGradientsAsOneByOne) {
  const double tol = packing_tolerance();
  SCOPED_TRACE("OpenBLAS core " + blas_core_name() + ", tolerance " + std::to_string(tol));
  Decoder model(small_config(), testing::cpu_fp32());
  const ParamLayout& layout = model.layout();
  ParamStore packed(layout, testing::cpu_fp32()), single(layout, testing::cpu_fp32());
  randomize(packed, layout, 11);
  randomize(single, layout, 11);
  const TokenDataset ds = random_examples({5, 3, 7, 2, 4, 6, 1}, 5);
  PackingSampler sampler(ds, /*B=*/3, /*T=*/12, /*shuffle=*/false, 0);
  Batch batch;
  sampler.next(batch);                               // rows: [5 3] [7 2] [4 6 1]
  ASSERT_EQ(sampler.state(), (SamplerState{1, 0}));  // all 7, nothing of epoch 1

  packed.zero_grads();
  const double packed_loss = model.forward_backward(batch, packed, 1.0f, false);
  single.zero_grads();
  double single_loss = 0;
  int64_t single_targets = 0;
  std::vector<double> alone(ds.size());
  for (size_t i = 0; i < ds.size(); ++i) {
    Batch b;
    b.resize(1, static_cast<int>(ds[i].input_ids.size()));
    fill_row(b, 0, ds[i]);
    alone[i] = model.forward_backward(b, single, 1.0f, false);
    single_loss += alone[i];
    single_targets += b.num_targets();
  }
  EXPECT_EQ(batch.num_targets(), single_targets);
  EXPECT_NEAR(packed_loss, single_loss, tol * std::abs(single_loss));
  for (int u = 0; u < layout.num_units(); ++u) {
    const size_t n = packed.grads(u).size();
    EXPECT_LT(testing::rel_err(packed.grads(u).data(), single.grads(u).data(), n), tol)
        << "unit " << u;
    for (size_t k = 0; k < n; ++k) {
      ASSERT_NEAR(packed.grads(u).data()[k], single.grads(u).data()[k],
                  tol * std::max(1.0f, std::abs(single.grads(u).data()[k])))
          << "unit " << u << " element " << k;
    }
  }

  // Each example's own loss inside the packed batch: keep only its targets.
  const std::vector<Doc> docs = [&] {
    // Map positions back to examples: rows are [0 1] [2 3] [4 5 6] by construction.
    return std::vector<Doc>{{0, 5, 0, 0}, {1, 3, 0, 5}, {2, 7, 1, 0}, {3, 2, 1, 7},
                            {4, 4, 2, 0}, {5, 6, 2, 4}, {6, 1, 2, 10}};
  }();
  for (const Doc& d : docs) {
    ASSERT_EQ(batch.doc_start[static_cast<size_t>(d.row) * 12 + d.at], d.at);
    Batch only = batch;
    for (size_t i = 0; i < only.targets.size(); ++i) {
      const int r = static_cast<int>(i / 12), t = static_cast<int>(i % 12);
      if (r != d.row || t < d.at || t >= d.at + d.len) only.targets[i] = X;
    }
    EXPECT_NEAR(model.forward(only, packed), alone[static_cast<size_t>(d.example)],
                tol * std::max(1.0, std::abs(alone[static_cast<size_t>(d.example)])))
        << "example " << d.example;
  }
}

}  // namespace
}  // namespace kiln
