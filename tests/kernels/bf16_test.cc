// bf16 mixed precision at the op level: rounding to bf16, gemm() in both precisions, and the bf16
// backend's matmul and fused cross-entropy against (a) an fp32/double computation on the same
// bf16-rounded inputs (tight: only the accumulation order differs) and (b) the fp32 ops (bf16
// tolerance).
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/grad_check.h"
#include "common/host_backend.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/kernels/ops.h"

namespace kiln {
namespace {

using testing::random_vec;

// Nearest bf16 to x, ties to even, computed by comparing distances in double: independent of the
// bit trick and the instruction under test.
uint16_t ref_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint16_t lo = static_cast<uint16_t>(u >> 16);
  if (std::isnan(x)) return lo | 0x40;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);
  if (std::isinf(x)) return lo;
  if (std::fpclassify(x) == FP_SUBNORMAL) return lo & 0x8000;  // flushed, as vcvtneps2bf16 does
  const double dl = std::fabs(static_cast<double>(x) - bf16_to_float(lo));
  // Past the largest bf16 the next value up is infinity, rounded to as if it were 2^128 (IEEE).
  const double vh = std::isinf(bf16_to_float(hi)) ? std::copysign(0x1p128, x) : bf16_to_float(hi);
  const double dh = std::fabs(static_cast<double>(x) - vh);
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return (lo & 1) ? hi : lo;
}

float round_bf16(float x) {
  uint16_t h;
  to_bf16(&h, &x, 1);
  return bf16_to_float(h);
}

std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = round_bf16(v[i]);
  return r;
}

using testing::rel_err;

const Backend& bf16() {
  static const CpuBackend b(/*bf16=*/true);
  return b;
}
const Backend& fp32() {
  static const CpuBackend b;
  return b;
}

TEST(Bf16, RoundsToNearestEven) {
  std::vector<float> x = {1.0f,
                          1.0f + 0x1p-8f,             // halfway between 1 and 1 + 2^-7: to even (1)
                          1.0f + 0x3p-8f,             // halfway, odd below: up to 1 + 2^-6
                          1.0f + 0x1p-8f + 0x1p-20f,  // just above halfway: up
                          -2.5f,
                          0.0f,
                          -0.0f,
                          1e-40f,  // denormal: flushed to zero
                          -1e-40f,
                          3.3895e38f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  auto r = random_vec(1000, 7, 100.0f);
  x.insert(x.end(), r.begin(), r.end());
  // n not a multiple of 16 or 32: exercises the vector, half-vector and masked tails.
  std::vector<uint16_t> got(x.size());
  to_bf16(got.data(), x.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(bf16_to_float(got[i])));
      continue;
    }
    EXPECT_EQ(got[i], ref_bf16(x[i])) << "x = " << x[i] << " (index " << i << ")";
  }
  EXPECT_EQ(bf16_to_float(got[1]), 1.0f);
  EXPECT_EQ(bf16_to_float(got[2]), 1.0f + 0x1p-6f);
}

// Reference C (M, N) = op(A) op(B) + beta C in double on given (already rounded or not) inputs.
std::vector<float> ref_gemm(bool ta, bool tb, int M, int N, int K, const std::vector<float>& A,
                            int lda, const std::vector<float>& B, int ldb, float beta,
                            const std::vector<float>& C0) {
  std::vector<float> C(static_cast<size_t>(M) * N);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      double s = beta * C0[static_cast<size_t>(m) * N + n];
      for (int k = 0; k < K; ++k) {
        const double a =
            ta ? A[static_cast<size_t>(k) * lda + m] : A[static_cast<size_t>(m) * lda + k];
        const double b =
            tb ? B[static_cast<size_t>(n) * ldb + k] : B[static_cast<size_t>(k) * ldb + n];
        s += a * b;
      }
      C[static_cast<size_t>(m) * N + n] = static_cast<float>(s);
    }
  }
  return C;
}

