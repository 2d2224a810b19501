// Every CPU op's backward against finite differences of its forward; the dropout mask's
// properties.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/grad_check.h"
#include "common/host_backend.h"
#include "kiln/base/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/kernels/dropout_mask.h"
#include "kiln/kernels/ops.h"

namespace kiln {
namespace {

using testing::dot;
using testing::fd_rel_error;
using testing::random_vec;

const Backend& be() {
  static const CpuBackend b;
  return b;
}
constexpr double kTol = 2e-3;

TEST(OpsGrad, Embedding) {
  const int N = 7, C = 5, V = 4;
  std::vector<int32_t> ids = {0, 3, 3, 1, 0, 2, 3};
  auto w = random_vec(V * C, 1);
  auto r = random_vec(N * C, 2);
  std::vector<float> out(N * C), dw(V * C, 0.0f);
  auto loss = [&] {
    be().embedding_forward(out.data(), ids.data(), w.data(), N, C);
    return dot(out.data(), r);
  };
  be().embedding_backward(dw.data(), r.data(), ids.data(), N, C);
  EXPECT_LT(fd_rel_error(loss, w.data(), dw.data(), w.size()), kTol);
}

TEST(OpsGrad, RmsNorm) {
  const int N = 6, C = 16;
  auto x = random_vec(N * C, 1, 1.0f, 0.3f);
  auto w = random_vec(C, 2, 0.1f, 1.0f);
  auto r = random_vec(N * C, 3);
  std::vector<float> out(N * C), rstd(N), dx(N * C, 0.5f), dw(C, 0.0f);
  auto loss = [&] {
    be().rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
    return dot(out.data(), r);
  };
  loss();
  be().rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), N, C,
                        false);
  EXPECT_LT(fd_rel_error(loss, x.data(), dx.data(), x.size()), kTol);
  EXPECT_LT(fd_rel_error(loss, w.data(), dw.data(), w.size()), kTol);
  // accumulate adds onto what is there
  std::vector<float> dx2(N * C, 1.0f), dw2(C, 0.0f);
  be().rmsnorm_backward(dx2.data(), dw2.data(), r.data(), x.data(), w.data(), rstd.data(), N, C,
                        true);
  for (int i = 0; i < N * C; ++i) EXPECT_NEAR(dx2[i], dx[i] + 1.0f, 1e-5f);
}

// Qwen3's q/k norms are rmsnorm over the (tokens * heads, head_dim) view with one weight of
// head_dim for every head: the weight's gradient sums over every row. head_dim 64 and 128, 48
// rows (6 tokens x 8 heads).
TEST(OpsGrad, RmsNormPerHead) {
  for (const int D : {64, 128}) {
    const int rows = 6 * 8;
    auto x = random_vec(static_cast<size_t>(rows) * D, 4, 1.0f, 0.2f);
    auto w = random_vec(D, 5, 0.1f, 1.0f);
    auto r = random_vec(x.size(), 6);
    std::vector<float> out(x.size()), rstd(rows), dx(x.size()), dw(D, 0.0f);
    auto loss = [&] {
      be().rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), rows, D, 1e-6f);
      return dot(out.data(), r);
    };
    loss();
    be().rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), rows, D,
                          false);
    EXPECT_LT(fd_rel_error(loss, x.data(), dx.data(), x.size()), kTol) << D;
    EXPECT_LT(fd_rel_error(loss, w.data(), dw.data(), w.size()), kTol) << D;
  }
}

