// A Backend that allocates nothing and computes nothing, for planning memory by running the real
// code (train/memory_plan.h): every alloc and free is counted (live and peak bytes) at an address
// that is never dereferenced, every op is a no-op except that it grows the scratch the imitated
// backend's op would grow, by that backend's own sizing functions (cpu/scratch_sizes.h,
// cuda/scratch_sizes.h): the CPU's cross-entropy chunks, buffers and GEMM libraries' allowance,
// or CUDA's cuBLASLt workspace, cast copies, cross-entropy chunks and attention scratch with its
// allocation granularity. Nothing it does touches memory per element, so a step of a 7B model
// costs microseconds.
//
// Pinned memory is real host memory (the model writes its batch there); copies to the host write
// zeros. Host memory the run holds outside the backend (checkpoint buffers, a communicator's
// scratch) is counted through host_allocated/host_freed; on the CPU device and host memory are
// the same RAM, and resident_peak() is the peak of both together.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "kiln/kernels/ops.h"

namespace kiln {

class CountingBackend final : public Backend {
 public:
  // imitates: the device whose sizing rules it follows; dtype: the compute dtype; cpu_threads:
  // the OpenMP team the imitated CPU backend's kernels keep per-thread scratch for.
  CountingBackend(Device imitates, ComputeDType dtype, int cpu_threads = 1);
  ~CountingBackend() override;

  // Host memory held outside the backend under `key` (one allocation per key; allocating a key
  // again replaces it).
  void host_allocated(const void* key, size_t bytes) const;
  void host_freed(const void* key) const;
  DeviceMemoryStats host_stats() const;
  // The peak of device and host memory alive together.
  size_t resident_peak() const;
  // The backend's own scratch alive now, by name ("cross_entropy.logits", "cublaslt.workspace",
  // "cpu.gemm_pack", ...): what the ops of the imitated backend keep between calls.
  std::map<std::string, size_t> scratch() const;
  size_t scratch_bytes() const;

  std::string_view name() const override;
  Device device() const override { return device_; }
  ComputeDType compute_dtype() const override { return dtype_; }
  bool supports(ComputeDType) const override { return true; }
  DType activation_dtype() const override;

  void* alloc(size_t bytes) const override;
  void free(void* p) const override;
  void* alloc_pinned(size_t bytes) const override;
  void free_pinned(void* p) const override;
  DeviceMemoryStats memory_stats() const override;
  double peak_flops() const override { return 0; }
  void copy_to_device(void*, const void*, size_t) const override {}
  void copy_to_host(void* host_dst, const void* src, size_t bytes) const override;
  void copy_on_device(void*, const void*, size_t) const override {}
  void copy_2d(void*, size_t, const void*, size_t, size_t, size_t) const override {}
  void fill_zero(void*, size_t) const override {}
  Stream& compute_stream() const override;
  std::unique_ptr<Stream> create_stream() const override;

  void embedding_forward(float*, const int32_t*, ConstDevPtr, int, int) const override {}
  void embedding_forward_part(float*, const int32_t*, const float*, size_t, size_t, int, int,
                              bool) const override {}
  void embedding_backward(float*, const float*, const int32_t*, int, int) const override {}
  void embedding_backward_part(float*, const float*, const int32_t*, size_t, size_t, int,
                               int) const override {}
  void rmsnorm_forward(DevPtr, float*, const float*, ConstDevPtr, int, int, float) const override {}
  void add_rmsnorm_forward(float*, DevPtr, float*, const float*, const float*, ConstDevPtr, int,
                           int, float) const override {}
  void rmsnorm_backward(float*, float*, const float*, const float*, ConstDevPtr, const float*, int,
                        int, bool) const override {}
  void matmul_forward(float* out, ConstDevPtr x, ConstDevPtr w, ConstDevPtr b, int N, int IC,
                      int OC) const override;
  void matmul_backward(float* dx, float* dw, float* db, const float* dout, ConstDevPtr x,
                       ConstDevPtr w, int N, int IC, int OC, bool accumulate) const override;
  void rope_forward(float*, const int32_t*, const float*, const float*, int, int,
                    int) const override {}
  void rope_backward(float*, const int32_t*, const float*, const float*, int, int,
                     int) const override {}
  void attention_forward(float* y, float* lse, const float* q, const float* k, const float* v,
                         const int32_t* doc_start, const AttnShape& s) const override;
  void attention_backward(float* dq, float* dk, float* dv, const float* dy, const float* q,
                          const float* k, const float* v, const float* y, const float* lse,
                          const int32_t* doc_start, const AttnShape& s) const override;
  void attention_decode(float*, const float*, const float*, const float*, int, int, int, int,
                        int) const override {}
  void swiglu_forward(DevPtr, const float*, int, int) const override {}
  void swiglu_backward(float*, const float*, const float*, int, int) const override {}
  void add(float*, const float*, const float*, size_t) const override {}
  void dropout(DevPtr, ConstDevPtr, size_t, float, uint64_t, uint64_t) const override {}
  void cast_to_bf16(void*, const float*, size_t) const override {}
  void cast_from_bf16(float*, const void*, size_t) const override {}
  void cross_entropy(double* loss_sum, float* dx, float* dw, const float* x, ConstDevPtr w,
                     const int32_t* targets, int N, int targeted, int C, int V,
                     float scale) const override;
  void ce_part_max(float*, const float*, int, int, int, bool) const override {}
  void ce_part_sumexp(float*, const float*, const float*, const int32_t*, int, int, int,
                      int) const override {}
  void ce_part_grad(float*, double*, const float*, const float*, const int32_t*, int, int, int, int,
                    float, const float*, int, int) const override {}
  void ce_part_row_loss(float*, const float*, const float*, const int32_t*, int) const override {}
  void sequence_logps(double*, const float*, const int32_t*, const int32_t*, int) const override {}
  void preference_loss(float*, double*, const double*, const double*, const int32_t*, int,
                       const PreferenceTerms&, int, int) const override {}
  void sum_squares(double*, const float*, size_t) const override {}
  void scale(float*, float, size_t) const override {}
  void scale_rows(float*, const float*, int, int) const override {}
  void clip_by_norm(float*, size_t, const double*, double) const override {}
  void adamw_step(float*, float*, float*, const float*, size_t, const AdamWStep&) const override {}
  void sgd_step(float*, float*, const float*, size_t, const SgdStep&) const override {}

 private:
  struct Books;
  bool bf16() const { return dtype_ == ComputeDType::kBf16; }
  bool on_cpu() const { return device_ == Device::kCpu; }
  // Grows the named scratch to at least `bytes` (exactly, or rounded up as the device does).
  void grow(const char* name, size_t bytes) const;
  // CUDA: an operand of a product, rounded into the named scratch when not in the product dtype.
  void cuda_operand(ConstDevPtr p, size_t n, const char* scratch) const;
  void cuda_gemm() const;

  Device device_;
  ComputeDType dtype_;
  int cpu_threads_;
  std::unique_ptr<Books> books_;
  std::unique_ptr<Stream> stream_;
};

}  // namespace kiln
