// The preference head (model/preference_head.h): split along the vocabulary over 2 and 3 ranks it
// must give every rank the whole table's share (its pairs' sums, its rows' dx, its gradient
// rows), over more rows than one chunk of logits, in one pass or two; its dx must be the loss's
// derivative (central differences), for every loss type; and every one-pass path must give what
// the two passes give.
#include "kiln/model/preference_head.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "common/ce_in_calls.h"
#include "common/fresh_scratch.h"
#include "common/split_rows.h"
#include "common/test_backend.h"
#include "kiln/model/vocab_parallel_loss.h"

namespace kiln {
namespace {

// Rows of B sequences of T: each sequence's first `prompt` positions (varying) take no loss,
// one sequence of every third pair has no target (its pair is not counted).
std::vector<int32_t> pair_targets(int B, int T, int V, int seed) {
  std::vector<int32_t> t(static_cast<size_t>(B) * T, kIgnoreIndex);
  for (int s = 0; s < B; ++s) {
    if (s % 6 == 5) continue;
    const int prompt = 1 + (s * 3 + seed) % (T - 2);
    for (int i = prompt; i < T - 1; ++i) {
      t[static_cast<size_t>(s) * T + i] = static_cast<int32_t>((s * 7919 + i * 131 + seed) % V);
    }
  }
  return t;
}

// The reference's (logp, length) of B sequences.
std::vector<double> reference_sums(const std::vector<int32_t>& targets, int B, int T) {
  std::vector<double> r(2 * static_cast<size_t>(B));
  for (int s = 0; s < B; ++s) {
    double n = 0;
    for (int i = 0; i < T; ++i) n += targets[static_cast<size_t>(s) * T + i] != kIgnoreIndex;
    r[2 * s] = -1.5 * n - 0.25 * s;
    r[2 * s + 1] = n;
  }
  return r;
}

// A batch's rows with a target compacted as Decoder::upload stages them (preference_head.h's
// TargetRows; the CPU backend's device memory is host memory).
struct Compacted {
  std::vector<int32_t> index, targets, bounds;
  std::vector<int> per_sequence;
  int count = 0;
  Compacted(std::span<const int32_t> t, int T)
      : index(t.size()), targets(t.size()), bounds(2 * t.size() / T), per_sequence(t.size() / T) {
    count = compact_target_rows(t, T, index.data(), targets.data(), per_sequence);
    row_sequence_bounds(static_cast<int>(t.size() / T), T, bounds.data());
  }
  // Without the sequences' counts, a whole table with a gradient takes the two passes.
  TargetRows rows(bool counts = true) const {
    return {index.data(), targets.data(), count, bounds.data(),
            counts ? std::span<const int>(per_sequence) : std::span<const int>()};
  }
};

// The head's paths over a whole table: a table with a gradient in chunks of whole pairs (one
// pass) or in two passes, a frozen table (one pass, scale_rows).
enum class HeadPath { kPairChunks, kTwoPasses, kFrozen };

struct HeadOut {
  std::vector<double> sums = std::vector<double>(kNumPreferenceSums, 0.0);
  std::vector<float> dx, grad;
};

HeadOut whole_table_head(const Backend& be, const std::vector<float>& x,
                         const std::vector<float>& w, const std::vector<int32_t>& targets,
                         const std::vector<double>& ref, int B, int T, int C, int V,
                         const PreferenceTerms& terms, HeadPath path = HeadPath::kPairChunks) {
  HeadOut o;
  const bool frozen = path == HeadPath::kFrozen;
  o.dx.assign(x.size(), 0.0f);
  o.grad.assign(frozen ? 0 : w.size(), 0.0f);
  ShardedTable t = whole_table(w.data(), frozen ? nullptr : o.grad.data(), V);
  testing::FreshScratch scratch(be);
  t.scratch = &scratch;
  const Compacted compacted(targets, T);
  preference_head_loss(be, t, {terms, ref.data(), o.sums.data()}, o.dx.data(), x.data(),
                       targets.data(), compacted.rows(path != HeadPath::kTwoPasses), B, T, C, V);
  be.synchronize();
  return o;
}

// (ranks, T): at T = 50 every pair's rows fit one chunk of logits (the one pass over chunks of
// whole pairs), at T = 200 some pairs' do not (the two passes).
class PreferenceHeadSplit : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(PreferenceHeadSplit, EveryRankGetsTheWholeTablesShare) {
  const auto [S, T] = GetParam();
  const int B = 6, C = 8, V = 65536;
  const int span = (V + S - 1) / S, N = B * T;
  ASSERT_LT(static_cast<int>(vocab_loss_logit_rows(static_cast<size_t>(S) * N, span)), S * N)
      << "the group's rows span several chunks";
  const auto x = testing::lcg_values(static_cast<size_t>(S) * N * C, 91, 2.0f);
  const auto w = testing::lcg_values(static_cast<size_t>(V) * C, 92, 0.5f);
  const auto targets = pair_targets(S * B, T, V, 3);
  const auto ref = reference_sums(targets, S * B, T);
  const PreferenceTerms terms{PreferenceLossType::kSigmoid, 0.3, 0.1, 0.5, 1.0 / (S * B / 2)};
  const Backend& be = testing::cpu_fp32();
  const HeadOut want = whole_table_head(be, x, w, targets, ref, S * B, T, C, V, terms);
  {  // the whole table's chunks of whole pairs (several here) against its two passes (float
     // logits: other chunk bounds round the rows' losses otherwise)
    const HeadOut two =
        whole_table_head(be, x, w, targets, ref, S * B, T, C, V, terms, HeadPath::kTwoPasses);
    EXPECT_LT(testing::max_rel_error(want.dx.data(), two.dx.data(), two.dx.size()), 1e-5);
    EXPECT_LT(testing::max_rel_error(want.grad.data(), two.grad.data(), two.grad.size()), 1e-5);
    EXPECT_NEAR(want.sums[kPrefLoss], two.sums[kPrefLoss], 1e-7 * std::fabs(two.sums[kPrefLoss]));
  }

