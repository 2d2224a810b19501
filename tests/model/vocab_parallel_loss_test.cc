// The vocabulary-parallel head (model/vocab_parallel_loss.cc) at two ranks, over more of the
// group's rows than one chunk of logits, against an independent reference: the whole table's
// cross-entropy of the same rows in calls of one chunk each (common/ce_in_calls.h). Each rank's
// loss, dx and gradient rows must be the reference's share; a row lost or misplaced at a chunk
// boundary changes all three.
#include "kiln/model/vocab_parallel_loss.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/ce_in_calls.h"
#include "common/split_rows.h"
#include "common/test_backend.h"

namespace kiln {
namespace {

TEST(VocabParallelLoss, RowsOverSeveralChunksMatchSingleChunkCalls) {
  // Two ranks of 300 rows each over a table of 32,768 rows (16,384 per rank): 512 rows of
  // logits per chunk, so the group's 600 rows are two chunks, the second starting at rank 1's
  // row 212.
  const int S = 2, N = 300, C = 8, V = 32768, span = (V + S - 1) / S;
  const int Nt = S * N;
  const int chunk = static_cast<int>(vocab_loss_logit_rows(Nt, span));
  ASSERT_LT(chunk, Nt) << "the group's rows span several chunks";
  std::vector<int32_t> targets(Nt);
  for (int i = 0; i < Nt; ++i) {
    // Every first row of a chunk is targeted; some others are ignored.
    const bool ignored = i % 7 == 3 && i % chunk != 0;
    targets[i] = ignored ? kIgnoreIndex : static_cast<int32_t>((i * 7919 + 11) % V);
  }
  const auto x = testing::lcg_values(static_cast<size_t>(Nt) * C, 81, 2.0f);
  const auto w = testing::lcg_values(static_cast<size_t>(V) * C, 82, 0.5f);
  const float scale = 1.0f / static_cast<float>(rows_with_target(targets.data(), Nt));
  const Backend& be = testing::cpu_fp32();
  // 150 targeted rows per call: no call boundary at 512.
  const testing::CeResult want =
      testing::cross_entropy_in_calls(be, x, w, targets, C, V, scale, 150);

  std::vector<double> losses(S, 0.0);
  testing::on_split_table(be, w, V, C, S, [&](int r, const ShardedTable& t) {
    const size_t x0 = static_cast<size_t>(r) * N * C;
    const int32_t* tr = targets.data() + static_cast<size_t>(r) * N;
    std::vector<float> dx(static_cast<size_t>(N) * C, 0.0f);
    head_loss(be, t, &losses[r], dx.data(), x.data() + x0, tr, N, rows_with_target(tr, N), C, V,
              scale);
    be.synchronize();
    const std::string what = "rank " + std::to_string(r);
    EXPECT_LT(testing::max_rel_error(dx.data(), want.dx.data() + x0, dx.size()), 1e-5) << what;
    for (int n = 0; n < N; ++n) {
      const size_t at = static_cast<size_t>(n) * C;
      EXPECT_LT(testing::max_rel_error(dx.data() + at, want.dx.data() + x0 + at, C), 1e-5)
          << what << " row " << n << " (group row " << r * N + n << ")";
    }
    EXPECT_LT(testing::max_rel_error(t.grad, want.dw.data() + static_cast<size_t>(t.a) * C,
                                     static_cast<size_t>(t.b - t.a) * C),
              1e-5)
        << what << " gradient rows [" << t.a << ", " << t.b << ")";
  });
  EXPECT_NEAR(losses[0] + losses[1], want.loss, 1e-6 * std::fabs(want.loss));
}

}  // namespace
}  // namespace kiln
