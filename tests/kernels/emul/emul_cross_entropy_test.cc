// The cross-entropy kernels under the CPU emulator, against the CPU backend: the fused LM head's
// compaction, gathers, softmax rows, scatter and loss sum (cross_entropy.cu), driven as
// cross_entropy.cc drives them around its three GEMMs (here host products in double: cuBLASLt has
// no emulation) over several chunks with padding rows, fp32 and bf16; and the split vocabulary's
// ce_part_* passes (cross_entropy_part.cu) over blocks whose edges the targets straddle.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/emul/emul_test_util.h"
#include "kiln/kernels/cuda/cross_entropy_kernels.h"

namespace kiln::emul {
namespace {

const Backend& cpu() { return parity::reference(); }

// targets (N): every fifth row ignored, the vocabulary's first and last ids included.
std::vector<int32_t> make_targets(int N, int V) {
  std::vector<int32_t> t(static_cast<size_t>(N));
  for (int n = 0; n < N; ++n) t[n] = n % 5 == 3 ? kIgnoreIndex : (n * 131 + 7) % V;
  t[0] = 0;
  t[1] = V - 1;
  return t;
}

// 2500 targets (three 1024-row tiles of the one-block scan), padded past the targeted rows; and a
// `padded` below the count (a caller that miscounted): the rows stop there, nothing overflows.
TEST(EmulCrossEntropy, CompactionOverSeveralTiles) {
  constexpr int N = 2500;
  const std::vector<int32_t> targets = make_targets(N, 1000);
  std::vector<int32_t> want;
  for (int n = 0; n < N; ++n) {
    if (targets[n] != kIgnoreIndex) want.push_back(n);
  }
  const int targeted = static_cast<int>(want.size());
  DeviceArray<int32_t> dt(targets, "targets");
  for (const int padded : {targeted + 13, targeted - 5}) {
    DeviceArray<int32_t> rows(static_cast<size_t>(padded), "rows");
    emul_cuda::ce_compact_rows(rows.get(), dt.get(), N, padded, nullptr);
    expect_no_fault();
    std::vector<int32_t> w = want;
    w.resize(static_cast<size_t>(padded), -1);
    EXPECT_EQ(rows.host(), w) << "padded " << padded;
  }
}

// C (M, N) (+)= op(A) op(B) on the host in double, row-major: op(A) (M, K), op(B) (K, N).
void host_gemm(float* c, const std::vector<float>& a, bool ta, const std::vector<float>& b, bool tb,
               int M, int N, int K, bool accumulate) {
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      double s = accumulate ? c[static_cast<size_t>(i) * N + j] : 0.0;
      for (int k = 0; k < K; ++k) {
        const double x = ta ? a[static_cast<size_t>(k) * M + i] : a[static_cast<size_t>(i) * K + k];
        const double y = tb ? b[static_cast<size_t>(j) * K + k] : b[static_cast<size_t>(k) * N + j];
        s += x * y;
      }
      c[static_cast<size_t>(i) * N + j] = static_cast<float>(s);
    }
  }
}

std::vector<float> as_floats(const DeviceArray<float>& f, const DeviceArray<uint16_t>& h, bool bf16,
                             size_t n) {
  if (!bf16) return std::vector<float>(f.get(), f.get() + n);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(h.get()[i]);
  return out;
}

struct FusedResult {
  double loss = 0;
  std::vector<float> dx, dw;
};

