// Every op of the CUDA backend against the CPU reference (kernels/cpu), on the same inputs. Needs
// a GPU: every test skips with the reason on a machine without one (CI), where the file still
// compiles. fp32: the GPU's products run in full fp32 (CUBLAS_COMPUTE_32F), so results match to
// accumulation order. bf16: inputs are rounded to bf16 on the host first, so a product of bf16
// values (exact in fp32) differs from the fp32 reference only by accumulation order too; where
// the GPU rounds an intermediate itself (the cross-entropy's logit gradients, flash attention's
// tiles) the tolerance is bf16's.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "common/grad_check.h"
#include "kernels/parity_util.h"
#include "kiln/kernels/backend.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cuda/cuda_backend.h"
#include "kiln/kernels/cuda/cuda_devices.h"

namespace kiln {
namespace {

using testing::bf16_bits;
using testing::bf16_rounded;
using testing::DeviceMem;
using testing::expect_close;
using testing::random_vec;
using testing::widen;

constexpr double kFp32Tol = 3e-5;  // relative to the largest reference value
constexpr double kBf16Tol = 2e-2;

std::unique_ptr<Backend> gpu_backend(ComputeDType t) {
  return make_backend(DeviceRequest::kCuda, t, 0);
}

class Parity : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaDevices d = cuda_devices();
    if (d.count == 0) GTEST_SKIP() << "no GPU visible (" << d.reason << ")";
  }
  CpuBackend cpu_;
};

TEST_F(Parity, TinyMemoryCopiesAndStreams) {
  const auto be = gpu_backend(ComputeDType::kFp32);
  DeviceMem m(*be);
  const std::vector<float> src = random_vec(1000, 1);
  float* a = m.up(src);
  float* b = m.zeros<float>(1000);
  be->copy_on_device(b, a, 1000 * sizeof(float));
  EXPECT_EQ(m.down(b, 1000), src);
  be->fill_zero(b, 500 * sizeof(float));
  std::vector<float> want = src;
  std::fill(want.begin(), want.begin() + 500, 0.0f);
  EXPECT_EQ(m.down(b, 1000), want);
  // Pinned host memory, and another stream ordered after the compute stream by an event.
  auto* pinned = static_cast<float*>(be->alloc_pinned(1000 * sizeof(float)));
  const std::unique_ptr<Stream> other = be->create_stream();
  be->scale(a, 2.0f, 1000);
  other->wait(be->compute_stream().record());
  other->synchronize();
  be->copy_to_host(pinned, a, 1000 * sizeof(float));
  be->synchronize();
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(pinned[i], 2.0f * src[i]) << i;
  be->free_pinned(pinned);
}

