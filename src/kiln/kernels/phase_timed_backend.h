// Where a step's device time goes: a Backend that forwards every call to another and, between
// start() and stop(), records a timed event on the compute stream after each op. The time from
// one mark to the next is charged to the later op's phase, so the phases add up to the compute
// stream's time from start() to its last op (host gaps between ops included, charged to the op
// that follows them). For `kiln bench train`; training never wraps its backend.
#pragma once

#include <array>
#include <memory>
#include <string_view>
#include <vector>

#include "kiln/kernels/ops.h"

namespace kiln {

enum class Phase {
  kGemm,       // matmul_forward / matmul_backward (the layers' products)
  kLmHead,     // cross_entropy: the fused LM head products, softmax and loss
  kAttention,  // attention forward, backward and decode
  kOptimizer,  // optimizer steps, clipping, gradient norms
  kOther,      // norms, RoPE, SwiGLU, embedding, adds, dropout, casts, copies and fills
};
inline constexpr int kNumPhases = 5;
std::string_view phase_name(Phase p);

struct PhaseSeconds {
  std::array<double, kNumPhases> seconds{};
  double operator[](Phase p) const { return seconds[static_cast<int>(p)]; }
  double total() const;
};

class PhaseTimedBackend final : public Backend {
 public:
  explicit PhaseTimedBackend(const Backend& inner) : inner_(inner) {}

  // Marks the compute stream and starts charging ops to phases.
  void start();
  // Waits for the compute stream, stops timing and returns the time per phase since start().
  PhaseSeconds stop();

  std::string_view name() const override { return inner_.name(); }
  Device device() const override { return inner_.device(); }
  ComputeDType compute_dtype() const override { return inner_.compute_dtype(); }
  bool supports(ComputeDType d) const override { return inner_.supports(d); }
  DType activation_dtype() const override { return inner_.activation_dtype(); }
  void* alloc(size_t bytes) const override { return inner_.alloc(bytes); }
  void free(void* p) const override { inner_.free(p); }
  void* alloc_pinned(size_t bytes) const override { return inner_.alloc_pinned(bytes); }
  void free_pinned(void* p) const override { inner_.free_pinned(p); }
  DeviceMemoryStats memory_stats() const override { return inner_.memory_stats(); }
  double peak_flops() const override { return inner_.peak_flops(); }
  Stream& compute_stream() const override { return inner_.compute_stream(); }
  std::unique_ptr<Stream> create_stream() const override { return inner_.create_stream(); }

  void copy_to_device(void* dst, const void* host_src, size_t bytes) const override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) const override;
  void copy_on_device(void* dst, const void* src, size_t bytes) const override;
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               size_t rows) const override;
  void fill_zero(void* dst, size_t bytes) const override;
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
  struct Mark {
    Phase phase;
    std::shared_ptr<Event> done;
  };
  // After an op: its end mark, while timing.
  void mark(Phase p) const;

  const Backend& inner_;
  std::shared_ptr<Event> start_;  // null: not timing
  mutable std::vector<Mark> marks_;
};

}  // namespace kiln
