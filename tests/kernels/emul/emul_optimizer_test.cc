// The optimizer's updates and the gradient norm (optimizer.cu, reduce.cu's sum of squares and
// clipping) under the CPU emulator, against the CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/emul/emul_test_util.h"
#include "kiln/kernels/cuda/pointwise_ops.h"

namespace kiln::emul {
namespace {

const Backend& cpu() { return parity::reference(); }

// The float4 path (aligned arrays) and the scalar one (one float off), n not a multiple of 4.
TEST(EmulOptimizer, AdamwVectorAndScalarPaths) {
  constexpr size_t n = 1003;
  const AdamWStep s{0.9f, 0.95f, 1e-3f, 1.2f, 1e-8f, 0.999f};
  const std::vector<float> p = random_values(n + 1, 1), g = random_values(n + 1, 2);
  const std::vector<float> m = random_values(n + 1, 3, 0.1f);
  std::vector<float> v = random_values(n + 1, 4, 0.01f);
  for (float& x : v) x = std::fabs(x);
  for (const size_t off : {size_t{0}, size_t{1}}) {
    std::vector<float> wp = p, wm = m, wv = v;
    cpu().adamw_step(wp.data() + off, wm.data() + off, wv.data() + off, g.data() + off, n, s);
    DeviceArray<float> dp(p, "p"), dm(m, "m"), dv(v, "v"), dg(g, "g");
    emul_cuda::adamw_step(dp.get() + off, dm.get() + off, dv.get() + off, dg.get() + off, n, s,
                          nullptr);
    expect_no_fault();
    const std::string what = off == 0 ? "adamw (float4)" : "adamw (scalar)";
    expect_close(what + " p", dp.host(), wp, kElementwise);
    expect_close(what + " m", dm.host(), wm, kElementwise);
    expect_close(what + " v", dv.host(), wv, kElementwise);
  }
}

TEST(EmulOptimizer, SgdWithAndWithoutMomentum) {
  constexpr size_t n = 777;
  const std::vector<float> p = random_values(n, 5), g = random_values(n, 6);
  const std::vector<float> m = random_values(n, 7);
  for (const SgdStep s : {SgdStep{0.1f, 0.01f, 0.0f, false}, SgdStep{0.1f, 0.01f, 0.9f, true},
                          SgdStep{0.1f, 0.0f, 0.9f, false}}) {
    std::vector<float> wp = p, wm = m;
    cpu().sgd_step(wp.data(), s.momentum > 0 ? wm.data() : nullptr, g.data(), n, s);
    DeviceArray<float> dp(p, "p"), dm(m, "m"), dg(g, "g");
    emul_cuda::sgd_step(dp.get(), s.momentum > 0 ? dm.get() : nullptr, dg.get(), n, s, nullptr);
    expect_no_fault();
    const std::string what = s.momentum == 0 ? "sgd"
                             : s.first       ? "sgd momentum first"
                                             : "sgd momentum";
    expect_close(what + " p", dp.host(), wp, kElementwise);
    expect_close(what + " m", dm.host(), wm, kElementwise);
  }
}

// 40000 elements: three blocks of 16384 and a partial sum each, added into a running double.
TEST(EmulOptimizer, SumOfSquaresAndClipping) {
  constexpr size_t n = 40000;
  const std::vector<float> x = random_values(n, 8);
  std::vector<double> want{1.5};
  cpu().sum_squares(want.data(), x.data(), n);
  DeviceArray<float> dx(x, "x");
  DeviceArray<double> sum(std::vector<double>{1.5}, "sum");
  ScratchPools pools;
  emul_cuda::sum_squares(sum.get(), dx.get(), n, nullptr, pools.pooled);
  expect_no_fault();
  expect_close("sum_squares", sum.host(), want, kElementwise);
  DeviceArray<double> sum2(std::vector<double>{1.5}, "sum");
  emul_cuda::sum_squares(sum2.get(), dx.get(), n, nullptr, pools.persistent);
  expect_no_fault();
  expect_close("sum_squares (persistent scratch)", sum2.host(), want, kElementwise);
  for (const double max_norm : {1.0, 1e9}) {  // clips, and leaves alone
    std::vector<float> wx = x;
    cpu().clip_by_norm(wx.data(), n, want.data(), max_norm);
    DeviceArray<float> cx(x, "x");
    emul_cuda::clip_by_norm(cx.get(), n, sum.get(), max_norm, nullptr);
    expect_no_fault();
    expect_close(max_norm < 10 ? "clip_by_norm (clips)" : "clip_by_norm (leaves)", cx.host(), wx,
                 kElementwise);
  }
}

}  // namespace
}  // namespace kiln::emul