  std::vector<std::vector<double>> sums(S, std::vector<double>(kNumPreferenceSums, 0.0));
  testing::on_split_table(be, w, V, C, S, [&](int r, const ShardedTable& t) {
    const size_t x0 = static_cast<size_t>(r) * N * C;
    std::vector<float> dx(static_cast<size_t>(N) * C, 0.0f);
    const std::span<const int32_t> mine(targets.data() + static_cast<size_t>(r) * N, N);
    preference_head_loss(be, t, {terms, ref.data() + 2 * B * r, sums[r].data()}, dx.data(),
                         x.data() + x0, mine.data(), Compacted(mine, T).rows(), B, T, C, V);
    be.synchronize();
    const std::string what = "rank " + std::to_string(r);
    EXPECT_LT(testing::max_rel_error(dx.data(), want.dx.data() + x0, dx.size()), 1e-4) << what;
    EXPECT_LT(testing::max_rel_error(t.grad, want.grad.data() + static_cast<size_t>(t.a) * C,
                                     static_cast<size_t>(t.b - t.a) * C),
              1e-4)
        << what;
  });
  for (int k = 0; k < kNumPreferenceSums; ++k) {
    double total = 0;
    for (int r = 0; r < S; ++r) total += sums[r][k];
    EXPECT_NEAR(total, want.sums[k], 1e-6 * std::max(1.0, std::fabs(want.sums[k]))) << k;
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndLengths, PreferenceHeadSplit,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values(50, 200)));

// dx against central differences of the loss sum, in double where the head is float: a loss of a
// few units over few rows, steps of 1e-2; each one-pass path against the two passes.
class PreferenceHeadGradient : public ::testing::TestWithParam<PreferenceLossType> {};

TEST_P(PreferenceHeadGradient, DxIsTheLossDerivative) {
  const int B = 4, T = 6, C = 5, V = 11;
  auto x = testing::lcg_values(static_cast<size_t>(B) * T * C, 7, 1.0f);
  const auto w = testing::lcg_values(static_cast<size_t>(V) * C, 8, 1.0f);
  std::vector<int32_t> targets(static_cast<size_t>(B) * T, kIgnoreIndex);
  for (int s = 0; s < B; ++s) {
    for (int i = 1 + s % 2; i < T - 1; ++i) targets[s * T + i] = (s * 5 + i * 3) % V;
  }
  const auto ref = reference_sums(targets, B, T);
  const PreferenceTerms terms{GetParam(), 0.5, 0.2, 0.3, 1.0};
  const Backend& be = testing::cpu_fp32();
  const HeadOut at = whole_table_head(be, x, w, targets, ref, B, T, C, V, terms);
  // Every one-pass path gives the same loss, metrics, dx and table gradient as the two passes.
  const HeadOut two =
      whole_table_head(be, x, w, targets, ref, B, T, C, V, terms, HeadPath::kTwoPasses);
  const HeadOut frozen =
      whole_table_head(be, x, w, targets, ref, B, T, C, V, terms, HeadPath::kFrozen);
  for (const HeadOut* one : {&at, &frozen}) {
    for (int k = 0; k < kNumPreferenceSums; ++k) {
      EXPECT_NEAR(one->sums[k], two.sums[k], 1e-9 * std::max(1.0, std::fabs(two.sums[k]))) << k;
    }
    EXPECT_LT(testing::max_rel_error(one->dx.data(), two.dx.data(), two.dx.size()), 1e-5);
  }
  EXPECT_LT(testing::max_rel_error(at.grad.data(), two.grad.data(), two.grad.size()), 1e-5);
  const float h = 1e-2f;
  for (size_t i = 0; i < x.size(); i += 3) {
    const float x0 = x[i];
    x[i] = x0 + h;
    const double up = whole_table_head(be, x, w, targets, ref, B, T, C, V, terms).sums[kPrefLoss];
    x[i] = x0 - h;
    const double down = whole_table_head(be, x, w, targets, ref, B, T, C, V, terms).sums[kPrefLoss];
    x[i] = x0;
    EXPECT_NEAR(at.dx[i], (up - down) / (2 * h), 2e-3) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, PreferenceHeadGradient,
                         ::testing::Values(PreferenceLossType::kSigmoid, PreferenceLossType::kIpo,
                                           PreferenceLossType::kHinge, PreferenceLossType::kSimpo));

}  // namespace
}  // namespace kiln
