// The CUDA pointwise kernels (kernels/cuda/pointwise_ops.h) called directly on cudaMalloc'd
// buffers, against the CPU backend, without the CudaBackend class: exact bf16 rounding, the
// determinism of the reductions, and the ops' results. The GPU cases skip where no GPU is
// visible; the host-side checks (dtype errors, empty ops that must not launch) run everywhere.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend_parity_shapes.h"
#include "kiln/base/error.h"
#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/cuda_devices.h"
#include "kiln/kernels/cuda/pointwise_ops.h"
#include "kiln/kernels/cuda/stream_scratch.h"
#include "kiln/kernels/device/backend.h"

namespace kiln {
namespace {

using parity::expect_close;
using parity::random_values;

// n elements of T on the GPU (cudaMalloc), copied synchronously.
template <typename T>
class Gpu {
 public:
  explicit Gpu(size_t n) : n_(n) {
    KILN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), std::max<size_t>(n, 1) * sizeof(T)));
  }
  explicit Gpu(const std::vector<T>& h) : Gpu(h.size()) {
    KILN_CUDA_CHECK(cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;
  ~Gpu() { cudaFree(p_); }
  T* get() const { return p_; }
  std::vector<T> read() const {
    KILN_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(n_);
    KILN_CUDA_CHECK(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_;
};

template <typename T>
std::vector<double> widen(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if constexpr (std::is_same_v<T, uint16_t>) {
      out[i] = bf16_to_float(v[i]);
    } else {
      out[i] = v[i];
    }
  }
  return out;
}

std::vector<uint16_t> bf16_of(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  to_bf16(h.data(), v.data(), v.size());
  return h;
}

const CpuBackend& cpu() {
  static const CpuBackend b(false);
  return b;
}

class CudaPointwise : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaDevices d = cuda_devices();
    if (d.count == 0) GTEST_SKIP() << "no GPU visible: " << d.reason;
    KILN_CUDA_CHECK(cudaSetDevice(0));
    gpu = make_backend(DeviceRequest::kCuda, ComputeDType::kFp32, 0);
  }
  // The reductions' scratch both ways: from the stream-ordered pool where the device has one,
  // and from the persistent buffer used where it has none.
  std::vector<bool> scratch_modes() const {
    if (cuda::prepare_stream_pool(0)) return {true, false};
    return {false};
  }
  cudaStream_t stream = nullptr;  // the legacy stream: Gpu::read synchronises the device
  std::unique_ptr<Backend> gpu;   // owns the persistent scratch
  MemoryCounter counter;
};

