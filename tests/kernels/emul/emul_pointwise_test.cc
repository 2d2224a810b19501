// The elementwise kernels (rope.cu, swiglu.cu, reduce.cu's add and scale, cast.cu, column_sums.cu,
// dropout.cu) under the CPU emulator, against the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/emul/emul_test_util.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cuda/column_sums.h"
#include "kiln/kernels/cuda/pointwise_ops.h"

namespace kiln::emul {
namespace {

const Backend& cpu() { return parity::reference(); }

// x (N, heads, D) rotated by positions pos (N) of tables (max_pos, D / 2), forward and back.
TEST(EmulRope, ForwardAndBackward) {
  constexpr int N = 37, heads = 3, D = 64, max_pos = 50;
  const std::vector<float> x = random_values(static_cast<size_t>(N) * heads * D, 1);
  const std::vector<float> cs = random_values(static_cast<size_t>(max_pos) * D / 2, 2);
  const std::vector<float> sn = random_values(static_cast<size_t>(max_pos) * D / 2, 3);
  std::vector<int32_t> pos(N);
  for (int n = 0; n < N; ++n) pos[n] = (n * 7) % max_pos;
  for (const bool forward : {true, false}) {
    std::vector<float> want = x;
    DeviceArray<float> dx(x, "x");
    DeviceArray<int32_t> dpos(pos, "pos");
    DeviceArray<float> dcs(cs, "cos"), dsn(sn, "sin");
    if (forward) {
      cpu().rope_forward(want.data(), pos.data(), cs.data(), sn.data(), N, heads, D);
      emul_cuda::rope_forward(dx.get(), dpos.get(), dcs.get(), dsn.get(), N, heads, D, nullptr);
    } else {
      cpu().rope_backward(want.data(), pos.data(), cs.data(), sn.data(), N, heads, D);
      emul_cuda::rope_backward(dx.get(), dpos.get(), dcs.get(), dsn.get(), N, heads, D, nullptr);
    }
    expect_no_fault();
    expect_close(forward ? "rope_forward" : "rope_backward", dx.host(), want, kElementwise);
  }
}

// gate_up (N, 2I) -> h (N, I), stored F32 and BF16; and the backward.
TEST(EmulSwiglu, ForwardBothDtypesAndBackward) {
  constexpr int N = 9, I = 300;
  const std::vector<float> gu = random_values(static_cast<size_t>(N) * 2 * I, 4, 2.0f);
  const std::vector<float> dh = random_values(static_cast<size_t>(N) * I, 5);
  std::vector<float> want(static_cast<size_t>(N) * I);
  cpu().swiglu_forward(want.data(), gu.data(), N, I);
  DeviceArray<float> dgu(gu, "gate_up");
  DeviceArray<float> h32(want.size(), "h");
  emul_cuda::swiglu_forward(h32.get(), dgu.get(), N, I, nullptr);
  expect_no_fault();
  expect_close("swiglu_forward f32", h32.host(), want, kElementwise);
  DeviceArray<uint16_t> h16(want.size(), "h bf16");
  emul_cuda::swiglu_forward({h16.get(), DType::BF16}, dgu.get(), N, I, nullptr);
  expect_no_fault();
  expect_close("swiglu_forward bf16", widen_bf16(h16.host()), widen(want), kBf16Stored);

  std::vector<float> want_d(gu.size());
  cpu().swiglu_backward(want_d.data(), dh.data(), gu.data(), N, I);
  DeviceArray<float> ddh(dh, "dh"), dgrad(gu.size(), "dgate_up");
  emul_cuda::swiglu_backward(dgrad.get(), ddh.get(), dgu.get(), N, I, nullptr);
  expect_no_fault();
  expect_close("swiglu_backward", dgrad.host(), want_d, kElementwise);
}

// add and scale through the float4 path (aligned) and the scalar one (a pointer one float off),
// n not a multiple of 4.
TEST(EmulReduce, AddAndScaleVectorAndScalarPaths) {
  constexpr size_t n = 1001;
  const std::vector<float> a = random_values(n + 1, 6), b = random_values(n + 1, 7);
  for (const size_t off : {size_t{0}, size_t{1}}) {
    std::vector<float> want(n + 1);
    cpu().add(want.data() + off, a.data() + off, b.data() + off, n);
    DeviceArray<float> da(a, "a"), db(b, "b");
    emul_cuda::add(da.get() + off, da.get() + off, db.get() + off, n, nullptr);  // out aliases a
    expect_no_fault();
    std::vector<float> got = da.host();
    expect_close(off == 0 ? "add (float4)" : "add (scalar)",
                 std::vector<float>(got.begin() + off, got.begin() + off + n),
                 std::vector<float>(want.begin() + off, want.begin() + off + n), kElementwise);
    std::vector<float> want_s(a.begin() + off, a.begin() + off + n);
    cpu().scale(want_s.data(), 0.37f, n);
    DeviceArray<float> dx(a, "x");
    emul_cuda::scale(dx.get() + off, 0.37f, n, nullptr);
    expect_no_fault();
    got = dx.host();
    expect_close(off == 0 ? "scale (float4)" : "scale (scalar)",
                 std::vector<float>(got.begin() + off, got.begin() + off + n), want_s,
                 kElementwise);
  }
}

// scale_rows: each row times its own factor, as the CPU (a shape whose rows straddle the grid's
// strides), and nothing past the n rows touched.
TEST(EmulReduce, ScaleRowsAsTheCpu) {
  constexpr int n = 37, C = 129;
  const std::vector<float> x = random_values(static_cast<size_t>(n + 1) * C, 11);
  const std::vector<float> s = random_values(n, 12, 2.0f);
  std::vector<float> want = x;
  cpu().scale_rows(want.data(), s.data(), n, C);
  for (int j = 0; j < C; ++j) {  // the CPU's too: row i is x's times s[i], the extra row kept
    ASSERT_EQ(want[static_cast<size_t>(5) * C + j], x[static_cast<size_t>(5) * C + j] * s[5]);
    ASSERT_EQ(want[static_cast<size_t>(n) * C + j], x[static_cast<size_t>(n) * C + j]);
  }
  DeviceArray<float> dx(x, "x"), ds(s, "row_scale");
  emul_cuda::scale_rows(dx.get(), ds.get(), n, C, nullptr);
  expect_no_fault();
  expect_close("scale_rows", dx.host(), want, kElementwise);
}

// fp32 -> bf16 rounds exactly as the CPU (bits equal, denormals flushed, NaN quiet); and back.
TEST(EmulCast, Bf16BothWaysBitForBit) {
  std::vector<float> x = random_values(777, 8, 3.0f);
  x[0] = 1e-40f;       // a denormal: flushed
  x[1] = -1e-39f;      // negative denormal
  x[2] = 1.00390625f;  // a tie: to even
  x[3] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint16_t> want(x.size());
  cpu().cast_to_bf16(want.data(), x.data(), x.size());
  DeviceArray<float> dx(x, "x");
  DeviceArray<uint16_t> d16(x.size(), "bf16");
  emul_cuda::cast_f32_to_bf16(d16.get(), dx.get(), x.size(), nullptr);
  expect_no_fault();
  EXPECT_EQ(d16.host(), want);
  std::vector<float> back(x.size());
  cpu().cast_from_bf16(back.data(), want.data(), x.size());
  DeviceArray<float> d32(x.size(), "f32");
  emul_cuda::cast_bf16_to_f32(d32.get(), d16.get(), x.size(), nullptr);
  expect_no_fault();
  const std::vector<float> got = d32.host();
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(std::isnan(got[i]), std::isnan(back[i])) << i;
    if (!std::isnan(back[i])) {
      ASSERT_EQ(got[i], back[i]) << i;
    }
  }
}

// dropout.cu draws the CPU's mask bit for bit: F32 and BF16 in and out, an unaligned start, a
// non-zero offset, in place (the backward's use), and more elements than one block's threads.
TEST(EmulDropout, CpuMaskBitForBit) {
  constexpr size_t n = 1001;
  const std::vector<float> x = random_values(n + 1, 11, 2.0f);
  std::vector<uint16_t> x16(n + 1);
  to_bf16(x16.data(), x.data(), x.size());
  for (const size_t off : {size_t{0}, size_t{1}}) {
    for (const float p : {0.0f, 0.25f, 0.7f}) {
      std::vector<float> want(n);
      cpu().dropout(want.data(), x.data() + off, n, p, 0xabcdefull, 77);
      DeviceArray<float> dx(x, "x"), dout(n, "out");
      emul_cuda::dropout(dout.get(), dx.get() + off, n, p, 0xabcdefull, 77, nullptr);
      emul_cuda::dropout(dx.get() + off, dx.get() + off, n, p, 0xabcdefull, 77, nullptr);
      expect_no_fault();
      EXPECT_EQ(dout.host(), want) << "f32 p " << p << " offset " << off;
      const std::vector<float> in_place = dx.host();
      EXPECT_TRUE(std::equal(want.begin(), want.end(), in_place.begin() + off)) << p;
      std::vector<uint16_t> want16(n);
      cpu().dropout({want16.data(), DType::BF16}, ConstDevPtr{x16.data() + off, DType::BF16}, n, p,
                    5, 0);
      DeviceArray<uint16_t> d16(x16, "x bf16"), o16(n, "out bf16");
      emul_cuda::dropout({o16.get(), DType::BF16}, ConstDevPtr{d16.get() + off, DType::BF16}, n, p,
                         5, 0, nullptr);
      expect_no_fault();
      EXPECT_EQ(o16.host(), want16) << "bf16 p " << p << " offset " << off;
      std::vector<uint16_t> want_mixed(n);  // F32 in, BF16 out
      cpu().dropout({want_mixed.data(), DType::BF16}, x.data() + off, n, p, 6, 1);
      DeviceArray<float> dx2(x, "x");
      emul_cuda::dropout({o16.get(), DType::BF16}, dx2.get() + off, n, p, 6, 1, nullptr);
      expect_no_fault();
      EXPECT_EQ(o16.host(), want_mixed) << "f32->bf16 p " << p << " offset " << off;
    }
  }
}

// db (OC) += column sums of dout (N, OC): OC beyond one 32-column block, N beyond 32 row lanes.
TEST(EmulColumnSums, AddsColumnSums) {
  constexpr int N = 45, IC = 3, OC = 70;
  const std::vector<float> dout = random_values(static_cast<size_t>(N) * OC, 9);
  const std::vector<float> db0 = random_values(OC, 10);
  const std::vector<float> x(static_cast<size_t>(N) * IC, 0.0f), w(static_cast<size_t>(OC) * IC);
  std::vector<float> want = db0;
  cpu().matmul_backward(nullptr, nullptr, want.data(), dout.data(), x.data(), w.data(), N, IC, OC,
                        false);
  DeviceArray<float> ddout(dout, "dout"), ddb(db0, "db");
  emul_cuda::add_column_sums(ddb.get(), ddout.get(), N, OC, nullptr);
  expect_no_fault();
  expect_close("add_column_sums", ddb.host(), want, kElementwise);
}

}  // namespace
}  // namespace kiln::emul