TEST(Bf16, GemmAllTranspositionsBothPrecisions) {
  const int M = 19, N = 35, K = 47, pad = 3;
  uint32_t seed = 1;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (float beta : {0.0f, 1.0f}) {
        // Stored shapes with a padded row stride, so conversion of strided rows is exercised.
        const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad;
        auto A = random_vec(static_cast<size_t>(ta ? K : M) * lda, seed++);
        auto B = random_vec(static_cast<size_t>(tb ? N : K) * ldb, seed++);
        auto C0 = random_vec(static_cast<size_t>(M) * N, seed++);
        auto want32 = ref_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C0);
        auto want16 = ref_gemm(ta, tb, M, N, K, rounded(A), lda, rounded(B), ldb, beta, C0);
        auto c32 = C0, c16 = C0;
        gemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, c32.data(), N,
             GemmPrecision::kFp32);
        gemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, beta, c16.data(), N,
             GemmPrecision::kBf16);
        SCOPED_TRACE(::testing::Message() << "ta " << ta << " tb " << tb << " beta " << beta);
        EXPECT_LT(rel_err(c32, want32), 1e-6);
        if (gemm_bf16_native()) {
          EXPECT_LT(rel_err(c16, want16), 1e-6);  // exact products, fp32 accumulation
          EXPECT_GT(rel_err(c16, want32), 1e-5);  // and really bf16 inputs
        }
        EXPECT_LT(rel_err(c16, want32), 1e-2);
      }
    }
  }
}

// Natively, one oneDNN primitive per shape. Where bf16 GEMMs fall back to fp32 (no AVX512_BF16,
// or oneDNN capped below it) they run in OpenBLAS and create none: the path actually chosen.
TEST(Bf16, PrimitivesAreCreatedOncePerShape) {
  const int M = 8, N = 9, K = 10;
  auto A = random_vec((M + 1) * K, 1), B = random_vec(K * N, 2);
  std::vector<float> C((M + 1) * N);
  const size_t before = gemm_cached_primitives();
  gemm(false, false, M, N, K, A.data(), K, B.data(), N, 0.0f, C.data(), N, GemmPrecision::kBf16);
  const size_t n = gemm_cached_primitives();
  EXPECT_EQ(n, before + (gemm_bf16_native() ? 1 : 0));
  for (int i = 0; i < 5; ++i) {
    gemm(false, false, M, N, K, A.data(), K, B.data(), N, 0.0f, C.data(), N, GemmPrecision::kBf16);
  }
  EXPECT_EQ(gemm_cached_primitives(), n);
  gemm(false, false, M + 1, N, K, A.data(), K, B.data(), N, 0.0f, C.data(), N,
       GemmPrecision::kBf16);
  EXPECT_EQ(gemm_cached_primitives(), n + (gemm_bf16_native() ? 1 : 0));
}

TEST(Bf16, EmptyInnerDimension) {
  std::vector<float> C(6, 3.0f);
  for (auto p : {GemmPrecision::kFp32, GemmPrecision::kBf16}) {
    gemm(false, false, 2, 3, 0, nullptr, 1, nullptr, 3, 1.0f, C.data(), 3, p);  // C += 0
    for (float c : C) EXPECT_EQ(c, 3.0f);
  }
  gemm(false, false, 2, 3, 0, nullptr, 1, nullptr, 3, 0.0f, C.data(), 3, GemmPrecision::kBf16);
  for (float c : C) EXPECT_EQ(c, 0.0f);  // an empty sum
}

TEST(Bf16, BackendNamesAndUnknownDtype) {
  EXPECT_EQ(fp32().name(), "cpu");
  EXPECT_EQ(bf16().name(), "cpu-bf16");
  try {
    parse_named(kComputeDTypeNames, "fp8", "train.dtype");
    FAIL() << "fp8 accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'fp8'"), std::string::npos) << e.what();
  }
}