// Host-side behaviour, no GPU needed: an F16 pointer is an error before anything launches, and
// empty ops return without launching (a launch without a driver would throw).
TEST(CudaPointwiseHost, UnsupportedDtypeIsAnErrorNamingTheOp) {
  try {
    cuda::rmsnorm_forward(DevPtr(nullptr, DType::F16), nullptr, nullptr,
                          static_cast<const float*>(nullptr), 1, 8, 1e-6f, nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rmsnorm_forward"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      cuda::embedding_forward(nullptr, nullptr, ConstDevPtr(nullptr, DType::F16), 1, 8, nullptr),
      Error);
}

TEST(CudaPointwiseHost, EmptyOpsLaunchNothing) {
  const float* none = nullptr;
  MemoryCounter counter;
  cuda::StreamScratchPool pool(cpu(), counter, /*stream_ordered=*/false);
  cuda::embedding_forward(nullptr, nullptr, none, 0, 8, nullptr);
  cuda::embedding_backward(nullptr, nullptr, nullptr, 0, SIZE_MAX, 0, 8, nullptr);
  cuda::rmsnorm_forward(static_cast<float*>(nullptr), nullptr, nullptr, none, 0, 8, 1e-6f, nullptr);
  cuda::add_rmsnorm_forward(nullptr, static_cast<float*>(nullptr), nullptr, nullptr, nullptr, none,
                            0, 8, 1e-6f, nullptr);
  cuda::rmsnorm_backward(nullptr, nullptr, nullptr, nullptr, none, nullptr, 0, 8, false, nullptr,
                         pool);
  cuda::rope_forward(nullptr, nullptr, nullptr, nullptr, 0, 2, 4, nullptr);
  cuda::rope_backward(nullptr, nullptr, nullptr, nullptr, 0, 2, 4, nullptr);
  cuda::swiglu_forward(static_cast<float*>(nullptr), nullptr, 0, 8, nullptr);
  cuda::swiglu_backward(nullptr, nullptr, nullptr, 0, 8, nullptr);
  cuda::add(nullptr, nullptr, nullptr, 0, nullptr);
  cuda::scale(nullptr, 2.0f, 0, nullptr);
  cuda::sum_squares(nullptr, nullptr, 0, nullptr, pool);
  EXPECT_EQ(cpu().memory_stats().in_use, 0u);  // nothing taken either
  cuda::clip_by_norm(nullptr, 0, nullptr, 1.0, nullptr);
  cuda::adamw_step(nullptr, nullptr, nullptr, nullptr, 0, {}, nullptr);
  cuda::sgd_step(nullptr, nullptr, nullptr, 0, {}, nullptr);
  cuda::cast_f32_to_bf16(nullptr, nullptr, 0, nullptr);
  cuda::cast_bf16_to_f32(nullptr, nullptr, 0, nullptr);
}

// Rounding is bit-exact with the CPU's to_bf16, on the values where conventions differ.
TEST_F(CudaPointwise, CastsRoundExactlyAsTheCpu) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.5f,
                          1e-40f,
                          -1e-40f,
                          1.17549435e-38f,
                          inf,
                          -inf,
                          std::numeric_limits<float>::quiet_NaN(),
                          3.4028235e38f,
                          1.00390625f /* tie, even below */,
                          1.01171875f /* tie, odd below */};
  const auto r = random_values(4099, 60, 100.0f);
  x.insert(x.end(), r.begin(), r.end());
  for (size_t i = 0; i < 4096; ++i) {  // arbitrary bit patterns
    uint32_t u = static_cast<uint32_t>(i) * 2654435761u;
    float f;
    std::memcpy(&f, &u, sizeof f);
    x.push_back(f);
  }
  Gpu<float> src(x);
  Gpu<uint16_t> dst(x.size());
  cuda::cast_f32_to_bf16(dst.get(), src.get(), x.size(), stream);
  KILN_CUDA_CHECK(cudaGetLastError());
  const std::vector<uint16_t> got = dst.read();
  EXPECT_EQ(got, bf16_of(x));
  Gpu<float> back(x.size());
  cuda::cast_bf16_to_f32(back.get(), dst.get(), x.size(), stream);
  const std::vector<float> wide = back.read();
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = bf16_to_float(got[i]);
    ASSERT_EQ(std::memcmp(&wide[i], &want, sizeof want), 0) << i;
  }
}

TEST_F(CudaPointwise, EmbeddingWithRepeatedIds) {
  const int V = 40, C = 896, N = 64;
  std::vector<int32_t> ids(N);
  for (int n = 0; n < N; ++n) ids[n] = (n * 13) % 7 == 0 ? 3 : (n * 29) % V;  // 3 repeats often
  const auto wte = random_values(static_cast<size_t>(V) * C, 61);
  const auto dout = random_values(static_cast<size_t>(N) * C, 62);
  const auto dwte0 = random_values(static_cast<size_t>(V) * C, 63);
  Gpu<int32_t> ids_d(ids);
  for (const bool bf16 : {false, true}) {
    Gpu<float> w32(wte);
    Gpu<uint16_t> w16(bf16_of(wte));
    const ConstDevPtr w = bf16 ? ConstDevPtr(w16.get(), DType::BF16) : ConstDevPtr(w32.get());
    Gpu<float> out(static_cast<size_t>(N) * C);
    cuda::embedding_forward(out.get(), ids_d.get(), w, N, C, stream);
    std::vector<float> want(static_cast<size_t>(N) * C);
    cpu().embedding_forward(want.data(), ids.data(), wte.data(), N, C);
    EXPECT_EQ(out.read(), want);
  }
  std::vector<float> want = dwte0;
  cpu().embedding_backward(want.data(), dout.data(), ids.data(), N, C);
  Gpu<float> dout_d(dout);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    Gpu<float> dwte(dwte0);
    cuda::embedding_backward(dwte.get(), dout_d.get(), ids_d.get(), 0, SIZE_MAX, N, C, stream);
    const std::vector<float> got = dwte.read();
    EXPECT_EQ(got, want) << "token-order float sums, as the CPU adds them";
    if (run == 0) first = got;
    EXPECT_EQ(got, first) << "not deterministic";
  }
}