// matmul_forward and matmul_backward (bias, accumulate, dw/db +=) on one backend vs the CPU.
void check_matmul(const Backend& gpu, const CpuBackend& cpu, bool bf16, bool bf16_weights, int N,
                  int IC, int OC) {
  SCOPED_TRACE(::testing::Message() << gpu.name() << " N=" << N << " IC=" << IC << " OC=" << OC
                                    << (bf16_weights ? " bf16 weights" : ""));
  const auto maybe_round = [bf16](std::vector<float> v) { return bf16 ? bf16_rounded(v) : v; };
  const std::vector<float> x = maybe_round(random_vec(size_t(N) * IC, 11));
  const std::vector<float> w = maybe_round(random_vec(size_t(OC) * IC, 12, 0.1f));
  const std::vector<float> b = maybe_round(random_vec(OC, 13));
  const std::vector<float> dout = maybe_round(random_vec(size_t(N) * OC, 14));
  const std::vector<float> dx0 = random_vec(size_t(N) * IC, 15);
  const std::vector<float> dw0 = random_vec(size_t(OC) * IC, 16);
  const std::vector<float> db0 = random_vec(OC, 17);
  DeviceMem m(gpu);
  const float* dx_ = m.up(x);
  ConstDevPtr dw_ptr = m.up(w);
  ConstDevPtr db_ptr = m.up(b);
  if (bf16_weights) {
    dw_ptr = ConstDevPtr(m.up(bf16_bits(w)), DType::BF16);
    db_ptr = ConstDevPtr(m.up(bf16_bits(b)), DType::BF16);
  }
  float* out = m.zeros<float>(size_t(N) * OC);
  gpu.matmul_forward(out, dx_, dw_ptr, db_ptr, N, IC, OC);
  std::vector<float> want(size_t(N) * OC);
  cpu.matmul_forward(want.data(), x.data(), w.data(), b.data(), N, IC, OC);
  expect_close(m.down(out, want.size()), want, kFp32Tol, "out");

  for (const bool accumulate : {false, true}) {
    float* gdx = m.up(dx0);
    float* gdw = m.up(dw0);
    float* gdb = m.up(db0);
    gpu.matmul_backward(gdx, gdw, gdb, m.up(dout), dx_, dw_ptr, N, IC, OC, accumulate);
    std::vector<float> cdx = dx0, cdw = dw0, cdb = db0;
    cpu.matmul_backward(cdx.data(), cdw.data(), cdb.data(), dout.data(), x.data(), w.data(), N, IC,
                        OC, accumulate);
    expect_close(m.down(gdx, cdx.size()), cdx, kFp32Tol, accumulate ? "dx +=" : "dx");
    expect_close(m.down(gdw, cdw.size()), cdw, kFp32Tol, "dw");
    expect_close(m.down(gdb, cdb.size()), cdb, 1e-5, "db");
  }
  // No input gradient, no bias.
  float* gdw = m.up(dw0);
  gpu.matmul_backward(nullptr, gdw, nullptr, m.up(dout), dx_, dw_ptr, N, IC, OC, false);
  std::vector<float> cdw = dw0;
  cpu.matmul_backward(nullptr, cdw.data(), nullptr, dout.data(), x.data(), w.data(), N, IC, OC,
                      false);
  expect_close(m.down(gdw, cdw.size()), cdw, kFp32Tol, "dw without dx");
}

TEST_F(Parity, SmallMatmulFp32) {
  const auto be = gpu_backend(ComputeDType::kFp32);
  check_matmul(*be, cpu_, false, false, 37, 64, 48);
  check_matmul(*be, cpu_, false, false, 1, 96, 130);  // one row, odd sizes
  check_matmul(*be, cpu_, false, false, 256, 896, 128);
}

TEST_F(Parity, MatmulBiasAtAnOddFloatOffset) {
  // An fp32 bias sliced from a flat unit need not be 16-byte aligned; cuBLASLt's bias epilogue
  // has no alignment preference, so the backend must stage it (else "misaligned address").
  const auto be = gpu_backend(ComputeDType::kFp32);
  const int N = 33, IC = 64, OC = 48;
  const std::vector<float> x = random_vec(size_t(N) * IC, 21);
  const std::vector<float> w = random_vec(size_t(OC) * IC, 22, 0.1f);
  std::vector<float> padded_b = random_vec(OC + 1, 23);
  DeviceMem m(*be);
  const float* bias = m.up(padded_b) + 1;  // 4 bytes past a 256-byte aligned allocation
  float* out = m.zeros<float>(size_t(N) * OC);
  be->matmul_forward(out, m.up(x), m.up(w), bias, N, IC, OC);
  std::vector<float> want(size_t(N) * OC);
  cpu_.matmul_forward(want.data(), x.data(), w.data(), padded_b.data() + 1, N, IC, OC);
  expect_close(m.down(out, want.size()), want, kFp32Tol, "out with an offset bias");
}

TEST_F(Parity, SmallMatmulBf16) {
  const auto be = gpu_backend(ComputeDType::kBf16);
  check_matmul(*be, cpu_, true, false, 37, 64, 48);  // F32 operands rounded on the GPU
  check_matmul(*be, cpu_, true, true, 37, 64, 48);   // BF16 weights and bias as gathered
  check_matmul(*be, cpu_, true, true, 256, 896, 128);
}