// The products' inputs are rounded to bf16 where bf16 GEMMs are native, else the fp32 path runs
// (tight checks against the inputs the chosen path multiplies, and then fp32's exact results).
TEST(Bf16, MatmulForwardBackward) {
  const int N = 33, IC = 70, OC = 45;
  auto x = random_vec(N * IC, 1), w = random_vec(OC * IC, 2), b = random_vec(OC, 3);
  auto dout = random_vec(N * OC, 4);
  const bool native = gemm_bf16_native();
  const auto xr = native ? rounded(x) : x, wr = native ? rounded(w) : w,
             doutr = native ? rounded(dout) : dout;
  std::vector<float> zero_out(N * OC, 0.0f);

  std::vector<float> out16(N * OC), out32(N * OC);
  bf16().matmul_forward(out16.data(), x.data(), w.data(), b.data(), N, IC, OC);
  fp32().matmul_forward(out32.data(), x.data(), w.data(), b.data(), N, IC, OC);
  auto want = ref_gemm(false, true, N, OC, IC, xr, IC, wr, IC, 0.0f, zero_out);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) want[n * OC + o] += b[o];
  }
  EXPECT_LT(rel_err(out16, want), 1e-6);
  EXPECT_LT(rel_err(out16, out32), 1e-2);
  if (!native) {
    EXPECT_EQ(out16, out32);
  }

  // dx written (then accumulated), dw and db accumulated onto what is there.
  std::vector<float> dx16(N * IC), dx32(N * IC), dw0 = random_vec(OC * IC, 5),
                                                 db0 = random_vec(OC, 6);
  auto dw16 = dw0, dw32 = dw0, db16 = db0, db32 = db0;
  bf16().matmul_backward(dx16.data(), dw16.data(), db16.data(), dout.data(), x.data(), w.data(), N,
                         IC, OC, false);
  fp32().matmul_backward(dx32.data(), dw32.data(), db32.data(), dout.data(), x.data(), w.data(), N,
                         IC, OC, false);
  std::vector<float> zero_dx(N * IC, 0.0f);
  auto want_dx = ref_gemm(false, false, N, IC, OC, doutr, OC, wr, IC, 0.0f, zero_dx);
  auto want_dw = ref_gemm(true, false, OC, IC, N, doutr, OC, xr, IC, 1.0f, dw0);
  EXPECT_LT(rel_err(dx16, want_dx), 1e-6);
  EXPECT_LT(rel_err(dw16, want_dw), 1e-6);
  EXPECT_LT(rel_err(dx16, dx32), 1e-2);
  EXPECT_LT(rel_err(dw16, dw32), 1e-2);
  EXPECT_LT(rel_err(db16, db32), 1e-6);  // bias gradients are fp32 sums
  if (!native) {
    EXPECT_EQ(dx16, dx32);
    EXPECT_EQ(dw16, dw32);
  }
  auto dx_acc = dx16;
  bf16().matmul_backward(dx_acc.data(), dw16.data(), nullptr, dout.data(), x.data(), w.data(), N,
                         IC, OC, true);
  for (size_t i = 0; i < dx_acc.size(); ++i) ASSERT_NEAR(dx_acc[i], 2 * dx16[i], 1e-4f);
}