// The fused residual add + RMSNorm: forward equals add then rmsnorm_forward (also when sum aliases
// a), and its gradient (the residual's d(sum) plus RMSNorm's backward at x = sum) matches finite
// differences for a, b and w.
TEST(OpsGrad, AddRmsNorm) {
  const int N = 6, C = 40;
  auto a = random_vec(N * C, 11, 1.0f, 0.3f);
  auto b = random_vec(N * C, 12, 0.5f);
  auto w = random_vec(C, 13, 0.1f, 1.0f);
  auto r = random_vec(N * C, 14);
  auto r2 = random_vec(N * C, 15);
  std::vector<float> sum(N * C), out(N * C), rstd(N);
  auto loss = [&] {
    be().add_rmsnorm_forward(sum.data(), out.data(), rstd.data(), a.data(), b.data(), w.data(), N,
                             C, 1e-5f);
    return dot(out.data(), r) + dot(sum.data(), r2);
  };
  loss();
  std::vector<float> ref_sum(N * C), ref_out(N * C), ref_rstd(N);
  be().add(ref_sum.data(), a.data(), b.data(), ref_sum.size());
  be().rmsnorm_forward(ref_out.data(), ref_rstd.data(), ref_sum.data(), w.data(), N, C, 1e-5f);
  for (int i = 0; i < N * C; ++i) {
    EXPECT_EQ(sum[i], ref_sum[i]);
    EXPECT_EQ(out[i], ref_out[i]);
  }
  for (int n = 0; n < N; ++n) EXPECT_EQ(rstd[n], ref_rstd[n]);
  std::vector<float> in_place = a, out2(N * C), rstd2(N);
  be().add_rmsnorm_forward(in_place.data(), out2.data(), rstd2.data(), in_place.data(), b.data(),
                           w.data(), N, C, 1e-5f);
  for (int i = 0; i < N * C; ++i) EXPECT_EQ(in_place[i], ref_sum[i]);
  // d(sum) = r2 + rmsnorm backward of r; d(a) = d(b) = d(sum)
  std::vector<float> dsum = r2, dw(C, 0.0f);
  be().rmsnorm_backward(dsum.data(), dw.data(), r.data(), sum.data(), w.data(), rstd.data(), N, C,
                        true);
  EXPECT_LT(fd_rel_error(loss, a.data(), dsum.data(), a.size()), kTol);
  EXPECT_LT(fd_rel_error(loss, b.data(), dsum.data(), b.size()), kTol);
  EXPECT_LT(fd_rel_error(loss, w.data(), dw.data(), w.size()), kTol);
}

// The vectorised sigmoid inside SwiGLU against the libm formula, over the whole useful range.
TEST(OpsGrad, SwiGluMatchesLibm) {
  std::vector<float> g, u;
  for (float x = -100.0f; x <= 100.0f; x += 0.37f) {
    g.push_back(x);
    u.push_back(0.5f + 0.01f * x);
  }
  // One row: gate_up = [g | u].
  const int I = static_cast<int>(g.size());
  std::vector<float> gu = g;
  gu.insert(gu.end(), u.begin(), u.end());
  std::vector<float> h(I), dgu(2 * I), dh(I, 1.0f);
  be().swiglu_forward(h.data(), gu.data(), 1, I);
  be().swiglu_backward(dgu.data(), dh.data(), gu.data(), 1, I);
  for (int i = 0; i < I; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(g[i])));
    const float dg = dgu[i], du = dgu[I + i];
    EXPECT_NEAR(h[i], g[i] * s * u[i], 1e-6 * (1.0 + std::fabs(g[i] * u[i]))) << g[i];
    EXPECT_NEAR(du, g[i] * s, 1e-6 * (1.0 + std::fabs(g[i]))) << g[i];
    EXPECT_NEAR(dg, u[i] * s * (1.0 + g[i] * (1.0 - s)), 1e-5 * (1.0 + std::fabs(g[i]))) << g[i];
  }
}

