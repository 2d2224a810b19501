// The CUDA backend's GEMMs through cuBLASLt (descriptors: gemm_lt_desc.h; algorithms:
// gemm_lt_choice.h). An LtGemm owns what the GEMMs of one backend share: a cuBLASLt handle, a
// 32 MiB workspace, and the algorithms chosen for each shape key, asked once and kept.
//
// The handle is made on the first GEMM (cublasLtCreate needs a driver; a backend built on a
// machine without one is never asked to multiply) and never destroyed: an LtGemm gives it back to
// a process-wide free list that the next LtGemm on the device takes from. A cublasLtDestroy at
// exit (a backend held in a static) would run after cuBLASLt, opened with dlopen, has cleaned up
// after itself: a crash after the work is done. The workspace and the padded copies of
// gemm_lt_choice.h are the backend's scratch (counted in its memory statistics).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "kiln/kernels/cuda/device_scratch.h"
#include "kiln/kernels/cuda/gemm_lt_choice.h"
#include "kiln/kernels/cuda/gemm_lt_desc.h"

namespace kiln::cuda {

inline constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;


class LtGemm {
 public:
  // Touches no GPU. `be`: the backend whose memory the workspace is (it outlives the LtGemm).
  explicit LtGemm(const Backend& be) : workspace_(be), pad_a_(be), pad_b_(be), pad_c_(be) {}
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // The GEMM of `s` on `stream` (the backend's compute stream): A and B of s.inputs, C (fp32)
  // written or accumulated, bias (fp32, N values, kLtBiasAlignment-aligned: checked) when s.bias.
  // Device pointers on the current device.
  void run(const GemmSpec& s, const void* A, const void* B, float* C, const float* bias,
           cudaStream_t stream);
  // Shape keys whose algorithm has been chosen (tests check the cache).
  size_t cached_plans() const;

 private:
  struct Plan {
    LtChoice choice;
    LtDescriptors desc;  // of choice.run.spec
    size_t next = 0;     // the candidate to run: the first that cuBLASLt accepted
  };
  void ensure_handle();
  Plan& plan(const GemmKey& key, const float* bias);
  // Runs p's candidates from p.next until one is accepted; kiln::Error naming the shape if none.
  void matmul(Plan& p, const void* A, const void* B, float* C, const float* bias,
              cudaStream_t stream);
  // The padded path: `asked`'s operands copied into pad_a_, pad_b_ (and C through pad_c_).
  void run_padded(Plan& p, const GemmSpec& asked, const void* A, const void* B, float* C,
                  const float* bias, cudaStream_t stream);

  mutable std::mutex mu_;
  int device_ = -1;
  cublasLtHandle_t handle_ = nullptr;
  DeviceScratch workspace_, pad_a_, pad_b_, pad_c_;
  std::unordered_map<GemmKey, Plan, GemmKeyHash> plans_;
};

}  // namespace kiln::cuda