TEST_F(CudaPointwise, RmsNormForwardAndBackward) {
  for (const int C : {7, 896, 1536}) {
    const int N = 130;  // three 64-row chunks of the dw reduction
    const size_t n = static_cast<size_t>(N) * C;
    const auto x = random_values(n, 64, 2.0f, 0.3f), w = random_values(C, 65, 0.2f, 1.0f);
    const auto b = random_values(n, 66), dout = random_values(n, 67);
    const auto dw0 = random_values(C, 68), dx0 = random_values(n, 69);
    std::vector<float> want_out(n), want_rstd(N), want_sum(n);
    cpu().add_rmsnorm_forward(want_sum.data(), want_out.data(), want_rstd.data(), x.data(),
                              b.data(), w.data(), N, C, 1e-6f);
    Gpu<float> xd(x), bd(b), wd(w), sum(n), out(n), rstd(N);
    Gpu<uint16_t> w16(bf16_of(w)), out16(n);
    cuda::add_rmsnorm_forward(sum.get(), out.get(), rstd.get(), xd.get(), bd.get(), wd.get(), N, C,
                              1e-6f, stream);
    expect_close("sum", widen(sum.read()), widen(want_sum), 0);
    expect_close("rstd", widen(rstd.read()), widen(want_rstd), 1e-6);
    expect_close("out", widen(out.read()), widen(want_out), 1e-6);
    // bf16 weight (its values are bf16 already) and bf16 output: one rounding of the same value.
    cuda::rmsnorm_forward(DevPtr(out16.get(), DType::BF16), rstd.get(), sum.get(),
                          ConstDevPtr(w16.get(), DType::BF16), N, C, 1e-6f, stream);
    expect_close("out bf16", widen(out16.read()), widen(want_out), 8e-3);

    std::vector<float> want_dx = dx0, want_dw = dw0;
    cpu().rmsnorm_backward(want_dx.data(), want_dw.data(), dout.data(), want_sum.data(), w.data(),
                           want_rstd.data(), N, C, /*accumulate=*/true);
    for (const bool ordered : scratch_modes()) {
      SCOPED_TRACE(ordered ? "stream-ordered scratch" : "persistent scratch");
      cuda::StreamScratchPool pool(*gpu, counter, ordered);
      Gpu<float> dx(dx0), dw(dw0), doutd(dout);
      std::vector<float> first_dw;
      for (int run = 0; run < 2; ++run) {
        KILN_CUDA_CHECK(
            cudaMemcpy(dw.get(), dw0.data(), C * sizeof(float), cudaMemcpyHostToDevice));
        cuda::rmsnorm_backward(dx.get(), dw.get(), doutd.get(), sum.get(),
                               ConstDevPtr(w16.get(), DType::BF16), rstd.get(), N, C,
                               /*accumulate=*/run == 0, stream, pool);
        if (run == 0) {
          expect_close("dx", widen(dx.read()), widen(want_dx), 1e-5);
          first_dw = dw.read();
          expect_close("dw", widen(first_dw), widen(want_dw), 1e-5);
        } else {
          EXPECT_EQ(dw.read(), first_dw) << "dw not deterministic";
        }
      }
    }
  }
}

TEST_F(CudaPointwise, RopeSwigluAndFlatOps) {
  const int N = 9, heads = 14, D = 64;
  const size_t n = static_cast<size_t>(N) * heads * D;
  const parity::RopeTables t = parity::rope_tables(D);
  const std::vector<int32_t> pos = {0, 1, 2, 63, 5, 8, 13, 21, 34};
  const auto x = random_values(n, 70);
  std::vector<float> want = x;
  cpu().rope_forward(want.data(), pos.data(), t.cos.data(), t.sin.data(), N, heads, D);
  Gpu<float> xd(x), cs(t.cos), sn(t.sin);
  Gpu<int32_t> pd(pos);
  cuda::rope_forward(xd.get(), pd.get(), cs.get(), sn.get(), N, heads, D, stream);
  expect_close("rope", widen(xd.read()), widen(want), 1e-6);
  cuda::rope_backward(xd.get(), pd.get(), cs.get(), sn.get(), N, heads, D, stream);
  expect_close("rope inverse", widen(xd.read()), widen(x), 1e-5);

  const int rows = 3, I = 4865;  // gate_up (rows, 2I)
  const size_t m = static_cast<size_t>(rows) * I;
  const auto gate = random_values(m, 71, 3.0f), up = random_values(m, 72);
  const auto gate_up = random_values(2 * m, 73, 3.0f);
  const auto dh = random_values(m, 78);
  std::vector<float> h(m), dgu(2 * m);
  cpu().swiglu_forward(h.data(), gate_up.data(), rows, I);
  cpu().swiglu_backward(dgu.data(), dh.data(), gate_up.data(), rows, I);
  Gpu<float> gd(gate), ud(up), gud(gate_up), dhd(dh), hd(m), dgud(2 * m);
  Gpu<uint16_t> h16(m);
  cuda::swiglu_forward(hd.get(), gud.get(), rows, I, stream);
  cuda::swiglu_forward(DevPtr(h16.get(), DType::BF16), gud.get(), rows, I, stream);
  cuda::swiglu_backward(dgud.get(), dhd.get(), gud.get(), rows, I, stream);
  expect_close("swiglu", widen(hd.read()), widen(h), 1e-6);
  expect_close("swiglu bf16", widen(h16.read()), widen(h), 8e-3);
  expect_close("dgate_up", widen(dgud.read()), widen(dgu), 1e-6);

  // add and scale, aligned (float4 path) and one float off (scalar path)
  for (const size_t off : {0, 1}) {
    std::vector<float> sum(m), scaled = gate;
    cpu().add(sum.data(), gate.data() + off, up.data() + off, m - off);
    cpu().scale(scaled.data() + off, 0.5f, m - off);
    Gpu<float> out(m), g2(gate);
    cuda::add(out.get() + off, gd.get() + off, ud.get() + off, m - off, stream);
    cuda::scale(g2.get() + off, 0.5f, m - off, stream);
    const auto got = out.read();
    expect_close("add", widen(std::vector<float>(got.begin() + off, got.end())),
                 widen(std::vector<float>(sum.begin(), sum.end() - off)), 0);
    expect_close("scale", widen(g2.read()), widen(scaled), 0);
  }
}

