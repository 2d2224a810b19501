// The CUDA backend's GEMMs through cuBLASLt (descriptors: gemm_lt_desc.h). An LtGemm owns what
// the GEMMs of one backend share: the cuBLASLt handle, a 32 MiB workspace, and the algorithm
// chosen by cublasLtMatmulAlgoGetHeuristic for each shape, asked once per shape key and kept.
// The handle and workspace are made on the first GEMM (cublasLtCreate needs a driver; a backend
// built on a machine without one is never asked to multiply).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "kiln/kernels/cuda/gemm_lt_desc.h"

namespace kiln::cuda {

inline constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

// What the algorithm depends on: the spec and the alignment (a power of two up to 256) of each
// pointer, which cuBLASLt's kernels may rely on.
struct GemmKey {
  GemmSpec spec;
  uint16_t align_a = 0, align_b = 0, align_c = 0, align_bias = 0;
  bool operator==(const GemmKey&) const = default;
};
struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const;
};

class LtGemm {
 public:
  LtGemm() = default;  // touches no GPU
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // The GEMM of `s` on `stream`: A and B of s.inputs, C (fp32) written or accumulated, bias (fp32,
  // N values, kLtBiasAlignment-aligned: checked) when s.bias. Device pointers on the current
  // device.
  void run(const GemmSpec& s, const void* A, const void* B, float* C, const float* bias,
           cudaStream_t stream);
  // Shape keys whose algorithm has been chosen (tests check the cache).
  size_t cached_plans() const;

 private:
  struct Plan {
    LtDescriptors desc;
    cublasLtMatmulAlgo_t algo;
  };
  void ensure_handle();
  Plan& plan(const GemmKey& key, const float* bias);

  mutable std::mutex mu_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::unordered_map<GemmKey, Plan, GemmKeyHash> plans_;
};

}  // namespace kiln::cuda