TEST_F(Parity, MatmulAlgorithmsAreCachedPerShape) {
  const auto be = gpu_backend(ComputeDType::kBf16);
  const auto* cuda = dynamic_cast<const CudaBackend*>(be.get());
  ASSERT_NE(cuda, nullptr);
  DeviceMem m(*be);
  const float* x = m.up(random_vec(64 * 32, 1));
  const float* w = m.up(random_vec(16 * 32, 2));
  float* out = m.zeros<float>(64 * 16);
  be->matmul_forward(out, x, w, static_cast<const float*>(nullptr), 64, 32, 16);
  const size_t after_one = cuda->cached_gemm_plans();
  EXPECT_EQ(after_one, 1u);
  be->matmul_forward(out, x, w, static_cast<const float*>(nullptr), 64, 32, 16);
  EXPECT_EQ(cuda->cached_gemm_plans(), after_one);
  be->matmul_forward(out, x, w, static_cast<const float*>(nullptr), 32, 32, 16);
  EXPECT_EQ(cuda->cached_gemm_plans(), after_one + 1);
}

// Targets with every third row ignored (and the first two).
std::vector<int32_t> some_targets(int N, int V, uint32_t seed) {
  std::vector<int32_t> t(N);
  for (int n = 0; n < N; ++n) {
    t[n] = (n % 3 == 2 || n < 2) ? kIgnoreIndex : static_cast<int32_t>((n * 7919u + seed) % V);
  }
  return t;
}

struct CeCase {
  int N, C, V;
  bool bf16, bf16_weight, grad;
};

void check_cross_entropy(const Backend& gpu, const CpuBackend& cpu, const CeCase& c) {
  SCOPED_TRACE(::testing::Message()
               << gpu.name() << " N=" << c.N << " C=" << c.C << " V=" << c.V
               << (c.bf16_weight ? " bf16 weight" : "") << (c.grad ? "" : " loss only"));
  const auto maybe_round = [&c](std::vector<float> v) { return c.bf16 ? bf16_rounded(v) : v; };
  const std::vector<float> x = maybe_round(random_vec(size_t(c.N) * c.C, 21));
  const std::vector<float> w = maybe_round(random_vec(size_t(c.V) * c.C, 22, 0.2f));
  const std::vector<int32_t> targets = some_targets(c.N, c.V, 5);
  const float scale = 1.0f / 97.0f;
  const std::vector<float> dw0 = random_vec(size_t(c.V) * c.C, 23, 0.01f);
  DeviceMem m(gpu);
  ConstDevPtr gw = m.up(w);
  if (c.bf16_weight) gw = ConstDevPtr(m.up(bf16_bits(w)), DType::BF16);
  double* loss = m.up(std::vector<double>{0.25});                           // added to
  float* gdx = c.grad ? m.up(random_vec(size_t(c.N) * c.C, 24)) : nullptr;  // overwritten
  float* gdw = c.grad ? m.up(dw0) : nullptr;
  const int targeted = rows_with_target(targets.data(), c.N);
  gpu.cross_entropy(loss, gdx, gdw, m.up(x), gw, m.up(targets), c.N, targeted, c.C, c.V, scale);
  std::vector<float> cdx(size_t(c.N) * c.C), cdw = dw0;
  double want = 0.25;
  cpu.cross_entropy(&want, c.grad ? cdx.data() : nullptr, c.grad ? cdw.data() : nullptr, x.data(),
                    w.data(), targets.data(), c.N, targeted, c.C, c.V, scale);
  const double got = m.down(loss, 1)[0];
  EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << "loss sum";
  if (!c.grad) return;
  // The logit gradients are rounded to bf16 on the GPU under bf16.
  const double tol = c.bf16 ? kBf16Tol : kFp32Tol;
  expect_close(m.down(gdx, cdx.size()), cdx, tol, "dx");
  expect_close(m.down(gdw, cdw.size()), cdw, tol, "dw");
}

TEST_F(Parity, SmallCrossEntropyFp32) {
  const auto be = gpu_backend(ComputeDType::kFp32);
  check_cross_entropy(*be, cpu_, {50, 64, 1000, false, false, true});
  check_cross_entropy(*be, cpu_, {50, 64, 1000, false, false, false});
}

TEST_F(Parity, SmallCrossEntropyBf16) {
  const auto be = gpu_backend(ComputeDType::kBf16);
  check_cross_entropy(*be, cpu_, {50, 64, 1000, true, false, true});
  check_cross_entropy(*be, cpu_, {50, 64, 1000, true, true, true});
  check_cross_entropy(*be, cpu_, {50, 64, 1000, true, true, false});
}