// Cross-entropy in bf16 against fp32, with the vocabulary large enough that the rows are split
// into two chunks (8M logits per chunk), and ignored targets.
TEST(Bf16, CrossEntropyMatchesFp32) {
  // One thread: about 1 CPU-s of work, which OpenMP's barriers stretch past 10 s of wall time on
  // a loaded 2-core machine (the parallel loops still run, as one-thread teams).
  omp_set_num_threads(1);
  const int N = 80, C = 16, V = 110000;
  auto x = random_vec(static_cast<size_t>(N) * C, 1, 0.5f);
  auto w = random_vec(static_cast<size_t>(V) * C, 2, 0.5f);
  std::vector<int32_t> t(N);
  std::mt19937 rng(3);
  for (int n = 0; n < N; ++n) t[n] = static_cast<int32_t>(rng() % V);
  t[5] = t[60] = kIgnoreIndex;
  const float scale = 1.0f / 78;
  std::vector<float> dx16(N * C), dx32(N * C), dw16(static_cast<size_t>(V) * C, 0.0f),
      dw32(static_cast<size_t>(V) * C, 0.0f);
  const double l16 = testing::cross_entropy_sum(bf16(), dx16.data(), dw16.data(), x.data(),
                                                w.data(), t.data(), N, C, V, scale);
  const double l32 = testing::cross_entropy_sum(fp32(), dx32.data(), dw32.data(), x.data(),
                                                w.data(), t.data(), N, C, V, scale);
  // The loss of fp32 on the rounded inputs equals bf16's up to accumulation order.
  auto xr = rounded(x), wr = rounded(w);
  std::vector<float> dxr(N * C), dwr(static_cast<size_t>(V) * C, 0.0f);
  const double lr = testing::cross_entropy_sum(fp32(), dxr.data(), dwr.data(), xr.data(), wr.data(),
                                               t.data(), N, C, V, scale);
  EXPECT_NEAR(l16, l32, 1e-2 * l32);
  if (gemm_bf16_native()) {
    EXPECT_NEAR(l16, lr, 1e-5 * lr);
    EXPECT_NE(l16, l32);
  } else {
    // The fallback is the fp32 path itself.
    EXPECT_EQ(l16, l32);
    EXPECT_EQ(dx16, dx32);
  }
  EXPECT_LT(rel_err(dx16, dx32), 2e-2);
  EXPECT_LT(rel_err(dw16, dw32), 2e-2);
  for (int c = 0; c < C; ++c) {
    EXPECT_EQ(dx16[5 * C + c], 0.0f);
    EXPECT_EQ(dx16[60 * C + c], 0.0f);
  }
  // Forward only (no gradients) gives the same loss.
  EXPECT_EQ(testing::cross_entropy_sum(bf16(), nullptr, nullptr, x.data(), w.data(), t.data(), N, C,
                                       V, scale),
            l16);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// train.dtype bf16 stores the activations that only feed matrix products in bf16. Stored values
// are what the product would have rounded to, so results equal those of f32 storage bit for bit.
TEST(Bf16, ActivationsStoredInBf16GiveTheSameProducts) {
  if (!gemm_bf16_native()) GTEST_SKIP() << "no AVX512_BF16: bf16 products run in fp32 here";
  const CpuBackend be(/*bf16=*/true);
  ASSERT_EQ(be.activation_dtype(), DType::BF16);
  EXPECT_EQ(CpuBackend().activation_dtype(), DType::F32);
  const int N = 37, C = 48, OC = 29;
  const auto x = testing::random_vec(N * C, 11), w = testing::random_vec(OC * C, 12),
             g = testing::random_vec(C, 13), dout = testing::random_vec(N * OC, 14),
             up = testing::random_vec(N * C, 15);
  std::vector<float> xn32(N * C), r32(N), r16(N);
  std::vector<uint16_t> xn16(N * C);
  be.rmsnorm_forward(xn32.data(), r32.data(), x.data(), g.data(), N, C, 1e-6f);
  be.rmsnorm_forward(DevPtr{xn16.data(), DType::BF16}, r16.data(), x.data(), g.data(), N, C, 1e-6f);
  EXPECT_EQ(r32, r16);
  std::vector<uint16_t> rounded(N * C);
  to_bf16(rounded.data(), xn32.data(), rounded.size());
  EXPECT_EQ(xn16, rounded);
  std::vector<float> o32(N * OC), o16(N * OC), dw32(OC * C, 0.0f), dw16(OC * C, 0.0f);
  be.matmul_forward(o32.data(), xn32.data(), w.data(), nullptr, N, C, OC);
  be.matmul_forward(o16.data(), ConstDevPtr{xn16.data(), DType::BF16}, w.data(), nullptr, N, C, OC);
  EXPECT_EQ(o32, o16);
  be.matmul_backward(nullptr, dw32.data(), nullptr, dout.data(), xn32.data(), w.data(), N, C, OC,
                     false);
  be.matmul_backward(nullptr, dw16.data(), nullptr, dout.data(),
                     ConstDevPtr{xn16.data(), DType::BF16}, w.data(), N, C, OC, false);
  EXPECT_EQ(dw32, dw16);
  std::vector<float> h32(N * C);
  std::vector<uint16_t> h16(N * C);
  std::vector<float> gate_up;  // rows [x | up]
  for (int n = 0; n < N; ++n) {
    gate_up.insert(gate_up.end(), x.begin() + n * C, x.begin() + (n + 1) * C);
    gate_up.insert(gate_up.end(), up.begin() + n * C, up.begin() + (n + 1) * C);
  }
  be.swiglu_forward(h32.data(), gate_up.data(), N, C);
  be.swiglu_forward(DevPtr{h16.data(), DType::BF16}, gate_up.data(), N, C);
  to_bf16(rounded.data(), h32.data(), rounded.size());
  EXPECT_EQ(h16, rounded);
}

}  // namespace
}  // namespace kiln
