// RMSNorm, alone, fused with the residual add, and its backward (rmsnorm.cu, rmsnorm_backward.cu)
// under the CPU emulator, against the CPU backend: rows longer than a block's 256 threads, the
// weight in F32 and BF16, the output in F32 and BF16, dw over several 64-row chunks, and the
// per-head rows of Qwen3's q/k norms (head_dim 64 and 128).
#include <gtest/gtest.h>

#include <vector>

#include "kernels/emul/emul_test_util.h"
#include "kiln/kernels/cuda/pointwise_ops.h"

namespace kiln::emul {
namespace {

const Backend& cpu() { return parity::reference(); }
constexpr float kEps = 1e-6f;

// w as F32 or BF16 device data (its values are bf16 already, so both hold the same numbers).
struct Weight {
  DeviceArray<float> f32;
  DeviceArray<uint16_t> bf16;
  explicit Weight(const std::vector<float>& w) : f32(w, "w"), bf16(w.size(), "w bf16") {
    std::vector<uint16_t> h(w.size());
    to_bf16(h.data(), w.data(), w.size());
    std::memcpy(bf16.get(), h.data(), h.size() * sizeof(uint16_t));
  }
  ConstDevPtr as(DType t) const {
    return t == DType::F32 ? ConstDevPtr(f32.get()) : ConstDevPtr(bf16.get(), DType::BF16);
  }
};

const char* name(DType t) { return t == DType::F32 ? "f32" : "bf16"; }

TEST(EmulRmsnorm, ForwardWeightAndOutputDtypes) {
  constexpr int N = 6, C = 300;
  const std::vector<float> x = random_values(static_cast<size_t>(N) * C, 1, 2.0f);
  const std::vector<float> w = random_values(C, 2, 0.5f, 1.0f);
  std::vector<float> want(x.size()), want_rstd(N);
  cpu().rmsnorm_forward(want.data(), want_rstd.data(), x.data(), w.data(), N, C, kEps);
  const Weight dw(w);
  DeviceArray<float> dx(x, "x");
  for (const DType wt : {DType::F32, DType::BF16}) {
    for (const DType ot : {DType::F32, DType::BF16}) {
      DeviceArray<float> out(x.size(), "out"), rstd(N, "rstd");
      DeviceArray<uint16_t> out16(x.size(), "out bf16");
      const DevPtr o = ot == DType::F32 ? DevPtr(out.get()) : DevPtr(out16.get(), DType::BF16);
      emul_cuda::rmsnorm_forward(o, rstd.get(), dx.get(), dw.as(wt), N, C, kEps, nullptr);
      expect_no_fault();
      const std::string what = std::string("rmsnorm_forward w ") + name(wt) + " out " + name(ot);
      if (ot == DType::F32) {
        expect_close(what, out.host(), want, kElementwise);
      } else {
        expect_close(what, widen_bf16(out16.host()), widen(want), kBf16Stored);
      }
      expect_close(what + " rstd", rstd.host(), want_rstd, kElementwise);
    }
  }
}

// sum = a + b written over a (the model's residual stream), then RMSNorm of it.
TEST(EmulRmsnorm, AddForwardWithTheSumOverItsInput) {
  constexpr int N = 4, C = 520;
  const std::vector<float> a = random_values(static_cast<size_t>(N) * C, 3);
  const std::vector<float> b = random_values(static_cast<size_t>(N) * C, 4);
  const std::vector<float> w = random_values(C, 5, 0.5f, 1.0f);
  std::vector<float> want_sum = a, want(a.size()), want_rstd(N);
  cpu().add_rmsnorm_forward(want_sum.data(), want.data(), want_rstd.data(), want_sum.data(),
                            b.data(), w.data(), N, C, kEps);
  const Weight dw(w);
  for (const DType wt : {DType::F32, DType::BF16}) {
    DeviceArray<float> da(a, "a"), db(b, "b"), out(a.size(), "out"), rstd(N, "rstd");
    emul_cuda::add_rmsnorm_forward(da.get(), out.get(), rstd.get(), da.get(), db.get(), dw.as(wt),
                                   N, C, kEps, nullptr);
    expect_no_fault();
    const std::string what = std::string("add_rmsnorm_forward w ") + name(wt);
    expect_close(what + " sum", da.host(), want_sum, kElementwise);
    expect_close(what + " out", out.host(), want, kElementwise);
    expect_close(what + " rstd", rstd.host(), want_rstd, kElementwise);
  }
}

// dx written and accumulated; dw added over 70 rows (two 64-row chunks) and 300 columns.
TEST(EmulRmsnorm, BackwardWrittenAndAccumulated) {
  constexpr int N = 70, C = 300;
  const std::vector<float> x = random_values(static_cast<size_t>(N) * C, 6);
  const std::vector<float> dout = random_values(x.size(), 7);
  const std::vector<float> w = random_values(C, 8, 0.5f, 1.0f);
  const std::vector<float> dx0 = random_values(x.size(), 9);
  const std::vector<float> dw0 = random_values(C, 10);
  std::vector<float> y(x.size()), rstd(N);
  cpu().rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  const Weight dw(w);
  DeviceArray<float> dx_in(x, "x"), ddout(dout, "dout"), drstd(rstd, "rstd");
  ScratchPools pools;
  for (const bool acc : {false, true}) {
    for (const DType wt : {DType::F32, DType::BF16}) {
      std::vector<float> want_dx = dx0, want_dw = dw0;
      cpu().rmsnorm_backward(want_dx.data(), want_dw.data(), dout.data(), x.data(), w.data(),
                             rstd.data(), N, C, acc);
      DeviceArray<float> ddx(dx0, "dx"), ddw(dw0, "dw");
      // The pooled scratch for fp32 weights, the persistent one for bf16.
      emul_cuda::StreamScratchPool& pool = wt == DType::F32 ? pools.pooled : pools.persistent;
      emul_cuda::rmsnorm_backward(ddx.get(), ddw.get(), ddout.get(), dx_in.get(), dw.as(wt),
                                  drstd.get(), N, C, acc, nullptr, pool);
      expect_no_fault();
      const std::string what = std::string("rmsnorm_backward w ") + name(wt) +
                               (acc ? " accumulate" : " write") +
                               (pool.stream_ordered() ? "" : " (persistent scratch)");
      expect_close(what + " dx", ddx.host(), want_dx, kElementwise);
      expect_close(what + " dw", ddw.host(), want_dw, kElementwise);
    }
  }
}

// A frozen weight (LoRA's base): dw null launches only the dx kernel.
TEST(EmulRmsnorm, BackwardWithoutWeightGradient) {
  constexpr int N = 70, C = 300;
  const std::vector<float> x = random_values(static_cast<size_t>(N) * C, 6);
  const std::vector<float> dout = random_values(x.size(), 7);
  const std::vector<float> w = random_values(C, 8, 0.5f, 1.0f);
  std::vector<float> y(x.size()), rstd(N), want_dx(x.size()), want_dw(C, 0.0f);
  cpu().rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  cpu().rmsnorm_backward(want_dx.data(), want_dw.data(), dout.data(), x.data(), w.data(),
                         rstd.data(), N, C, false);
  DeviceArray<float> dx_in(x, "x"), ddout(dout, "dout"), drstd(rstd, "rstd"), dwt(w, "w");
  DeviceArray<float> ddx(x.size(), "dx");
  ScratchPools pools;
  emul_cuda::rmsnorm_backward(ddx.get(), nullptr, ddout.get(), dx_in.get(), dwt.get(), drstd.get(),
                              N, C, false, nullptr, pools.pooled);
  expect_no_fault();
  expect_close("rmsnorm_backward frozen dx", ddx.host(), want_dx, kElementwise);
}

// Qwen3's q/k norms: the same kernels over (tokens * heads, head_dim) rows, one weight of
// head_dim shared by every row, dw summed over all of them (three 64-row chunks).
TEST(EmulRmsnorm, PerHeadRowsOfHeadDim) {
  for (const int D : {64, 128}) {
    constexpr int kRows = 130;  // e.g. 13 tokens x 10 heads
    const std::vector<float> x = random_values(static_cast<size_t>(kRows) * D, 11, 2.0f);
    const std::vector<float> dout = random_values(x.size(), 12);
    const std::vector<float> w = random_values(D, 13, 0.5f, 1.0f);
    std::vector<float> want(x.size()), want_rstd(kRows), want_dx(x.size()), want_dw(D, 0.0f);
    cpu().rmsnorm_forward(want.data(), want_rstd.data(), x.data(), w.data(), kRows, D, kEps);
    cpu().rmsnorm_backward(want_dx.data(), want_dw.data(), dout.data(), x.data(), w.data(),
                           want_rstd.data(), kRows, D, false);
    DeviceArray<float> dx_in(x, "x"), ddout(dout, "dout"), dwt(w, "w");
    DeviceArray<float> out(x.size(), "out"), rstd(kRows, "rstd");
    DeviceArray<float> ddx(x.size(), "dx"), ddw(std::vector<float>(D, 0.0f), "dw");
    emul_cuda::rmsnorm_forward(out.get(), rstd.get(), dx_in.get(), dwt.get(), kRows, D, kEps,
                               nullptr);
    ScratchPools pools;
    emul_cuda::rmsnorm_backward(ddx.get(), ddw.get(), ddout.get(), dx_in.get(), dwt.get(),
                                rstd.get(), kRows, D, false, nullptr, pools.pooled);
    expect_no_fault();
    const std::string what = "per-head rmsnorm D=" + std::to_string(D);
    expect_close(what + " out", out.host(), want, kElementwise);
    expect_close(what + " rstd", rstd.host(), want_rstd, kElementwise);
    expect_close(what + " dx", ddx.host(), want_dx, kElementwise);
    expect_close(what + " dw", ddw.host(), want_dw, kElementwise);
  }
}

}  // namespace
}  // namespace kiln::emul
