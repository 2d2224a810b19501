// The CPU cross-entropy's chunks of rows (kernels/cpu/cross_entropy.cc) against an independent
// reference: rows spanning several chunks in one call give the loss, dx and dw of the same rows
// in calls of one chunk each (common/ce_in_calls.h), whose boundaries fall elsewhere. A row lost,
// repeated or misplaced at a chunk boundary changes the loss by about 1/400 and that row's dx
// and its target's dw entirely.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/ce_in_calls.h"
#include "common/test_backend.h"
#include "kernels/backend_parity.h"
#include "kiln/kernels/ops.h"

namespace kiln {
namespace {

TEST(CpuCrossEntropy, RowsOverSeveralChunksMatchSingleChunkCalls) {
  // V = 32,768: 256 rows per chunk (at least 256, 8 Mi logits); 400 of 450 rows targeted.
  const int N = 450, C = 8, V = 32768;
  std::vector<int32_t> targets(N);
  for (int n = 0; n < N; ++n) targets[n] = n % 9 == 4 ? kIgnoreIndex : (n * 7919 + 3) % V;
  const int R = rows_with_target(targets.data(), N);
  ASSERT_EQ(R, 400);
  const size_t chunk = ce_chunk_rows(R, V);
  ASSERT_LT(chunk, static_cast<size_t>(R)) << "the rows span several chunks";
  const auto x = parity::random_values(static_cast<size_t>(N) * C, 71, 2.0f);
  const auto w = parity::random_values(static_cast<size_t>(V) * C, 72, 0.5f);
  const float scale = 1.0f / static_cast<float>(R);
  const Backend& be = testing::cpu_fp32();

  double loss = 0;
  std::vector<float> dx(x.size(), 0.0f), dw(w.size(), 0.0f);
  be.cross_entropy(&loss, dx.data(), dw.data(), x.data(), w.data(), targets.data(), N, R, C, V,
                   scale);
  be.synchronize();
  // 100 targeted rows per call: boundaries at 100, 200, 300, none at 256.
  const testing::CeResult want =
      testing::cross_entropy_in_calls(be, x, w, targets, C, V, scale, 100);

  EXPECT_NEAR(loss, want.loss, 1e-6 * std::fabs(want.loss));
  EXPECT_LT(testing::max_rel_error(dx.data(), want.dx.data(), dx.size()), 1e-5);
  EXPECT_LT(testing::max_rel_error(dw.data(), want.dw.data(), dw.size()), 1e-5);
  // Every targeted row has its own gradient, the first of each chunk included.
  int targeted = 0;
  for (int n = 0; n < N; ++n) {
    if (targets[n] == kIgnoreIndex) continue;
    const bool first_of_chunk = targeted++ % chunk == 0;
    EXPECT_LT(testing::max_rel_error(dx.data() + static_cast<size_t>(n) * C,
                                     want.dx.data() + static_cast<size_t>(n) * C, C),
              1e-5)
        << "row " << n << (first_of_chunk ? " (first of its chunk)" : "");
  }
}

}  // namespace
}  // namespace kiln