TEST(OpsGrad, MatmulWithBias) {
  const int N = 5, IC = 7, OC = 3;
  auto x = random_vec(N * IC, 1);
  auto w = random_vec(OC * IC, 2);
  auto b = random_vec(OC, 3);
  auto r = random_vec(N * OC, 4);
  std::vector<float> out(N * OC), dx(N * IC), dw(OC * IC, 0.0f), db(OC, 0.0f);
  auto loss = [&] {
    be().matmul_forward(out.data(), x.data(), w.data(), b.data(), N, IC, OC);
    return dot(out.data(), r);
  };
  loss();
  // a naive check of the forward itself
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double s = b[o];
      for (int i = 0; i < IC; ++i) s += static_cast<double>(x[n * IC + i]) * w[o * IC + i];
      EXPECT_NEAR(out[n * OC + o], s, 1e-4);
    }
  }
  be().matmul_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), N, IC, OC,
                       false);
  EXPECT_LT(fd_rel_error(loss, x.data(), dx.data(), x.size()), kTol);
  EXPECT_LT(fd_rel_error(loss, w.data(), dw.data(), w.size()), kTol);
  EXPECT_LT(fd_rel_error(loss, b.data(), db.data(), b.size()), kTol);
}

TEST(OpsGrad, Rope) {
  const int N = 6, H = 3, D = 8, P = 10;
  std::vector<int32_t> pos = {0, 1, 2, 9, 4, 0};
  std::vector<float> cs(P * D / 2), sn(P * D / 2);
  for (int p = 0; p < P; ++p) {
    for (int d = 0; d < D / 2; ++d) {
      double a = p * std::pow(10000.0, -2.0 * d / D);
      cs[p * D / 2 + d] = static_cast<float>(std::cos(a));
      sn[p * D / 2 + d] = static_cast<float>(std::sin(a));
    }
  }
  auto x = random_vec(N * H * D, 1);
  auto r = random_vec(N * H * D, 2);
  std::vector<float> y;
  auto loss = [&] {
    y = x;
    be().rope_forward(y.data(), pos.data(), cs.data(), sn.data(), N, H, D);
    return dot(y.data(), r);
  };
  std::vector<float> dx = r;
  be().rope_backward(dx.data(), pos.data(), cs.data(), sn.data(), N, H, D);
  EXPECT_LT(fd_rel_error(loss, x.data(), dx.data(), x.size()), kTol);
  // position 0 is the identity
  loss();
  for (int i = 0; i < H * D; ++i) EXPECT_FLOAT_EQ(y[i], x[i]);
}

// docs: row 0 holds documents [0, split) and [split, T); other rows one document.
void attention_case(int B, int T, int H, int KV, int D, bool docs, int split = 3) {
  const AttnShape s{B, T, H, KV, D};
  auto q = random_vec(B * T * H * D, 1);
  auto k = random_vec(B * T * KV * D, 2);
  auto v = random_vec(B * T * KV * D, 3);
  auto r = random_vec(B * T * H * D, 4);
  std::vector<int32_t> ds(B * T, 0);
  if (docs) {
    for (int t = split; t < T; ++t) ds[t] = split;
  }
  std::vector<float> y(B * T * H * D), lse(B * H * T);
  auto loss = [&] {
    be().attention_forward(y.data(), lse.data(), q.data(), k.data(), v.data(), ds.data(), s);
    return dot(y.data(), r);
  };
  loss();
  // forward against a naive computation for every (b, h, t)
  const int group = H / KV;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int t = 0; t < T; ++t) {
        std::vector<double> p;
        const int j0 = ds[b * T + t];
        double m = -1e30;
        for (int j = j0; j <= t; ++j) {
          double sc = 0;
          for (int d = 0; d < D; ++d) {
            sc += static_cast<double>(q[((b * T + t) * H + h) * D + d]) *
                  k[((b * T + j) * KV + h / group) * D + d];
          }
          p.push_back(sc / std::sqrt(D));
          m = std::max(m, p.back());
        }
        double z = 0;
        for (double& e : p) z += (e = std::exp(e - m));
        for (int d = 0; d < D; ++d) {
          double acc = 0;
          for (int j = j0; j <= t; ++j) {
            acc += p[j - j0] / z * v[((b * T + j) * KV + h / group) * D + d];
          }
          ASSERT_NEAR(y[((b * T + t) * H + h) * D + d], acc, 1e-5);
        }
      }
    }
  }
  std::vector<float> dq(q.size()), dk(k.size()), dv(v.size());
  be().attention_backward(dq.data(), dk.data(), dv.data(), r.data(), q.data(), k.data(), v.data(),
                          y.data(), lse.data(), ds.data(), s);
  EXPECT_LT(fd_rel_error(loss, q.data(), dq.data(), q.size()), kTol);
  EXPECT_LT(fd_rel_error(loss, k.data(), dk.data(), k.size()), kTol);
  EXPECT_LT(fd_rel_error(loss, v.data(), dv.data(), v.size()), kTol);
}