// cross_entropy.cc's chunk loop with chunks of `chunk` rows: the kernels emulated, the products
// on the host from what the kernels wrote (bf16 data as its values).
FusedResult run_fused(const std::vector<float>& x, const std::vector<float>& w,
                      const std::vector<int32_t>& targets, int N, int C, int V, float scale,
                      bool bf16, int chunk) {
  const int targeted = rows_with_target(targets.data(), N);
  const int chunks = (targeted + chunk - 1) / chunk, padded = chunks * chunk;
  DeviceArray<float> dx_in(x, "x"), dx(static_cast<size_t>(N) * C, "dx");
  DeviceArray<int32_t> dt(targets, "targets"), rows(static_cast<size_t>(padded), "rows");
  DeviceArray<double> row_loss(static_cast<size_t>(padded), "row_loss");
  DeviceArray<double> loss(std::vector<double>{0.0}, "loss_sum");
  DeviceArray<float> xr(static_cast<size_t>(chunk) * C, "xr"),
      dxr(static_cast<size_t>(chunk) * C, "dxr");
  DeviceArray<uint16_t> xr16(static_cast<size_t>(chunk) * C, "xr bf16");
  DeviceArray<float> logits(static_cast<size_t>(chunk) * V, "logits");
  DeviceArray<uint16_t> dlogits16(static_cast<size_t>(chunk) * V, "dlogits bf16");
  std::memset(dx.get(), 0, sizeof(float) * N * C);  // cross_entropy.cc's cudaMemsetAsync
  std::vector<float> dw(w.size(), 0.0f);
  const std::vector<float>& wv = w;  // bf16 values: the same under fp32 and bf16 products
  emul_cuda::ce_compact_rows(rows.get(), dt.get(), N, padded, nullptr);
  for (int c = 0; c < chunks; ++c) {
    const int32_t* r = rows.get() + static_cast<size_t>(c) * chunk;
    double* rl = row_loss.get() + static_cast<size_t>(c) * chunk;
    if (bf16) {
      emul_cuda::ce_gather_rows_bf16(xr16.get(), dx_in.get(), r, chunk, C, nullptr);
    } else {
      emul_cuda::ce_gather_rows_f32(xr.get(), dx_in.get(), r, chunk, C, nullptr);
    }
    const std::vector<float> xs = as_floats(xr, xr16, bf16, static_cast<size_t>(chunk) * C);
    host_gemm(logits.get(), xs, false, wv, true, chunk, V, C, false);  // logits = xr w^T
    if (bf16) {
      emul_cuda::ce_softmax_grad_rows_bf16(rl, dlogits16.get(), logits.get(), dt.get(), r, chunk, V,
                                           scale, nullptr);
    } else {
      emul_cuda::ce_softmax_grad_rows_f32(rl, logits.get(), logits.get(), dt.get(), r, chunk, V,
                                          scale, nullptr);
    }
    const std::vector<float> dl =
        as_floats(logits, dlogits16, bf16, static_cast<size_t>(chunk) * V);
    host_gemm(dxr.get(), dl, false, wv, false, chunk, C, V, false);  // dxr = dlogits w
    emul_cuda::ce_scatter_rows(dx.get(), dxr.get(), r, chunk, C, nullptr);
    host_gemm(dw.data(), dl, true, xs, false, V, C, chunk, true);  // dw += dlogits^T xr
  }
  emul_cuda::ce_add_loss_sum(loss.get(), row_loss.get(), padded, nullptr);
  return {loss.get()[0], dx.host(), dw};
}

// 50 rows (40 with targets) in chunks of 16: three chunks, the last with 8 padding rows.
TEST(EmulCrossEntropy, FusedChunksFp32AndBf16) {
  constexpr int N = 50, C = 48, V = 1000, kChunk = 16;
  const float scale = 1.0f / 40;
  const std::vector<float> x = random_values(static_cast<size_t>(N) * C, 1);
  const std::vector<float> w = random_values(static_cast<size_t>(V) * C, 2, 0.5f);
  const std::vector<int32_t> targets = make_targets(N, V);
  const int targeted = rows_with_target(targets.data(), N);
  ASSERT_EQ(targeted, 40);
  std::vector<double> want_loss{0.0};
  std::vector<float> want_dx(x.size()), want_dw(w.size(), 0.0f);
  cpu().cross_entropy(want_loss.data(), want_dx.data(), want_dw.data(), x.data(), w.data(),
                      targets.data(), N, targeted, C, V, scale);
  for (const bool bf16 : {false, true}) {
    // Under bf16 the products read x rounded to bf16, as the kernels gather it.
    const FusedResult got = run_fused(x, w, targets, N, C, V, scale, bf16, kChunk);
    expect_no_fault();
    const std::string name = bf16 ? "cross_entropy bf16" : "cross_entropy fp32";
    const double tol = bf16 ? kProductBf16 : kProductFp32;
    expect_close(name + " loss", std::vector<double>{got.loss}, want_loss, tol);
    expect_close(name + " dx", got.dx, want_dx, tol);
    expect_close(name + " dw", got.dw, want_dw, tol);
  }
}

