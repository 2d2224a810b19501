// The CUDA attention kernels (kernels/cuda/attention_ops.h) against the CPU backend: forward
// (y, lse) and backward (dq, dk, dv from the GPU's own y and lse), the reference kernels at fp32
// tolerance and the flash kernels at bf16 tolerance, over tiny shapes, grouped-query heads,
// document boundaries at and around block edges, head_dim 64 and 128 and the Qwen2.5-0.5B / 1.5B
// attention geometry; backward's determinism (two runs bit-identical) and attention_decode.
// Needs a GPU: without one each such test is skipped with the reason. The host-side shape logic
// (FlashSupports, ScratchLayout) runs everywhere.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/grad_check.h"
#include "kernels/attention_cases.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cuda/attention_internal.h"
#include "kiln/kernels/cuda/attention_ops.h"
#include "kiln/kernels/cuda/attention_tiling.h"
#include "kiln/kernels/cuda/cuda_check.h"

namespace kiln::cuda {
namespace {

using kiln::testing::random_vec;
using testing::AttnCase;
using testing::AttnInputs;
using testing::AttnOutputs;
using testing::make_attn_case;

// Empty when a GPU is visible, else why not.
std::string no_gpu_reason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
  if (n == 0) return "no CUDA device visible";
  return "";
}

#define REQUIRE_GPU()                                                     \
  do {                                                                    \
    const std::string why = no_gpu_reason();                              \
    if (!why.empty()) GTEST_SKIP() << "needs a CUDA GPU (" << why << ")"; \
  } while (0)

// A device copy of a host vector (or n zero-filled elements), freed at scope exit.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    if (!host.empty()) {
      KILN_CUDA_CHECK(cudaMemcpy(p_, host.data(), bytes(), cudaMemcpyHostToDevice));
    }
  }
  explicit DeviceArray(size_t n) : n_(n) {
    KILN_CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(bytes(), 1)));
    KILN_CUDA_CHECK(cudaMemset(p_, 0, std::max<size_t>(bytes(), 1)));
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(p_); }
  T* get() { return static_cast<T*>(p_); }
  std::vector<T> host() const {
    std::vector<T> out(n_);
    KILN_CUDA_CHECK(cudaDeviceSynchronize());
    if (n_ > 0) KILN_CUDA_CHECK(cudaMemcpy(out.data(), p_, bytes(), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  size_t bytes() const { return n_ * sizeof(T); }
  void* p_ = nullptr;
  size_t n_;
};

enum class Impl { kReference, kFlash };

// Forward, then backward from the GPU's own y and lse; `backwards` runs of backward (the last
// one's gradients returned, every run's compared bit for bit with the first).
AttnOutputs run_gpu(Impl impl, const AttnCase& c, const AttnInputs& in, int backwards = 1) {
  const AttnShape& s = c.s;
  DeviceArray<float> q(in.q), k(in.k), v(in.v), dy(in.dy);
  DeviceArray<float> y(in.q.size()), lse(static_cast<size_t>(s.B) * s.H * s.T);
  DeviceArray<float> dq(in.q.size()), dk(in.k.size()), dv(in.v.size());
  DeviceArray<int32_t> ds(c.doc_start);
  DeviceArray<char> scratch(attention_backward_scratch_bytes(s));
  const int32_t* dsp = c.doc_start.empty() ? nullptr : ds.get();
  if (impl == Impl::kFlash) {
    flash_attention_forward(y.get(), lse.get(), q.get(), k.get(), v.get(), dsp, s, nullptr);
  } else {
    reference_attention_forward(y.get(), lse.get(), q.get(), k.get(), v.get(), dsp, s, nullptr);
  }
  AttnOutputs first;
  for (int r = 0; r < backwards; ++r) {
    KILN_CUDA_CHECK(cudaMemset(dq.get(), 0xff, in.q.size() * sizeof(float)));  // NaN: unwritten
    KILN_CUDA_CHECK(cudaMemset(dk.get(), 0xff, in.k.size() * sizeof(float)));
    KILN_CUDA_CHECK(cudaMemset(dv.get(), 0xff, in.v.size() * sizeof(float)));
    const auto f = impl == Impl::kFlash ? flash_attention_backward : reference_attention_backward;
    f(dq.get(), dk.get(), dv.get(), dy.get(), q.get(), k.get(), v.get(), y.get(), lse.get(), dsp, s,
      scratch.get(), nullptr);
    AttnOutputs t{y.host(), lse.host(), dq.host(), dk.host(), dv.host()};
    if (r == 0) {
      first = std::move(t);
      continue;
    }
    const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    };
    EXPECT_TRUE(same(first.dq, t.dq)) << "dq differs between two backward runs";
    EXPECT_TRUE(same(first.dk, t.dk)) << "dk differs between two backward runs";
    EXPECT_TRUE(same(first.dv, t.dv)) << "dv differs between two backward runs";
  }
  KILN_CUDA_CHECK(cudaGetLastError());
  return first;
}

// ||a - b|| / ||b|| (L2), and every element finite.
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// max |a - b| / max |b|
double max_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return num / std::max(den, 1e-30);
}