TEST(OpsGrad, AttentionMultiHead) { attention_case(2, 5, 2, 2, 4, false); }
TEST(OpsGrad, AttentionGroupedQuery) { attention_case(2, 6, 4, 2, 4, false); }
TEST(OpsGrad, AttentionMultiQueryWithDocuments) { attention_case(1, 7, 3, 1, 6, true); }
// Sequences longer than the kernel's key block (64), with a document boundary inside a block.
TEST(OpsGrad, AttentionAcrossKeyBlocksWithDocuments) { attention_case(2, 150, 4, 2, 16, true, 70); }
TEST(OpsGrad, AttentionAcrossKeyBlocksHeadDim64) { attention_case(1, 130, 2, 1, 64, false); }
// Every tiled head size (16, 32, 64, 128 take 8, 4, 4, 2 query rows a tile), with sequence
// lengths that leave a partial tile and a document boundary inside a tile.
TEST(OpsGrad, AttentionHeadDim32WithDocuments) { attention_case(1, 75, 2, 2, 32, true, 66); }
TEST(OpsGrad, AttentionHeadDim128WithDocuments) { attention_case(1, 69, 2, 1, 128, true, 65); }
TEST(OpsGrad, AttentionHeadDim16PartialTile) { attention_case(1, 13, 2, 1, 16, true, 5); }

// Rows of [gate | up]: the gradient of each half lands in its own columns.
TEST(OpsGrad, SwiGlu) {
  const int N = 4, I = 10;
  auto gu = random_vec(N * 2 * I, 1, 2.0f);
  auto r = random_vec(N * I, 3);
  std::vector<float> h(N * I), dgu(N * 2 * I);
  auto loss = [&] {
    be().swiglu_forward(h.data(), gu.data(), N, I);
    return dot(h.data(), r);
  };
  be().swiglu_backward(dgu.data(), r.data(), gu.data(), N, I);
  EXPECT_LT(fd_rel_error(loss, gu.data(), dgu.data(), gu.size()), kTol);
}

// The caller's count of rows with a target sizes the work; a wrong count is an error, never a
// loss over the wrong rows.
TEST(OpsGrad, CrossEntropyRejectsAMiscountedTargetCount) {
  const int N = 4, C = 8, V = 11;
  auto x = random_vec(N * C, 1);
  auto w = random_vec(V * C, 2);
  const std::vector<int32_t> t = {3, kIgnoreIndex, 0, 10};
  ASSERT_EQ(rows_with_target(t.data(), N), 3);
  double loss = 0;
  EXPECT_THROW(
      be().cross_entropy(&loss, nullptr, nullptr, x.data(), w.data(), t.data(), N, 4, C, V, 1.0f),
      Error);
  EXPECT_NO_THROW(
      be().cross_entropy(&loss, nullptr, nullptr, x.data(), w.data(), t.data(), N, 3, C, V, 1.0f));
}