TEST_F(Parity, CrossEntropyManyChunksQwenVocabulary) {
  // 151936 logits per row: chunks of ~432 rows, so 1000 rows take three (and padding).
  for (const ComputeDType t : {ComputeDType::kFp32, ComputeDType::kBf16}) {
    const auto be = gpu_backend(t);
    const bool bf16 = t == ComputeDType::kBf16;
    check_cross_entropy(*be, cpu_, {1000, 32, 151936, bf16, bf16, true});
  }
}

TEST_F(Parity, TinyCrossEntropyAllIgnoredAndRepeatable) {
  const auto be = gpu_backend(ComputeDType::kBf16);
  DeviceMem m(*be);
  const int N = 40, C = 16, V = 300;
  const float* x = m.up(random_vec(N * C, 31));
  const float* w = m.up(random_vec(V * C, 32));
  // All ignored: loss unchanged, dx zero, dw unchanged.
  double* loss = m.up(std::vector<double>{1.5});
  float* dx = m.up(random_vec(N * C, 33));
  const std::vector<float> dw0 = random_vec(V * C, 34);
  float* dw = m.up(dw0);
  be->cross_entropy(loss, dx, dw, x, w, m.up(std::vector<int32_t>(N, kIgnoreIndex)), N, 0, C, V,
                    1.0f);
  EXPECT_EQ(m.down(loss, 1)[0], 1.5);
  EXPECT_EQ(m.down(dx, N * C), std::vector<float>(N * C, 0.0f));
  EXPECT_EQ(m.down(dw, V * C), dw0);
  // Twice the same call: bit for bit the same (no float atomics anywhere).
  const std::vector<int32_t> targets = some_targets(N, V, 9);
  const int32_t* t = m.up(targets);
  std::vector<double> losses;
  std::vector<std::vector<float>> dws;
  for (int rep = 0; rep < 2; ++rep) {
    double* l = m.up(std::vector<double>{0.0});
    float* g = m.up(dw0);
    be->cross_entropy(l, dx, g, x, w, t, N, rows_with_target(targets.data(), N), C, V, 0.1f);
    losses.push_back(m.down(l, 1)[0]);
    dws.push_back(m.down(g, V * C));
  }
  EXPECT_EQ(losses[0], losses[1]);
  EXPECT_EQ(dws[0], dws[1]);
}

// ---- The ops forwarded to the pointwise and attention kernels ----