struct Tolerance {
  double rel, max;
};
// fp32 throughout; sums over up to T * H / KV terms in another order than the CPU's.
constexpr Tolerance kFp32{5e-5, 2e-4};
// bf16 operands (8 significant bits) in every product, fp32 accumulation and softmax.
constexpr Tolerance kBf16{2e-2, 6e-2};

void expect_close(const AttnOutputs& got, const AttnOutputs& want, Tolerance tol,
                  const char* what) {
  const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>>
      fields[] = {{"y", {&got.y, &want.y}},
                  {"lse", {&got.lse, &want.lse}},
                  {"dq", {&got.dq, &want.dq}},
                  {"dk", {&got.dk, &want.dk}},
                  {"dv", {&got.dv, &want.dv}}};
  for (const auto& [name, pair] : fields) {
    EXPECT_LE(rel_error(*pair.first, *pair.second), tol.rel) << what << " " << name;
    EXPECT_LE(max_error(*pair.first, *pair.second), tol.max) << what << " " << name;
  }
}

void check_reference(const AttnCase& c) {
  const AttnInputs in(c.s, random_vec);
  expect_close(run_gpu(Impl::kReference, c, in, 2), testing::attention_on(CpuBackend(), c, in),
               kFp32, "reference");
}

void check_flash(const AttnCase& c) {
  ASSERT_TRUE(flash_attention_supports(c.s));
  const AttnInputs in(c.s, random_vec);
  const AttnOutputs cpu = testing::attention_on(CpuBackend(), c, in);
  expect_close(run_gpu(Impl::kFlash, c, in, 2), cpu, kBf16, "flash");
  expect_close(run_gpu(Impl::kReference, c, in), cpu, kFp32, "reference");
}

TEST(CudaAttention, FlashSupports) {
  EXPECT_TRUE(flash_attention_supports({1, 8, 4, 2, 64}));
  EXPECT_TRUE(flash_attention_supports({1, 8, 12, 2, 128}));
  EXPECT_FALSE(flash_attention_supports({1, 8, 4, 2, 32}));
  EXPECT_FALSE(flash_attention_supports({1, 8, 4, 2, 96}));
  EXPECT_FALSE(flash_attention_supports({1, 8, 4, 3, 64}));
}

