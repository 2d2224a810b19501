// The CUDA backend: device memory from cudaMalloc, pinned host memory from cudaMallocHost, every
// copy and op enqueued on one compute stream (a CudaStream). GEMMs go through cuBLASLt (LtGemm:
// fp32 with CUBLAS_COMPUTE_32F, or bf16 inputs with fp32 accumulation and output); the fused
// LM head + cross-entropy is cross_entropy.h; attention is the flash kernels (bf16, head_dim 64
// or 128) or the reference kernels (attention_ops.h); everything else is pointwise_ops.h.
//
// Construct it on the thread that will use it, after cuda_use_device() chose the GPU. Ops are
// const (Backend's contract) and keep their scratch (cast copies, logits, attention scratch, the
// GEMM algorithms) in mutable members: one backend serves one thread.
#pragma once

#include <memory>

#include "kiln/kernels/backend_overrides.h"
#include "kiln/kernels/cuda/cross_entropy.h"
#include "kiln/kernels/cuda/cuda_stream.h"
#include "kiln/kernels/cuda/device_scratch.h"
#include "kiln/kernels/cuda/gemm_lt.h"
#include "kiln/kernels/cuda/gpu_peak_flops.h"
#include "kiln/kernels/cuda/scratch_sizes.h"
#include "kiln/kernels/cuda/stream_scratch.h"
#include "kiln/kernels/ops.h"

namespace kiln {

class CudaBackend final : public Backend {
 public:
  // dtype: fp32, or bf16 mixed precision; device: the CUDA device index (made current here).
  CudaBackend(ComputeDType dtype, int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return bf16_ ? "cuda-bf16" : "cuda"; }
  Device device() const override { return Device::kCuda; }
  ComputeDType compute_dtype() const override {
    return bf16_ ? ComputeDType::kBf16 : ComputeDType::kFp32;
  }
  bool supports(ComputeDType d) const override;
  DType activation_dtype() const override { return cuda::activation_dtype(bf16_); }
  int device_index() const { return device_; }

  void* alloc(size_t bytes) const override;
  void free(void* p) const override;
  void* alloc_pinned(size_t bytes) const override;
  void free_pinned(void* p) const override;
  // alloc()'s memory, the backend's own scratch included (cast copies, cuBLASLt's workspace,
  // the cross-entropy's chunks, attention's backward scratch, reductions' partial sums).
  DeviceMemoryStats memory_stats() const override { return memory_.stats(); }
  // The published dense bf16 figure of this GPU, else the clock-based estimate
  // (gpu_peak_flops.h); peak() says which.
  double peak_flops() const override;
  PeakFlops peak() const;
  KILN_BACKEND_COPIES_OVERRIDE
  Stream& compute_stream() const override { return *stream_; }
  std::unique_ptr<Stream> create_stream() const override;

  // Every kernel op of Backend (ops.h), defined out of line.
  KILN_BACKEND_KERNEL_OPS_OVERRIDE

  // GEMM algorithms chosen so far (one per shape key; tests check the cache).
  size_t cached_gemm_plans() const { return gemm_.cached_plans(); }

 private:
  cudaStream_t native() const { return stream_->native(); }
  // A matrix-product operand in the product dtype: as it is, or rounded to bf16 into `scratch`
  // (n elements) when an F32 operand meets bf16 products. KILN_CHECKs BF16 under fp32.
  const void* gemm_operand(ConstDevPtr p, size_t n, cuda::DeviceScratch& scratch,
                           const char* op) const;
  // A bias as fp32 and 16-byte aligned (cuBLASLt's epilogue): as it is, or copied or widened
  // into bias_f32_ (OC values).
  const float* gemm_bias(ConstDevPtr b, int OC) const;
  DType gemm_inputs() const { return bf16_ ? DType::BF16 : DType::F32; }

  bool bf16_ = false;
  int device_ = 0;
  std::unique_ptr<CudaStream> stream_;
  // Mutable: ops are const, their scratch and caches are not (one thread per backend).
  mutable MemoryCounter memory_;
  // The scratch is this backend's own memory (alloc(), counted in memory_): declared after
  // memory_ and stream_, which their destructors' free() uses.
  mutable cuda::LtGemm gemm_{*this};
  mutable cuda::DeviceScratch cast_a_{*this}, cast_b_{*this}, cast_c_{*this}, bias_f32_{*this},
      attention_scratch_{*this};
  mutable cuda::CrossEntropyScratch ce_scratch_{*this};
  mutable cuda::StreamScratchPool stream_scratch_;
};

}  // namespace kiln