// The forward alone (evaluation): losses only, one chunk of all rows.
TEST(EmulCrossEntropy, LossOnlyRows) {
  constexpr int N = 20, C = 32, V = 700;
  const std::vector<float> x = random_values(static_cast<size_t>(N) * C, 3);
  const std::vector<float> w = random_values(static_cast<size_t>(V) * C, 4, 0.5f);
  const std::vector<int32_t> targets = make_targets(N, V);
  const int targeted = rows_with_target(targets.data(), N);
  std::vector<double> want{0.0};
  cpu().cross_entropy(want.data(), nullptr, nullptr, x.data(), w.data(), targets.data(), N,
                      targeted, C, V, 1.0f);
  DeviceArray<float> dx_in(x, "x"), logits(static_cast<size_t>(targeted) * V, "logits");
  DeviceArray<int32_t> dt(targets, "targets"), rows(static_cast<size_t>(targeted), "rows");
  DeviceArray<float> xr(static_cast<size_t>(targeted) * C, "xr");
  DeviceArray<double> row_loss(static_cast<size_t>(targeted), "row_loss");
  DeviceArray<double> loss(std::vector<double>{0.0}, "loss_sum");
  emul_cuda::ce_compact_rows(rows.get(), dt.get(), N, targeted, nullptr);
  emul_cuda::ce_gather_rows_f32(xr.get(), dx_in.get(), rows.get(), targeted, C, nullptr);
  host_gemm(logits.get(), xr.host(), false, w, true, targeted, V, C, false);
  emul_cuda::ce_softmax_rows(row_loss.get(), logits.get(), dt.get(), rows.get(), targeted, V,
                             nullptr);
  emul_cuda::ce_add_loss_sum(loss.get(), row_loss.get(), targeted, nullptr);
  expect_no_fault();
  expect_close("cross_entropy loss only", loss.host(), want, kProductFp32);
}

// A vocabulary of 1000 in blocks [0, 300), [300, 700), [700, 1000) of logits rows 1003 floats
// apart; targets on every block edge and ignored rows. The three passes in the order
// the vocabulary-parallel loss (model/vocab_parallel_loss.cc) runs them, the loss over rows [3,
// 17).
TEST(EmulCrossEntropy, SplitVocabularyPasses) {
  constexpr int n = 20, V = 1000, ld = 1003;
  const int edges[] = {0, 300, 700, V};
  const std::vector<float> logits = random_values(static_cast<size_t>(n) * ld, 5, 3.0f);
  std::vector<int32_t> targets(n);
  const int32_t picks[] = {0, 299, 300, 699, 700, 999, kIgnoreIndex, 1, 350, 998};
  for (int i = 0; i < n; ++i) targets[i] = picks[i % 10];
  std::vector<float> want_lg = logits, want_max(n), want_sums(2 * n, 0.0f);
  std::vector<double> want_loss{0.0};
  DeviceArray<float> lg(logits, "logits"), row_max(n, "row_max");
  DeviceArray<float> sums(std::vector<float>(2 * n, 0.0f), "sums");
  DeviceArray<int32_t> dt(targets, "targets");
  DeviceArray<double> loss(std::vector<double>{0.0}, "loss_sum");
  for (int b = 0; b < 3; ++b) {
    const int v0 = edges[b], m = edges[b + 1] - edges[b];
    cpu().ce_part_max(want_max.data(), want_lg.data() + v0, n, m, ld, b > 0);
    emul_cuda::ce_part_max(row_max.get(), lg.get() + v0, n, m, ld, b > 0, nullptr);
  }
  for (int b = 0; b < 3; ++b) {
    const int v0 = edges[b], m = edges[b + 1] - edges[b];
    cpu().ce_part_sumexp(want_sums.data(), want_lg.data() + v0, want_max.data(), targets.data(), v0,
                         n, m, ld);
    emul_cuda::ce_part_sumexp(sums.get(), lg.get() + v0, row_max.get(), dt.get(), v0, n, m, ld,
                              nullptr);
  }
  std::vector<float> want_row_loss(n);
  DeviceArray<float> row_loss(n, "row_loss");
  cpu().ce_part_row_loss(want_row_loss.data(), want_max.data(), want_sums.data(), targets.data(),
                         n);
  emul_cuda::ce_part_row_loss(row_loss.get(), row_max.get(), sums.get(), dt.get(), n, nullptr);
  // Every row's gradient weighted (the preference head's pass), the middle block's only.
  const std::vector<float> weights = random_values(static_cast<size_t>(n), 6, 2.0f);
  DeviceArray<float> dw(weights, "row_weight");
  for (int b = 0; b < 3; ++b) {
    const int v0 = edges[b], m = edges[b + 1] - edges[b];
    double* ls = b == 1 ? loss.get() : nullptr;  // one block adds the loss
    const float* w = b == 1 ? weights.data() : nullptr;
    cpu().ce_part_grad(want_lg.data() + v0, b == 1 ? want_loss.data() : nullptr, want_max.data(),
                       want_sums.data(), targets.data(), v0, n, m, ld, 0.25f, w, 3, 17);
    emul_cuda::ce_part_grad(lg.get() + v0, ls, row_max.get(), sums.get(), dt.get(), v0, n, m, ld,
                            0.25f, b == 1 ? dw.get() : nullptr, 3, 17, nullptr);
  }
  expect_no_fault();
  expect_close("ce_part_max", row_max.host(), want_max, kElementwise);
  expect_close("ce_part_sumexp", sums.host(), want_sums, kElementwise);
  expect_close("ce_part_row_loss", row_loss.host(), want_row_loss, kElementwise);
  expect_close("ce_part_grad", lg.host(), want_lg, kElementwise);
  expect_close("ce_part_grad loss", loss.host(), want_loss, kElementwise);
}

