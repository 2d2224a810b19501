#include "kiln/kernels/cuda/gemm_lt.h"

#include <algorithm>
#include <bit>
#include <functional>

#include "kiln/base/error.h"
#include "kiln/kernels/cuda/cublas_check.h"
#include "kiln/kernels/cuda/cuda_check.h"

namespace kiln::cuda {

size_t GemmKeyHash::operator()(const GemmKey& k) const {
  const GemmSpec& s = k.spec;
  size_t h = 0;
  const auto mix = [&h](uint64_t v) {
    h ^= std::hash<uint64_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  };
  mix(static_cast<uint64_t>(s.M));
  mix(static_cast<uint64_t>(s.N));
  mix(static_cast<uint64_t>(s.K));
  mix(static_cast<uint64_t>(s.lda));
  mix(static_cast<uint64_t>(s.ldb));
  mix(static_cast<uint64_t>(s.ldc));
  mix((s.trans_a ? 1u : 0u) | (s.trans_b ? 2u : 0u) | (s.bias ? 4u : 0u) |
      (s.accumulate ? 8u : 0u) | (static_cast<uint64_t>(s.inputs) << 4));
  mix(uint64_t{k.align_a} | uint64_t{k.align_b} << 16 | uint64_t{k.align_c} << 32 |
      uint64_t{k.align_bias} << 48);
  return h;
}

LtGemm::~LtGemm() {
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublaslt().cublasLtDestroy(handle_);
}

size_t LtGemm::cached_plans() const {
  std::lock_guard lock(mu_);
  return plans_.size();
}

void LtGemm::ensure_handle() {
  if (handle_ != nullptr) return;
  KILN_CUBLAS_CHECK(cublaslt().cublasLtCreate(&handle_));
  KILN_CUDA_CHECK(cudaMalloc(&workspace_, kLtWorkspaceBytes));
}

namespace {
template <typename T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const T& v) {
  KILN_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceSetAttribute(p, a, &v, sizeof v));
}

// The heuristic's first choice for these descriptors within the workspace and alignments.
cublasLtMatmulAlgo_t choose_algo(cublasLtHandle_t handle, const LtDescriptors& d,
                                 const GemmKey& key) {
  cublasLtMatmulPreference_t pref = nullptr;
  KILN_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceCreate(&pref));
  const std::unique_ptr<cublasLtMatmulPreferenceOpaque_t,
                        decltype(&cublasLtMatmulPreferenceDestroy)>
      owned(pref, cublaslt().cublasLtMatmulPreferenceDestroy);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{kLtWorkspaceBytes});
  // cuBLASLt's A is kiln's B and its B kiln's A (gemm_lt_desc.h); C doubles as D.
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t{key.align_b});
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, uint32_t{key.align_a});
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, uint32_t{key.align_c});
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, uint32_t{key.align_c});
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  KILN_CUBLAS_CHECK(cublaslt().cublasLtMatmulAlgoGetHeuristic(
      handle, d.op.get(), d.a.get(), d.b.get(), d.c.get(), d.c.get(), pref, 1, &result, &found));
  if (found == 0) fail("cuBLASLt: no algorithm for {}", describe(key.spec));
  return result.algo;
}
}  // namespace

LtGemm::Plan& LtGemm::plan(const GemmKey& key, const float* bias) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  LtDescriptors d = make_lt_descriptors(key.spec);
  // The bias pointer set for the query too (its alignment is part of the key, but cuBLASLt has no
  // preference for it: run() only takes kLtBiasAlignment-aligned biases).
  if (key.spec.bias) {
    KILN_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(
        d.op.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  const cublasLtMatmulAlgo_t algo = choose_algo(handle_, d, key);
  return plans_.emplace(key, Plan{std::move(d), algo}).first->second;
}

void LtGemm::run(const GemmSpec& s, const void* A, const void* B, float* C, const float* bias,
                 cudaStream_t stream) {
  KILN_CHECK(s.bias == (bias != nullptr), "bias pointer and spec disagree: {}", describe(s));
  KILN_CHECK(pointer_alignment(bias) >= kLtBiasAlignment, "bias {} not {}-byte aligned: {}",
             static_cast<const void*>(bias), kLtBiasAlignment, describe(s));
  std::lock_guard lock(mu_);
  ensure_handle();
  const GemmKey key{s, pointer_alignment(A), pointer_alignment(B), pointer_alignment(C),
                    pointer_alignment(bias)};
  Plan& p = plan(key, bias);
  if (s.bias) {
    KILN_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(
        p.desc.op.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  const float alpha = 1.0f;
  const float beta = s.accumulate ? 1.0f : 0.0f;
  // cuBLASLt's A is kiln's B, its B kiln's A.
  KILN_CUBLAS_CHECK(cublaslt().cublasLtMatmul(
      handle_, p.desc.op.get(), &alpha, B, p.desc.a.get(), A, p.desc.b.get(), &beta, C,
      p.desc.c.get(), C, p.desc.c.get(), &p.algo, workspace_, kLtWorkspaceBytes, stream));
}

}  // namespace kiln::cuda