TEST(OpsGrad, CrossEntropyIgnoresMaskedRows) {
  const int N = 6, C = 8, V = 11;
  auto x = random_vec(N * C, 1);
  auto w = random_vec(V * C, 2, 0.5f);
  std::vector<int32_t> t = {3, kIgnoreIndex, 0, 10, kIgnoreIndex, 5};
  const float scale = 0.25f;
  auto loss = [&] {
    return scale * testing::cross_entropy_sum(be(), nullptr, nullptr, x.data(), w.data(), t.data(),
                                              N, C, V, 0);
  };
  std::vector<float> dx(N * C, 9.0f), dw(V * C, 0.0f);
  const double l = testing::cross_entropy_sum(be(), dx.data(), dw.data(), x.data(), w.data(),
                                              t.data(), N, C, V, scale);
  // loss against a direct computation
  double ref = 0;
  for (int n = 0; n < N; ++n) {
    if (t[n] == kIgnoreIndex) continue;
    std::vector<double> lg(V);
    double m = -1e30;
    for (int v = 0; v < V; ++v) {
      for (int c = 0; c < C; ++c) lg[v] += static_cast<double>(x[n * C + c]) * w[v * C + c];
      m = std::max(m, lg[v]);
    }
    double z = 0;
    for (double e : lg) z += std::exp(e - m);
    ref += m + std::log(z) - lg[t[n]];
  }
  EXPECT_NEAR(l, ref, 1e-4 * std::fabs(ref));
  for (int c = 0; c < C; ++c) EXPECT_EQ(dx[1 * C + c], 0.0f);  // ignored row
  EXPECT_LT(fd_rel_error(loss, x.data(), dx.data(), x.size()), kTol);
  EXPECT_LT(fd_rel_error(loss, w.data(), dw.data(), w.size()), kTol);
}

// A frozen weight (LoRA's base): dw null gives the same dx and touches no weight gradient.
TEST(OpsGrad, RmsNormAndCrossEntropyWithoutWeightGradient) {
  const int N = 6, C = 8, V = 11;
  auto x = random_vec(N * C, 1, 1.0f, 0.3f);
  auto w = random_vec(C, 2, 0.1f, 1.0f);
  auto r = random_vec(N * C, 3);
  std::vector<float> out(N * C), rstd(N), dx(N * C), dx0(N * C), dw(C, 0.0f);
  be().rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  be().rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), N, C,
                        false);
  be().rmsnorm_backward(dx0.data(), nullptr, r.data(), x.data(), w.data(), rstd.data(), N, C,
                        false);
  EXPECT_EQ(dx, dx0);
  auto head = random_vec(V * C, 4, 0.5f);
  std::vector<int32_t> t = {3, kIgnoreIndex, 0, 10, 7, 5};
  std::vector<float> hdw(V * C, 0.0f);
  const double l = testing::cross_entropy_sum(be(), dx.data(), hdw.data(), x.data(), head.data(),
                                              t.data(), N, C, V, 0.5f);
  const double l0 = testing::cross_entropy_sum(be(), dx0.data(), nullptr, x.data(), head.data(),
                                               t.data(), N, C, V, 0.5f);
  EXPECT_EQ(l, l0);
  EXPECT_EQ(dx, dx0);
}

TEST(Ops, SumSquaresAndScale) {
  auto x = random_vec(100000, 5);
  double ref = 0;
  for (float v : x) ref += static_cast<double>(v) * v;
  EXPECT_NEAR(testing::sum_squares(be(), x.data(), x.size()), ref, 1e-9 * ref);
  be().scale(x.data(), 2.0f, x.size());
  EXPECT_NEAR(testing::sum_squares(be(), x.data(), x.size()), 4 * ref, 4e-9 * ref);
}

// Dropout's backward is the same call on the gradient (the mask redrawn from the seed): finite
// differences of dot(dropout(x), r) with a fixed seed and offset, p 0.3.
TEST(OpsGrad, Dropout) {
  const size_t n = 301;
  auto x = random_vec(n, 21);
  const auto r = random_vec(n, 22);
  std::vector<float> out(n), dx(n);
  auto loss = [&] {
    be().dropout(out.data(), x.data(), n, 0.3f, 99, 7);
    return dot(out.data(), r);
  };
  be().dropout(dx.data(), r.data(), n, 0.3f, 99, 7);
  EXPECT_LT(fd_rel_error(loss, x.data(), dx.data(), n, n), kTol);
  size_t zeros = 0;  // some dropped, some kept, so the check is not of a plain scaling
  for (float g : dx) zeros += g == 0.0f ? 1 : 0;
  EXPECT_GT(zeros, n / 10);
  EXPECT_LT(zeros, n / 2);
}

