// PhaseTimedBackend charges each op's time to its phase: on the synchronous CPU backend and on
// the stream emulation (where ops run later, on the stream's thread), the phases add up to no
// more than the wall time around them, a product lands in "gemm", attention in "attention", and
// an add in "other"; phases without an op get nothing. (No comparison between phases' times: a
// busy machine can stall any op.) Outside start()/stop() nothing is recorded.
#include "kiln/kernels/phase_timed_backend.h"

#include <gtest/gtest.h>

#include <chrono>

#include "common/grad_check.h"
#include "kiln/base/error.h"
#include "kiln/kernels/cpu/async_cpu_backend.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/device/device_buffer.h"

namespace kiln {
namespace {

void expect_phases_follow_ops(const Backend& inner) {
  PhaseTimedBackend be(inner);
  const int N = 256, C = 256, OC = 256;
  DeviceBuffer<float> x(be, N * C), w(be, OC * C), out(be, N * OC), sum(be, N * OC);
  const auto host = testing::random_vec(N * C, 1);
  be.copy_to_device(x.data(), host.data(), x.bytes());
  be.copy_to_device(w.data(), host.data(), w.bytes());
  be.matmul_forward(out.data(), x.data(), w.data(), nullptr, N, C, OC);  // untimed

  const auto t0 = std::chrono::steady_clock::now();  // before the start mark: total <= wall
  be.start();
  for (int i = 0; i < 4; ++i) be.matmul_forward(out.data(), x.data(), w.data(), nullptr, N, C, OC);
  be.add(sum.data(), out.data(), out.data(), out.size());
  const AttnShape s{1, 64, 4, 2, 64};  // q (64, 4, 64) and k, v (64, 2, 64) fit in x
  be.attention_forward(out.data(), sum.data(), x.data(), x.data(), x.data(), nullptr, s);
  const PhaseSeconds p = be.stop();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  EXPECT_GT(p[Phase::kGemm], 0.0);
  EXPECT_GT(p[Phase::kOther], 0.0);
  EXPECT_GT(p[Phase::kAttention], 0.0);
  EXPECT_EQ(p[Phase::kLmHead], 0.0);
  EXPECT_EQ(p[Phase::kOptimizer], 0.0);
  EXPECT_LE(p.total(), wall);
  EXPECT_THROW(be.stop(), Error);  // not started again
}

TEST(PhaseTimedBackend, SynchronousCpu) { expect_phases_follow_ops(CpuBackend()); }

TEST(PhaseTimedBackend, StreamEmulation) {
  const auto inner = make_async_cpu_backend(false);
  expect_phases_follow_ops(*inner);
}

TEST(PhaseTimedBackend, UntimedEventsHaveNoTime) {
  CpuBackend be;
  const auto a = be.compute_stream().record(), b = be.compute_stream().record();
  EXPECT_THROW(b->seconds_since(*a), Error);
  const auto t1 = be.compute_stream().record_timed(), t2 = be.compute_stream().record_timed();
  EXPECT_GE(t2->seconds_since(*t1), 0.0);
  EXPECT_THROW(t2->seconds_since(*a), Error);
}

}  // namespace
}  // namespace kiln