// The preference ops (preference_loss.cu) against the CPU's: three pairs of 5-row sequences
// (one pair with an empty rejected completion, not counted), every loss type, the sums of a
// range of pairs and every row's weight.
TEST(EmulCrossEntropy, PreferenceLossMatchesTheCpu) {
  constexpr int S = 6, T = 5;
  std::vector<float> row_loss = random_values(static_cast<size_t>(S) * T, 7, 1.0f);
  for (float& v : row_loss) v = std::fabs(v) + 0.1f;
  std::vector<int32_t> targets(static_cast<size_t>(S) * T, 3);
  for (int s = 0; s < S; ++s) targets[static_cast<size_t>(s) * T] = kIgnoreIndex;  // the prompt
  for (int t = 0; t < T; ++t) targets[static_cast<size_t>(5) * T + t] = kIgnoreIndex;
  const std::vector<double> ref_seq = {-3.0, 4, -2.5, 4, -1.0, 4, -4.0, 4, -2.0, 4, 0.0, 0};
  DeviceArray<float> dl(row_loss, "row_loss");
  DeviceArray<int32_t> dt(targets, "targets");
  DeviceArray<double> dref(ref_seq, "ref_seq");
  // Ranges of unequal lengths with rows of none between them (packed rows' documents).
  const std::vector<int32_t> bounds = {0, 5, 5, 9, 10, 15, 16, 20, 20, 25, 26, 30};
  DeviceArray<int32_t> db(bounds, "bounds");
  std::vector<double> want_seq(2 * S, 0.0);
  DeviceArray<double> seq(std::vector<double>(2 * S, 0.0), "seq");
  cpu().sequence_logps(want_seq.data(), row_loss.data(), targets.data(), bounds.data(), S);
  emul_cuda::sequence_logps(seq.get(), dl.get(), dt.get(), db.get(), S, nullptr);
  expect_no_fault();
  expect_close("sequence_logps", seq.host(), want_seq, kElementwise);
  for (const PreferenceLossType type : {PreferenceLossType::kSigmoid, PreferenceLossType::kIpo,
                                        PreferenceLossType::kHinge, PreferenceLossType::kSimpo}) {
    const PreferenceTerms terms{type, 0.5, 0.1, 0.3, 0.25};
    std::vector<float> want_w(static_cast<size_t>(S) * T, 0.0f);
    std::vector<double> want_sums(kNumPreferenceSums, 0.0);
    cpu().preference_loss(want_w.data(), want_sums.data(), want_seq.data(), ref_seq.data(),
                          bounds.data(), S, terms, 0, 3);
    DeviceArray<float> w(std::vector<float>(static_cast<size_t>(S) * T, 0.0f), "row_weight");
    DeviceArray<double> sums(std::vector<double>(kNumPreferenceSums, 0.0), "sums");
    emul_cuda::preference_loss(w.get(), sums.get(), seq.get(), dref.get(), db.get(), S, terms, 0, 3,
                               nullptr);
    expect_no_fault();
    expect_close("preference_loss row_weight", w.host(), want_w, kElementwise);
    expect_close("preference_loss sums", sums.host(), want_sums, kElementwise);
    EXPECT_EQ(want_sums[kPrefPairs], 2.0);
  }
}

}  // namespace
}  // namespace kiln::emul
