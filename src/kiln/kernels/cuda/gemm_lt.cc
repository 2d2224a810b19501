#include "kiln/kernels/cuda/gemm_lt.h"

#include <algorithm>
#include <bit>
#include <map>
#include <memory>

#include "kiln/base/error.h"
#include "kiln/base/process_lifetime.h"
#include "kiln/kernels/cuda/cublas_check.h"
#include "kiln/kernels/cuda/cuda_check.h"

namespace kiln::cuda {

namespace {

// cuBLASLt handles of this process, per device, that no LtGemm holds now. Never destroyed (see
// gemm_lt.h): at most as many handles exist as LtGemms ever ran at once.
class LtHandles {
 public:
  cublasLtHandle_t take(int device) {
    std::lock_guard lock(mu_);
    auto& free = free_[device];
    if (free.empty()) return nullptr;
    const cublasLtHandle_t h = free.back();
    free.pop_back();
    return h;
  }
  void give_back(int device, cublasLtHandle_t h) {
    std::lock_guard lock(mu_);
    free_[device].push_back(h);
  }

 private:
  std::mutex mu_;
  std::map<int, std::vector<cublasLtHandle_t>> free_;
};

LtHandles& lt_handles() {
  return process_lifetime<LtHandles>([] { return LtHandles(); });
}

template <typename T>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t a, const T& v) {
  KILN_CUBLAS_CHECK(cublaslt().cublasLtMatmulPreferenceSetAttribute(p, a, &v, sizeof v));
}

// The heuristic's candidates for `d` within the workspace and key's alignments, best first.
std::vector<cublasLtMatmulAlgo_t> heuristic(cublasLtHandle_t handle, const LtDescriptors& d,
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
  cublasLtMatmulHeuristicResult_t results[kLtAlgoCandidates] = {};
  int found = 0;
  const cublasStatus_t st = cublaslt().cublasLtMatmulAlgoGetHeuristic(
      handle, d.op.get(), d.a.get(), d.b.get(), d.c.get(), d.c.get(), pref, kLtAlgoCandidates,
      results, &found);
  std::vector<cublasLtMatmulAlgo_t> out;
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return out;  // no algorithm: the caller decides
  KILN_CUBLAS_CHECK(st);
  for (int i = 0; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) out.push_back(results[i].algo);
  }
  return out;
}

// Sets the bias pointer of a descriptor (the query needs it too: cuBLASLt has no preference for
// its alignment, and run() only takes kLtBiasAlignment-aligned biases).
void set_bias(const LtDescriptors& d, const float* bias) {
  KILN_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(
      d.op.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
}

// Rows and columns (elements) of kiln's stored A, B and C.
struct Stored {
  size_t rows, cols;
};
Stored stored_a(const GemmSpec& s) {
  return s.trans_a ? Stored{size_t(s.K), size_t(s.M)} : Stored{size_t(s.M), size_t(s.K)};
}
Stored stored_b(const GemmSpec& s) {
  return s.trans_b ? Stored{size_t(s.N), size_t(s.K)} : Stored{size_t(s.K), size_t(s.N)};
}

// dst (rows of ld_dst elements) = src (rows of ld_src elements), `m` rows of m.cols elements.
void copy_rows(void* dst, int64_t ld_dst, const void* src, int64_t ld_src, Stored m, size_t elem,
               cudaStream_t stream) {
  KILN_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(ld_dst) * elem, src,
                                    static_cast<size_t>(ld_src) * elem, m.cols * elem, m.rows,
                                    cudaMemcpyDeviceToDevice, stream));
}

}  // namespace

LtGemm::~LtGemm() {
  if (handle_ != nullptr) lt_handles().give_back(device_, handle_);
}

size_t LtGemm::cached_plans() const {
  std::lock_guard lock(mu_);
  return plans_.size();
}

void LtGemm::ensure_handle() {
  if (handle_ != nullptr) return;
  KILN_CUDA_CHECK(cudaGetDevice(&device_));
  handle_ = lt_handles().take(device_);
  if (handle_ == nullptr) KILN_CUBLAS_CHECK(cublaslt().cublasLtCreate(&handle_));
}

LtGemm::Plan& LtGemm::plan(const GemmKey& key, const float* bias) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return it->second;
  const LtChoice choice = choose_lt_algorithms(key, [&](const GemmKey& k) {
    const LtDescriptors d = make_lt_descriptors(k.spec);
    if (k.spec.bias) set_bias(d, bias);
    return heuristic(handle_, d, k);
  });
  LtDescriptors desc = make_lt_descriptors(choice.run.spec);
  return plans_.emplace(key, Plan{choice, std::move(desc), 0}).first->second;
}

void LtGemm::matmul(Plan& p, const void* A, const void* B, float* C, const float* bias,
                    cudaStream_t stream) {
  const GemmSpec& s = p.choice.run.spec;
  if (s.bias) set_bias(p.desc, bias);
  void* workspace = workspace_.get(kLtWorkspaceBytes);
  const float alpha = 1.0f;
  const float beta = s.accumulate ? 1.0f : 0.0f;
  cublasStatus_t st = CUBLAS_STATUS_NOT_SUPPORTED;
  for (; p.next < p.choice.algos.size(); ++p.next) {
    // cuBLASLt's A is kiln's B, its B kiln's A.
    st = cublaslt().cublasLtMatmul(handle_, p.desc.op.get(), &alpha, B, p.desc.a.get(), A,
                                   p.desc.b.get(), &beta, C, p.desc.c.get(), C, p.desc.c.get(),
                                   &p.choice.algos[p.next], workspace, kLtWorkspaceBytes, stream);
    if (st == CUBLAS_STATUS_SUCCESS) return;
    if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE) break;
  }
  fail("cuBLASLt: cublasLtMatmul refused all {} candidates for {}{}: {}", p.choice.algos.size(),
       describe(s), p.choice.padded ? " (padded copies)" : "",
       cublaslt().cublasLtGetStatusString(st));
}

void LtGemm::run_padded(Plan& p, const GemmSpec& asked, const void* A, const void* B, float* C,
                        const float* bias, cudaStream_t stream) {
  const GemmSpec& s = p.choice.run.spec;  // asked, with padded leading dimensions
  const size_t in = dtype_size(s.inputs);
  const Stored a = stored_a(s), b = stored_b(s), c{size_t(s.M), size_t(s.N)};
  void* pa = pad_a_.get(a.rows * static_cast<size_t>(s.lda) * in);
  void* pb = pad_b_.get(b.rows * static_cast<size_t>(s.ldb) * in);
  auto* pc = static_cast<float*>(pad_c_.get(c.rows * static_cast<size_t>(s.ldc) * sizeof(float)));
  copy_rows(pa, s.lda, A, asked.lda, a, in, stream);
  copy_rows(pb, s.ldb, B, asked.ldb, b, in, stream);
  if (s.accumulate) copy_rows(pc, s.ldc, C, asked.ldc, c, sizeof(float), stream);
  matmul(p, pa, pb, pc, bias, stream);
  copy_rows(C, asked.ldc, pc, s.ldc, c, sizeof(float), stream);
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
  if (p.choice.padded) {
    run_padded(p, s, A, B, C, bias, stream);
  } else {
    matmul(p, A, B, C, bias, stream);
  }
}

}  // namespace kiln::cuda
