// The CPU backend: OpenMP loops for elementwise work, gemm() (OpenBLAS sgemm in fp32, oneDNN matmul
// in bf16; both OpenMP builds sharing one thread pool with kiln's loops) for every matrix product.
#pragma once

#include <mutex>

#include "kiln/kernels/cpu/cpu_scratch.h"
#include "kiln/kernels/ops.h"

namespace kiln {

// The CPU's stream: everything runs at once on the calling thread, so every event is complete
// when recorded.
class SyncStream final : public Stream {
 public:
  SyncStream();
  std::shared_ptr<Event> record() override { return done_; }
  std::shared_ptr<Event> record_timed() override;  // a new event, set now
  void wait(std::shared_ptr<const Event>) override {}
  void wait_for(std::function<void()> blocking_wait) override { blocking_wait(); }
  void synchronize() override {}

 private:
  std::shared_ptr<Event> done_;  // one completed event, shared (record() never allocates)
};

// The synchronous CPU backend. Device memory is host memory (aligned_alloc), copies are memcpy,
// and every op has finished when it returns.
class CpuBackend final : public Backend {
 public:
  // bf16: mixed precision (train.dtype bf16): matrix products take bf16-rounded inputs with fp32
  // accumulation and fp32 outputs; everything else is identical to the fp32 backend.
  explicit CpuBackend(bool bf16 = false) : bf16_(bf16) {}
  std::string_view name() const override { return bf16_ ? "cpu-bf16" : "cpu"; }
  Device device() const override { return Device::kCpu; }
  ComputeDType compute_dtype() const override {
    return bf16_ ? ComputeDType::kBf16 : ComputeDType::kFp32;
  }
  bool supports(ComputeDType d) const override;
  DType activation_dtype() const override;
  bool bf16() const { return bf16_; }

  void* alloc(size_t bytes) const override;
  void free(void* p) const override;
  void* alloc_pinned(size_t bytes) const override { return alloc(bytes); }
  void free_pinned(void* p) const override { free(p); }
  DeviceMemoryStats memory_stats() const override { return memory_.stats(); }
  double peak_flops() const override;
  void copy_to_device(void* dst, const void* host_src, size_t bytes) const override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) const override;
  void copy_on_device(void* dst, const void* src, size_t bytes) const override;
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               size_t rows) const override;
  void fill_zero(void* dst, size_t bytes) const override;
  Stream& compute_stream() const override { return stream_; }
  std::unique_ptr<Stream> create_stream() const override { return std::make_unique<SyncStream>(); }

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

 private:
  // KILN_CHECK that matrix-product inputs are F32, or BF16 on the bf16 backend.
  void check_matmul_inputs(ConstDevPtr x, ConstDevPtr w, const char* op) const;

  bool bf16_ = false;
  mutable SyncStream stream_;
  mutable MemoryCounter memory_;
  // The fused cross-entropy's scratch (cpu_ce_scratch_bytes(), scratch_sizes.h): this backend's
  // memory, declared after memory_ (their destructors free into it).
  struct CeScratch {
    explicit CeScratch(const Backend& be)
        : rows(be),
          row_loss(be),
          xc(be),
          logits(be),
          dxc(be),
          xc16(be),
          dlogits16(be),
          w16(be),
          w32(be) {}
    CpuScratch rows, row_loss, xc, logits, dxc, xc16, dlogits16, w16, w32;
  };
  mutable std::mutex ce_mu_;
  mutable CeScratch ce_scratch_{*this};
  // The attention kernels' scratch (cpu_attention_scratch_bytes()): the team's per-thread heads
  // and the backward's per-query-head dK and dV.
  mutable std::mutex attn_mu_;
  mutable CpuScratch attn_team_{*this}, attn_heads_{*this};
  mutable std::once_flag peak_once_;
  mutable double peak_flops_ = 0;  // stateless: record() returns a completed event
};

}  // namespace kiln