TEST_F(Parity, SmallElementwiseOps) {
  const auto be = gpu_backend(ComputeDType::kFp32);
  DeviceMem m(*be);
  const int N = 33, C = 96, V = 50;
  const std::vector<int32_t> ids = {3, 7,  3,  49, 0, 7, 7, 12, 3,  1,  2,  3,  4,  5,  6,  7, 8,
                                    9, 10, 11, 3,  3, 3, 3, 40, 41, 42, 43, 44, 45, 46, 47, 48};
  const std::vector<float> wte = random_vec(V * C, 1), x = random_vec(N * C, 2),
                           y = random_vec(N * C, 3), wn = random_vec(C, 4, 0.1f, 1.0f),
                           dout = random_vec(N * C, 5);
  {  // embedding
    float* out = m.zeros<float>(N * C);
    be->embedding_forward(out, m.up(ids), m.up(wte), N, C);
    std::vector<float> want(N * C);
    cpu_.embedding_forward(want.data(), ids.data(), wte.data(), N, C);
    expect_close(m.down(out, want.size()), want, 0, "embedding_forward");
    float* dwte = m.up(wte);
    be->embedding_backward(dwte, m.up(dout), m.up(ids), N, C);
    std::vector<float> cd = wte;
    cpu_.embedding_backward(cd.data(), dout.data(), ids.data(), N, C);
    expect_close(m.down(dwte, cd.size()), cd, 1e-6, "embedding_backward");
  }
  {  // RMSNorm, fused add + RMSNorm, backward
    float* out = m.zeros<float>(N * C);
    float* rstd = m.zeros<float>(N);
    be->rmsnorm_forward(out, rstd, m.up(x), m.up(wn), N, C, 1e-6f);
    std::vector<float> want(N * C), crstd(N);
    cpu_.rmsnorm_forward(want.data(), crstd.data(), x.data(), wn.data(), N, C, 1e-6f);
    expect_close(m.down(out, want.size()), want, 1e-5, "rmsnorm_forward");
    expect_close(m.down(rstd, N), crstd, 1e-5, "rstd");
    float* sum = m.zeros<float>(N * C);
    be->add_rmsnorm_forward(sum, out, rstd, m.up(x), m.up(y), m.up(wn), N, C, 1e-6f);
    std::vector<float> csum(N * C);
    cpu_.add_rmsnorm_forward(csum.data(), want.data(), crstd.data(), x.data(), y.data(), wn.data(),
                             N, C, 1e-6f);
    expect_close(m.down(sum, csum.size()), csum, 1e-6, "add_rmsnorm sum");
    expect_close(m.down(out, want.size()), want, 1e-5, "add_rmsnorm out");
    for (const bool acc : {false, true}) {
      float* dx = m.up(y);
      float* dw = m.up(wn);
      be->rmsnorm_backward(dx, dw, m.up(dout), m.up(x), m.up(wn), m.up(crstd), N, C, acc);
      std::vector<float> cdx = y, cdw = wn;
      cpu_.rmsnorm_backward(cdx.data(), cdw.data(), dout.data(), x.data(), wn.data(), crstd.data(),
                            N, C, acc);
      expect_close(m.down(dx, cdx.size()), cdx, 1e-5, "rmsnorm_backward dx");
      expect_close(m.down(dw, cdw.size()), cdw, 1e-5, "rmsnorm_backward dw");
    }
  }
  {  // SwiGLU, add, scale, sum of squares, clipping
    const size_t n = N * C;
    // gate_up (N, 2C): rows [x | y]
    std::vector<float> gate_up;
    for (int r = 0; r < N; ++r) {
      gate_up.insert(gate_up.end(), x.begin() + r * C, x.begin() + (r + 1) * C);
      gate_up.insert(gate_up.end(), y.begin() + r * C, y.begin() + (r + 1) * C);
    }
    float* h = m.zeros<float>(n);
    be->swiglu_forward(h, m.up(gate_up), N, C);
    std::vector<float> ch(n);
    cpu_.swiglu_forward(ch.data(), gate_up.data(), N, C);
    expect_close(m.down(h, n), ch, 1e-6, "swiglu_forward");
    float* dgu = m.zeros<float>(2 * n);
    be->swiglu_backward(dgu, m.up(dout), m.up(gate_up), N, C);
    std::vector<float> cdgu(2 * n);
    cpu_.swiglu_backward(cdgu.data(), dout.data(), gate_up.data(), N, C);
    expect_close(m.down(dgu, 2 * n), cdgu, 1e-5, "swiglu_backward");
    float* s = m.zeros<float>(n);
    be->add(s, m.up(x), m.up(y), n);
    std::vector<float> cs(n);
    cpu_.add(cs.data(), x.data(), y.data(), n);
    expect_close(m.down(s, n), cs, 0, "add");
    be->scale(s, 0.5f, n);
    cpu_.scale(cs.data(), 0.5f, n);
    expect_close(m.down(s, n), cs, 0, "scale");
    double* sq = m.up(std::vector<double>{2.0});
    be->sum_squares(sq, s, n);
    double csq = 2.0;
    cpu_.sum_squares(&csq, cs.data(), n);
    EXPECT_NEAR(m.down(sq, 1)[0], csq, 1e-9 * csq) << "sum_squares";
    be->clip_by_norm(s, n, sq, 1.0);
    cpu_.clip_by_norm(cs.data(), n, &csq, 1.0);
    expect_close(m.down(s, n), cs, 1e-6, "clip_by_norm");
  }
}

