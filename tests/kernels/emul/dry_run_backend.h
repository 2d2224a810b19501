// A Backend that does on the host what CudaBackend (kernels/cuda/cuda_backend.cc,
// cuda_matmul.cc, cross_entropy.cc) does, under the emulator's DryRun (emulator.h): every op calls
// the same kiln::cuda launcher with the same arguments, so the launch configurations are the
// real ones (recorded, checked against the hardware's limits, never run); device memory is
// address space only (256-byte aligned as cudaMalloc's); every GEMM the CUDA backend would hand
// cuBLASLt is recorded with its operands' addresses, as cuda_matmul.cc and cross_entropy.cc
// build it. Lets the real model code run a step of the largest model at 64k tokens with no
// memory and no compute, for the CI gates of what only a GPU would otherwise show.
//
// The forwarding mirrors cuda_backend.cc op by op (flash attention under bf16 where it takes the
// shape; matmul's F32 operands rounded into scratch under bf16; the cross-entropy's chunks of
// cross_entropy_plan.h, its buffers of scratch_sizes.h). Keep them in step.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/kernels/backend_overrides.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cuda/gemm_spec.h"
#include "kiln/kernels/cuda/stream_scratch.h"
#include "kiln/kernels/device/memory_counter.h"
#include "kiln/kernels/ops.h"

namespace kiln::emul {

// One GEMM as LtGemm::run would receive it.
struct GemmRecord {
  std::string op;  // "matmul_forward", "matmul_backward dx", ..., "cross_entropy logits", ...
  emul_cuda::GemmSpec spec;
  const void *a, *b;
  const float *c, *bias;
};

class DryRunCudaBackend final : public Backend {
 public:
  explicit DryRunCudaBackend(ComputeDType dtype) : bf16_(dtype == ComputeDType::kBf16) {}
  const std::vector<GemmRecord>& gemms() const { return gemms_; }
  // Bytes of each scratch buffer the backend's ops took (cast copies, attention's backward
  // scratch, the cross-entropy's chunk buffers), beside the memory the model allocated.
  const std::vector<size_t>& scratch() const { return scratch_; }

  std::string_view name() const override { return bf16_ ? "dry-run-cuda-bf16" : "dry-run-cuda"; }
  Device device() const override { return Device::kCuda; }
  ComputeDType compute_dtype() const override {
    return bf16_ ? ComputeDType::kBf16 : ComputeDType::kFp32;
  }
  bool supports(ComputeDType) const override { return true; }
  DType activation_dtype() const override { return bf16_ ? DType::BF16 : DType::F32; }

  void* alloc(size_t bytes) const override;
  void free(void* p) const override;
  void* alloc_pinned(size_t bytes) const override;
  void free_pinned(void* p) const override;
  DeviceMemoryStats memory_stats() const override { return memory_.stats(); }
  double peak_flops() const override { return 0; }
  void copy_to_device(void*, const void*, size_t) const override {}
  void copy_to_host(void* host_dst, const void* src, size_t bytes) const override;
  void copy_on_device(void*, const void*, size_t) const override {}
  void copy_2d(void*, size_t, const void*, size_t, size_t, size_t) const override {}
  void fill_zero(void*, size_t) const override {}
  Stream& compute_stream() const override { return stream_; }
  std::unique_ptr<Stream> create_stream() const override { return std::make_unique<SyncStream>(); }

  // Every kernel op of Backend (ops.h), defined out of line.
  KILN_BACKEND_KERNEL_OPS_OVERRIDE

 private:
  // cuda_matmul.cc's gemm_operand: the operand as it is, or a bf16 copy in scratch.
  void* take_scratch(size_t bytes) const;
  const void* gemm_operand(ConstDevPtr p, size_t n) const;
  const float* gemm_bias(ConstDevPtr b, int OC) const;
  void gemm(const std::string& op, const emul_cuda::GemmSpec& s, const void* a, const void* b,
            const float* c, const float* bias) const;

  bool bf16_;
  mutable MemoryCounter memory_;
  // The reductions' scratch as CudaBackend's: from the stream-ordered pool.
  mutable emul_cuda::StreamScratchPool stream_scratch_{*this, memory_, true};
  mutable SyncStream stream_;
  mutable std::vector<GemmRecord> gemms_;
  mutable std::vector<size_t> scratch_;
};

}  // namespace kiln::emul