TEST(CudaAttention, ScratchLayout) {
  const AttnShape mha{2, 100, 4, 4, 64}, gqa{2, 100, 14, 2, 64};
  EXPECT_GE(attention_backward_scratch_bytes(mha), sizeof(float) * 2 * 4 * 100);
  const BackwardScratch a = backward_scratch(reinterpret_cast<void*>(4096), mha);
  EXPECT_EQ(a.dk_part, nullptr);
  const size_t part = sizeof(float) * 2 * 100 * 14 * 64;
  const size_t total = attention_backward_scratch_bytes(gqa);
  EXPECT_GE(total, sizeof(float) * 2 * 14 * 100 + 2 * part);
  char* base = reinterpret_cast<char*>(4096);
  const BackwardScratch g = backward_scratch(base, gqa);
  const char* di = reinterpret_cast<const char*>(g.di);
  const char* dk = reinterpret_cast<const char*>(g.dk_part);
  const char* dv = reinterpret_cast<const char*>(g.dv_part);
  EXPECT_EQ(di, base);
  EXPECT_GE(dk, di + sizeof(float) * 2 * 14 * 100);  // the arrays do not overlap
  EXPECT_GE(dv, dk + part);
  EXPECT_LE(dv + part, base + total);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(dk) % 16, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(dv) % 16, 0u);
  // enough blocks without splitting the groups: dK/dV straight into dk, dv, only D in scratch
  const AttnShape big{16, 2048, 14, 2, 64};
  EXPECT_EQ(backward_scratch(base, big).dk_part, nullptr);
  EXPECT_LT(attention_backward_scratch_bytes(big), sizeof(float) * 16 * 14 * 2048 + 256);
}

// The launchers' checks run on the host before anything is enqueued, so they hold without a GPU.
TEST(CudaAttention, LaunchersRejectShapesTheyCannotTake) {
  alignas(16) static float buf[64];
  float* p = buf;
  EXPECT_ANY_THROW(flash_attention_forward(p, p, p, p, p, nullptr, {1, 1, 2, 2, 32}, nullptr));
  EXPECT_ANY_THROW(flash_attention_forward(p, p, p, p, p, nullptr, {1, 1, 3, 2, 64}, nullptr));
  EXPECT_ANY_THROW(flash_attention_forward(p + 1, p, p, p, p, nullptr, {1, 1, 2, 2, 64}, nullptr))
      << "a tensor off a 16-byte boundary";
  EXPECT_ANY_THROW(flash_attention_backward(p, p, p, p, p, p, p, p + 2, p, nullptr,
                                            {1, 1, 2, 2, 128}, p, nullptr));
  EXPECT_ANY_THROW(reference_attention_forward(p, p, p, p, p, nullptr, {1, 1, 2, 2, 257}, nullptr));
  EXPECT_ANY_THROW(reference_attention_forward(p, p, p, p, p, nullptr, {1, 1, 2, 0, 16}, nullptr));
  EXPECT_ANY_THROW(attention_decode(p, p, p, p, 1, 0, 3, 2, 16, nullptr));
}

TEST(CudaAttention, ReferenceTinyShapes) {
  REQUIRE_GPU();
  check_reference(make_attn_case({2, 5, 2, 2, 16}));
  check_reference(make_attn_case({2, 6, 4, 2, 4}));
  check_reference(make_attn_case({1, 7, 3, 1, 6}, {3}));
  check_reference(make_attn_case({1, 13, 2, 1, 16}, {5}));
  check_reference(make_attn_case({2, 40, 4, 2, 32}, {9, 17}));
}

TEST(CudaAttention, ReferenceOtherHeadDims) {
  REQUIRE_GPU();
  check_reference(make_attn_case({1, 75, 2, 2, 96}, {66}));
  check_reference(make_attn_case({2, 33, 2, 1, 256}, {16}));
  check_reference(make_attn_case({1, 150, 4, 2, 80}, {70}));
}

TEST(CudaAttention, FlashTinyShapes) {
  REQUIRE_GPU();
  check_flash(make_attn_case({1, 1, 1, 1, 64}));
  check_flash(make_attn_case({2, 5, 2, 2, 64}));
  check_flash(make_attn_case({1, 7, 3, 1, 128}, {3}));
  check_flash(make_attn_case({2, 17, 4, 2, 128}, {1, 16}));
}

TEST(CudaAttention, FlashGroupedQueryHeads) {
  REQUIRE_GPU();
  check_flash(make_attn_case({2, 70, 4, 2, 64}));
  check_flash(make_attn_case({1, 130, 6, 1, 64}, {60}));
  check_flash(make_attn_case({2, 100, 8, 2, 128}, {30}));
}

