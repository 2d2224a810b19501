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
  void copy_to_device(void* dst, const void* host_src, size_t bytes) const override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) const override;
  void copy_on_device(void* dst, const void* src, size_t bytes) const override;
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               size_t rows) const override;
  void fill_zero(void* dst, size_t bytes) const override;
  Stream& compute_stream() const override { return *stream_; }
  std::unique_ptr<Stream> create_stream() const override;

  void embedding_forward(float* out, const int32_t* ids, ConstDevPtr wte, int N,
                         int C) const override;
  void embedding_forward_part(float* out, const int32_t* ids, const float* part, size_t part_begin,
                              size_t part_len, int N, int C, bool round_bf16) const override;
  void embedding_backward(float* dwte, const float* dout, const int32_t* ids, int N,
                          int C) const override;
  void embedding_backward_part(float* dpart, const float* dout, const int32_t* ids,
                               size_t part_begin, size_t part_len, int N, int C) const override;
  void rmsnorm_forward(DevPtr out, float* rstd, const float* x, ConstDevPtr w, int N, int C,
                       float eps) const override;
  void add_rmsnorm_forward(float* sum, DevPtr out, float* rstd, const float* a, const float* b,
                           ConstDevPtr w, int N, int C, float eps) const override;
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, ConstDevPtr w,
                        const float* rstd, int N, int C, bool accumulate) const override;
  void matmul_forward(float* out, ConstDevPtr x, ConstDevPtr w, ConstDevPtr b, int N, int IC,
                      int OC) const override;
  void matmul_backward(float* dx, float* dw, float* db, const float* dout, ConstDevPtr x,
                       ConstDevPtr w, int N, int IC, int OC, bool accumulate) const override;
  void rope_forward(float* x, const int32_t* pos, const float* cos_table, const float* sin_table,
                    int N, int heads, int D) const override;
  void rope_backward(float* dx, const int32_t* pos, const float* cos_table, const float* sin_table,
                     int N, int heads, int D) const override;
  void attention_forward(float* y, float* lse, const float* q, const float* k, const float* v,
                         const int32_t* doc_start, const AttnShape& s) const override;
  void attention_backward(float* dq, float* dk, float* dv, const float* dy, const float* q,
                          const float* k, const float* v, const float* y, const float* lse,
                          const int32_t* doc_start, const AttnShape& s) const override;
  void attention_decode(float* y, const float* q, const float* k_cache, const float* v_cache,
                        int n_q, int past, int H, int KV, int D) const override;
  void swiglu_forward(DevPtr h, const float* gate_up, int N, int I) const override;
  void swiglu_backward(float* dgate_up, const float* dh, const float* gate_up, int N,
                       int I) const override;
  void add(float* out, const float* a, const float* b, size_t n) const override;
  void dropout(DevPtr out, ConstDevPtr x, size_t n, float p, uint64_t seed,
               uint64_t offset) const override;
  void cast_to_bf16(void* dst, const float* src, size_t n) const override;
  void cast_from_bf16(float* dst, const void* src, size_t n) const override;
  void cross_entropy(double* loss_sum, float* dx, float* dw, const float* x, ConstDevPtr w,
                     const int32_t* targets, int N, int targeted, int C, int V,
                     float scale) const override;
  void ce_part_max(float* row_max, const float* logits, int n, int m, int ld,
                   bool accumulate) const override;
  void ce_part_sumexp(float* sums, const float* logits, const float* row_max,
                      const int32_t* targets, int v0, int n, int m, int ld) const override;
  void ce_part_grad(float* logits, double* loss_sum, const float* row_max, const float* sums,
                    const int32_t* targets, int v0, int n, int m, int ld, float scale,
                    int loss_begin, int loss_end) const override;
  void sum_squares(double* sum, const float* x, size_t n) const override;
  void scale(float* x, float a, size_t n) const override;
  void clip_by_norm(float* x, size_t n, const double* sq_norm, double max_norm) const override;
  void adamw_step(float* p, float* m, float* v, const float* g, size_t n,
                  const AdamWStep& s) const override;
  void sgd_step(float* p, float* m, const float* g, size_t n, const SgdStep& s) const override;

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