TEST_F(Parity, SmallRopeAndOptimizers) {
  const auto be = gpu_backend(ComputeDType::kFp32);
  DeviceMem m(*be);
  const int N = 20, heads = 3, D = 64, max_pos = 64;
  std::vector<float> cos_t(max_pos * D / 2), sin_t(max_pos * D / 2);
  for (int p = 0; p < max_pos; ++p) {
    for (int d = 0; d < D / 2; ++d) {
      const double a = p * std::pow(10000.0, -2.0 * d / D);
      cos_t[p * D / 2 + d] = static_cast<float>(std::cos(a));
      sin_t[p * D / 2 + d] = static_cast<float>(std::sin(a));
    }
  }
  std::vector<int32_t> pos(N);
  for (int n = 0; n < N; ++n) pos[n] = (n * 5) % max_pos;
  const std::vector<float> x = random_vec(N * heads * D, 1);
  for (const bool backward : {false, true}) {
    float* gx = m.up(x);
    std::vector<float> cx = x;
    if (backward) {
      be->rope_backward(gx, m.up(pos), m.up(cos_t), m.up(sin_t), N, heads, D);
      cpu_.rope_backward(cx.data(), pos.data(), cos_t.data(), sin_t.data(), N, heads, D);
    } else {
      be->rope_forward(gx, m.up(pos), m.up(cos_t), m.up(sin_t), N, heads, D);
      cpu_.rope_forward(cx.data(), pos.data(), cos_t.data(), sin_t.data(), N, heads, D);
    }
    expect_close(m.down(gx, cx.size()), cx, 1e-6, backward ? "rope_backward" : "rope_forward");
  }
  const size_t n = 5000;
  const std::vector<float> p = random_vec(n, 2), mo = random_vec(n, 3, 0.1f),
                           v = bf16_rounded(random_vec(n, 4, 0.0f, 0.5f)), g = random_vec(n, 5);
  {
    const AdamWStep s{0.9f, 0.95f, 1e-3f, 1.2f, 1e-8f, 0.999f};
    float* gp = m.up(p);
    float* gm = m.up(mo);
    float* gv = m.up(v);
    be->adamw_step(gp, gm, gv, m.up(g), n, s);
    std::vector<float> cp = p, cm = mo, cv = v;
    cpu_.adamw_step(cp.data(), cm.data(), cv.data(), g.data(), n, s);
    expect_close(m.down(gp, n), cp, 1e-6, "adamw p");
    expect_close(m.down(gm, n), cm, 1e-6, "adamw m");
    expect_close(m.down(gv, n), cv, 1e-6, "adamw v");
  }
  for (const bool first : {true, false}) {
    const SgdStep s{0.01f, 0.1f, 0.9f, first};
    float* gp = m.up(p);
    float* gm = m.up(mo);
    be->sgd_step(gp, gm, m.up(g), n, s);
    std::vector<float> cp = p, cm = mo;
    cpu_.sgd_step(cp.data(), cm.data(), g.data(), n, s);
    expect_close(m.down(gp, n), cp, 1e-6, "sgd p");
    expect_close(m.down(gm, n), cm, 1e-6, "sgd m");
  }
}