// The hash is splitmix64 (the published generator's first outputs from state 0), element i of a
// call being output offset + i + 1 from state `seed`.
TEST(DropoutMask, IsSplitMix64) {
  EXPECT_EQ(splitmix64_at(0, 0), 0xe220a8397b1dcdafull);
  EXPECT_EQ(splitmix64_at(0, 1), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(splitmix64_at(0, 2), 0x06c45d188009454full);
  EXPECT_EQ(splitmix64_at(kSplitMixGamma, 0), splitmix64_at(0, 1));
  EXPECT_THROW(dropout_mask_for(1.0f, 0, 0), Error);
  EXPECT_THROW(dropout_mask_for(-0.1f, 0, 0), Error);
  EXPECT_EQ(dropout_mask_for(0.0f, 0, 0).threshold, 0u);
  EXPECT_EQ(dropout_mask_for(0.25f, 0, 0).threshold, 1u << 30);
}

// Kept elements are x / (1 - p) exactly and dropped ones 0, in F32 and BF16; the kept fraction
// over 2^20 elements is within 5 sigma of 1 - p; the same seed repeats, another differs, an
// offset shifts the stream; p 0 copies.
TEST(DropoutMask, FractionScaleSeedsAndOffsets) {
  const size_t n = size_t{1} << 20;
  std::vector<float> ones(n, 1.0f), out(n), again(n);
  for (const float p : {0.1f, 0.3f, 0.5f}) {
    be().dropout(out.data(), ones.data(), n, p, 1234, 0);
    const float kept_value = 1.0f / (1.0f - p);
    size_t kept = 0;
    for (float v : out) {
      ASSERT_TRUE(v == 0.0f || v == kept_value) << v;
      kept += v != 0.0f ? 1 : 0;
    }
    const double q = 1.0 - p, sigma = std::sqrt(n * p * q);
    EXPECT_NEAR(static_cast<double>(kept), n * q, 5 * sigma) << p;
    be().dropout(again.data(), ones.data(), n, p, 1234, 0);
    EXPECT_EQ(again, out);
    be().dropout(again.data(), ones.data(), n, p, 1235, 0);
    size_t differ = 0;
    for (size_t i = 0; i < n; ++i) differ += again[i] != out[i] ? 1 : 0;
    EXPECT_NEAR(static_cast<double>(differ), 2.0 * n * p * q, 5 * std::sqrt(2.0 * n * p * q)) << p;
    be().dropout(again.data(), ones.data(), n - 100, p, 1234, 100);  // element i is i + 100's
    EXPECT_TRUE(std::equal(again.begin(), again.begin() + (n - 100), out.begin() + 100));
  }
  const auto x = random_vec(1000, 23);
  std::vector<float> copy(x.size());
  be().dropout(copy.data(), x.data(), x.size(), 0.0f, 5, 0);
  EXPECT_EQ(copy, x);
  // BF16 in and out: the F32 result rounded; in place.
  std::vector<uint16_t> x16(x.size()), want16(x.size());
  to_bf16(x16.data(), x.data(), x.size());
  std::vector<float> xr(x.size()), o(x.size());
  for (size_t i = 0; i < x.size(); ++i) xr[i] = bf16_to_float(x16[i]);
  be().dropout(o.data(), xr.data(), x.size(), 0.4f, 8, 3);
  to_bf16(want16.data(), o.data(), o.size());
  be().dropout({x16.data(), DType::BF16}, ConstDevPtr{x16.data(), DType::BF16}, x.size(), 0.4f, 8,
               3);
  EXPECT_EQ(x16, want16);
}

}  // namespace
}  // namespace kiln