// The dK/dV pass's three ways with a kv group: every query head its own part (above), parts of
// several heads, whole groups per block written straight into dk, dv.
TEST(CudaAttention, FlashKvGroupSplits) {
  REQUIRE_GPU();
  const AttnCase two_parts = make_attn_case({8, 1024, 12, 2, 128}, {300, 700});
  ASSERT_EQ(dkdv_head_splits(8, 1024, 12, 2), 2);
  check_flash(two_parts);
  const AttnCase whole = make_attn_case({16, 1024, 4, 2, 64}, {64, 500});
  ASSERT_EQ(dkdv_head_splits(16, 1024, 4, 2), 1);
  check_flash(whole);
}

// Documents starting just before, at and after the 64-row blocks and the 32-row steps of the
// dK/dV pass at D = 128, so whole blocks are skipped and partial ones masked.
TEST(CudaAttention, FlashDocumentBoundaries) {
  REQUIRE_GPU();
  const std::vector<int> starts = {3, 31, 32, 63, 64, 65, 127, 130, 191};
  check_flash(make_attn_case({2, 200, 4, 2, 64}, starts));
  check_flash(make_attn_case({2, 200, 4, 2, 128}, starts));
  check_flash(make_attn_case({1, 256, 2, 1, 64}, {128}));  // the second document on a block edge
}

TEST(CudaAttention, FlashQwen05bGeometry) {
  REQUIRE_GPU();
  check_flash(make_attn_case({1, 256, 14, 2, 64}, {100}));
  check_flash(make_attn_case({2, 512, 14, 2, 64}, {64, 300, 301}));
  check_flash(make_attn_case({1, 1024, 14, 2, 64}));
}

TEST(CudaAttention, FlashQwen15bGeometry) {
  REQUIRE_GPU();
  check_flash(make_attn_case({1, 256, 12, 2, 128}, {200}));
  check_flash(make_attn_case({2, 512, 12, 2, 128}, {1, 129, 450}));
  check_flash(make_attn_case({1, 1024, 12, 2, 128}));
}

// doc_start need not grow along a row: every row t with its own start in [0, t].
TEST(CudaAttention, ArbitraryDocStarts) {
  REQUIRE_GPU();
  for (int D : {64, 128}) {
    AttnCase c = make_attn_case({2, 150, 4, 2, D});
    c.doc_start.resize(2 * 150);
    for (int t = 0; t < 2 * 150; ++t) c.doc_start[t] = (t % 150) * (t % 7) / 7;
    check_flash(c);
  }
}

// attention_decode against the CPU's: the new rows over a cache of past + n_q rows.
void check_decode(int n_q, int past, int H, int KV, int D) {
  const int T = past + n_q;
  const auto q = random_vec(static_cast<size_t>(n_q) * H * D, 21);
  const auto k = random_vec(static_cast<size_t>(T) * KV * D, 22);
  const auto v = random_vec(static_cast<size_t>(T) * KV * D, 23);
  std::vector<float> want(q.size());
  CpuBackend().attention_decode(want.data(), q.data(), k.data(), v.data(), n_q, past, H, KV, D);
  DeviceArray<float> dq(q), dk(k), dv(v), dy(q.size());
  attention_decode(dy.get(), dq.get(), dk.get(), dv.get(), n_q, past, H, KV, D, nullptr);
  const std::vector<float> got = dy.host();
  EXPECT_LE(rel_error(got, want), kFp32.rel) << "n_q=" << n_q << " past=" << past << " D=" << D;
  EXPECT_LE(max_error(got, want), kFp32.max) << "n_q=" << n_q << " past=" << past << " D=" << D;
}

TEST(CudaAttention, Decode) {
  REQUIRE_GPU();
  check_decode(1, 0, 4, 4, 8);
  check_decode(1, 37, 14, 2, 64);
  check_decode(5, 100, 14, 2, 64);
  check_decode(1, 1000, 12, 2, 128);
  check_decode(70, 10, 6, 3, 32);
}

}  // namespace
}  // namespace kiln::cuda