// Attention forward and backward vs the CPU: the reference kernels under fp32 (and for head
// sizes the flash kernels do not take), the flash kernels under bf16 for head_dim 64 and 128.
void check_attention(const Backend& gpu, const CpuBackend& cpu, const AttnShape& s, double tol) {
  SCOPED_TRACE(::testing::Message() << gpu.name() << " B=" << s.B << " T=" << s.T << " H=" << s.H
                                    << " KV=" << s.KV << " D=" << s.D);
  const size_t nq = size_t(s.B) * s.T * s.H * s.D, nk = size_t(s.B) * s.T * s.KV * s.D;
  const size_t nl = size_t(s.B) * s.H * s.T;
  // Under bf16 the inputs are bf16 values already, so only the kernels' own roundings differ.
  const bool bf16 = gpu.compute_dtype() == ComputeDType::kBf16;
  const auto maybe_round = [bf16](std::vector<float> x) { return bf16 ? bf16_rounded(x) : x; };
  const std::vector<float> q = maybe_round(random_vec(nq, 1)), k = maybe_round(random_vec(nk, 2)),
                           v = maybe_round(random_vec(nk, 3)), dy = maybe_round(random_vec(nq, 4));
  // Two documents per row: the second starts at T / 3.
  std::vector<int32_t> doc(size_t(s.B) * s.T);
  for (int b = 0; b < s.B; ++b) {
    for (int t = 0; t < s.T; ++t) doc[size_t(b) * s.T + t] = t < s.T / 3 ? 0 : s.T / 3;
  }
  DeviceMem m(gpu);
  float* y = m.zeros<float>(nq);
  float* lse = m.zeros<float>(nl);
  const float *gq = m.up(q), *gk = m.up(k), *gv = m.up(v);
  const int32_t* gdoc = m.up(doc);
  gpu.attention_forward(y, lse, gq, gk, gv, gdoc, s);
  std::vector<float> cy(nq), clse(nl);
  cpu.attention_forward(cy.data(), clse.data(), q.data(), k.data(), v.data(), doc.data(), s);
  expect_close(m.down(y, nq), cy, tol, "attention y");
  expect_close(m.down(lse, nl), clse, tol, "attention lse");
  float* dq = m.zeros<float>(nq);
  float* dk = m.zeros<float>(nk);
  float* dv = m.zeros<float>(nk);
  gpu.attention_backward(dq, dk, dv, m.up(dy), gq, gk, gv, y, lse, gdoc, s);
  std::vector<float> cdq(nq), cdk(nk), cdv(nk);
  cpu.attention_backward(cdq.data(), cdk.data(), cdv.data(), dy.data(), q.data(), k.data(),
                         v.data(), cy.data(), clse.data(), doc.data(), s);
  expect_close(m.down(dq, nq), cdq, tol, "attention dq");
  expect_close(m.down(dk, nk), cdk, tol, "attention dk");
  expect_close(m.down(dv, nk), cdv, tol, "attention dv");
}

TEST_F(Parity, SmallAttentionReferenceFp32) {
  const auto be = gpu_backend(ComputeDType::kFp32);
  check_attention(*be, cpu_, {2, 70, 4, 2, 64}, 1e-4);
  check_attention(*be, cpu_, {1, 33, 2, 1, 32}, 1e-4);
}

TEST_F(Parity, SmallAttentionFlashBf16) {
  const auto be = gpu_backend(ComputeDType::kBf16);
  check_attention(*be, cpu_, {2, 130, 4, 2, 64}, kBf16Tol);
  check_attention(*be, cpu_, {1, 100, 2, 2, 128}, kBf16Tol);
  check_attention(*be, cpu_, {1, 33, 2, 1, 32}, 1e-4);  // not a flash shape: the reference
}

TEST_F(Parity, SmallAttentionDecode) {
  const auto be = gpu_backend(ComputeDType::kFp32);
  DeviceMem m(*be);
  const int n_q = 3, past = 17, H = 4, KV = 2, D = 64, T = past + n_q;
  const std::vector<float> q = random_vec(n_q * H * D, 1), kc = random_vec(T * KV * D, 2),
                           vc = random_vec(T * KV * D, 3);
  float* y = m.zeros<float>(n_q * H * D);
  be->attention_decode(y, m.up(q), m.up(kc), m.up(vc), n_q, past, H, KV, D);
  std::vector<float> cy(n_q * H * D);
  cpu_.attention_decode(cy.data(), q.data(), kc.data(), vc.data(), n_q, past, H, KV, D);
  expect_close(m.down(y, cy.size()), cy, 1e-5, "attention_decode");
}

TEST_F(Parity, BackendIdentity) {
  const auto fp32 = gpu_backend(ComputeDType::kFp32);
  const auto bf16 = gpu_backend(ComputeDType::kBf16);
  EXPECT_EQ(fp32->name(), "cuda");
  EXPECT_EQ(bf16->name(), "cuda-bf16");
  EXPECT_EQ(fp32->device(), Device::kCuda);
  EXPECT_EQ(fp32->activation_dtype(), DType::F32);
  EXPECT_EQ(bf16->activation_dtype(), DType::BF16);
  EXPECT_TRUE(fp32->supports(ComputeDType::kBf16));
  EXPECT_EQ(bf16->compute_dtype(), ComputeDType::kBf16);
}

}  // namespace
}  // namespace kiln