TEST_F(CudaPointwise, SumSquaresIsDeterministicAndClipReadsTheDeviceNorm) {
  const size_t n = (size_t{1} << 20) + 12345;
  const auto x = random_values(n, 73);
  Gpu<float> xd(x);
  double want = 0.5;
  cpu().sum_squares(&want, x.data(), n);
  std::vector<double> runs;
  for (const bool ordered : scratch_modes()) {
    cuda::StreamScratchPool pool(*gpu, counter, ordered);
    for (int run = 0; run < 2; ++run) {
      Gpu<double> s(std::vector<double>{0.5});
      cuda::sum_squares(s.get(), xd.get(), n, stream, pool);
      runs.push_back(s.read()[0]);
    }
  }
  EXPECT_NEAR(runs[0], want, 1e-12 * want);
  for (const double r : runs) EXPECT_EQ(r, runs[0]);  // either scratch, every run
  for (const double max_norm : {1.0, 1e6}) {
    Gpu<double> sq(std::vector<double>{runs[0]});
    Gpu<float> g(x);
    cuda::clip_by_norm(g.get(), n, sq.get(), max_norm, stream);
    std::vector<float> expected = x;
    cpu().clip_by_norm(expected.data(), n, &runs[0], max_norm);
    EXPECT_EQ(g.read(), expected) << "max_norm " << max_norm;
  }
}

TEST_F(CudaPointwise, OptimizerSteps) {
  const AdamWStep a{0.9f, 0.999f, 1e-3f, 1.0f / std::sqrt(1.0f - 0.999f), 1e-8f, 0.9999f};
  for (const size_t off : {0, 1}) {
    const size_t n = 4099;
    const auto p = random_values(n, 74), m = random_values(n, 75, 0.1f), g = random_values(n, 77);
    auto v = random_values(n, 76, 0.1f);
    for (auto& e : v) e *= e;
    std::vector<float> wp = p, wm = m, wv = v;
    cpu().adamw_step(wp.data() + off, wm.data() + off, wv.data() + off, g.data() + off, n - off, a);
    Gpu<float> pd(p), md(m), vd(v), gd(g);
    cuda::adamw_step(pd.get() + off, md.get() + off, vd.get() + off, gd.get() + off, n - off, a,
                     stream);
    expect_close("adamw p", widen(pd.read()), widen(wp), 1e-6);
    expect_close("adamw m", widen(md.read()), widen(wm), 1e-6);
    expect_close("adamw v", widen(vd.read()), widen(wv), 1e-6);
    for (const SgdStep s : {SgdStep{0.1f, 0.01f, 0.0f, true}, SgdStep{0.1f, 0.01f, 0.9f, true},
                            SgdStep{0.1f, 0.0f, 0.9f, false}}) {
      std::vector<float> sp = p, sm = m;
      cpu().sgd_step(sp.data(), s.momentum > 0 ? sm.data() : nullptr, g.data(), n, s);
      Gpu<float> pd2(p), md2(m);
      cuda::sgd_step(pd2.get(), s.momentum > 0 ? md2.get() : nullptr, gd.get(), n, s, stream);
      expect_close("sgd p", widen(pd2.read()), widen(sp), 1e-6);
      expect_close("sgd m", widen(md2.read()), widen(sm), 1e-6);
    }
  }
}

}  // namespace
}  // namespace kiln
