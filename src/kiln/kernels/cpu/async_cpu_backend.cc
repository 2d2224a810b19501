#include "kiln/kernels/cpu/async_cpu_backend.h"

#include <atomic>

#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/emulated_stream.h"

namespace kiln {

namespace {

class AsyncCpuBackend final : public Backend {
 public:
  explicit AsyncCpuBackend(bool bf16) : cpu_(bf16), stream_(1) {}
  ~AsyncCpuBackend() override { stream_.synchronize(); }

  std::string_view name() const override { return cpu_.bf16() ? "cpu-bf16-async" : "cpu-async"; }
  Device device() const override { return Device::kCpu; }
  ComputeDType compute_dtype() const override { return cpu_.compute_dtype(); }
  bool supports(ComputeDType d) const override { return cpu_.supports(d); }
  DType activation_dtype() const override { return cpu_.activation_dtype(); }

  void* alloc(size_t bytes) const override { return cpu_.alloc(bytes); }
  void free(void* p) const override {
    stream_.enqueue([this, p] { cpu_.free(p); });
  }
  void* alloc_pinned(size_t bytes) const override { return cpu_.alloc(bytes); }
  void free_pinned(void* p) const override { free(p); }
  DeviceMemoryStats memory_stats() const override { return cpu_.memory_stats(); }
  double peak_flops() const override { return cpu_.peak_flops(); }
  void copy_to_device(void* dst, const void* src, size_t bytes) const override {
    run([=, this] { cpu_.copy_to_device(dst, src, bytes); });
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) const override {
    run([=, this] { cpu_.copy_to_host(dst, src, bytes); });
  }
  void copy_on_device(void* dst, const void* src, size_t bytes) const override {
    run([=, this] { cpu_.copy_on_device(dst, src, bytes); });
  }
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
               size_t rows) const override {
    run([=, this] { cpu_.copy_2d(dst, dst_pitch, src, src_pitch, width, rows); });
  }
  void fill_zero(void* dst, size_t bytes) const override {
    run([=, this] { cpu_.fill_zero(dst, bytes); });
  }
  Stream& compute_stream() const override { return stream_; }
  std::unique_ptr<Stream> create_stream() const override {
    return std::make_unique<EmulatedStream>(++streams_);
  }

  void embedding_forward(float* out, const int32_t* ids, ConstDevPtr wte, int N,
                         int C) const override {
    run([=, this] { cpu_.embedding_forward(out, ids, wte, N, C); });
  }
  void embedding_forward_part(float* out, const int32_t* ids, const float* part, size_t part_begin,
                              size_t part_len, int N, int C, bool round_bf16) const override {
    run([=, this] {
      cpu_.embedding_forward_part(out, ids, part, part_begin, part_len, N, C, round_bf16);
    });
  }
  void embedding_backward(float* dwte, const float* dout, const int32_t* ids, int N,
                          int C) const override {
    run([=, this] { cpu_.embedding_backward(dwte, dout, ids, N, C); });
  }
  void embedding_backward_part(float* dpart, const float* dout, const int32_t* ids,
                               size_t part_begin, size_t part_len, int N, int C) const override {
    run([=, this] { cpu_.embedding_backward_part(dpart, dout, ids, part_begin, part_len, N, C); });
  }
  void rmsnorm_forward(DevPtr out, float* rstd, const float* x, ConstDevPtr w, int N, int C,
                       float eps) const override {
    run([=, this] { cpu_.rmsnorm_forward(out, rstd, x, w, N, C, eps); });
  }
  void add_rmsnorm_forward(float* sum, DevPtr out, float* rstd, const float* a, const float* b,
                           ConstDevPtr w, int N, int C, float eps) const override {
    run([=, this] { cpu_.add_rmsnorm_forward(sum, out, rstd, a, b, w, N, C, eps); });
  }
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, ConstDevPtr w,
                        const float* rstd, int N, int C, bool accumulate) const override {
    run([=, this] { cpu_.rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C, accumulate); });
  }
  void matmul_forward(float* out, ConstDevPtr x, ConstDevPtr w, ConstDevPtr b, int N, int IC,
                      int OC) const override {
    run([=, this] { cpu_.matmul_forward(out, x, w, b, N, IC, OC); });
  }
  void matmul_backward(float* dx, float* dw, float* db, const float* dout, ConstDevPtr x,
                       ConstDevPtr w, int N, int IC, int OC, bool accumulate) const override {
    run([=, this] { cpu_.matmul_backward(dx, dw, db, dout, x, w, N, IC, OC, accumulate); });
  }
  void rope_forward(float* x, const int32_t* pos, const float* cos_table, const float* sin_table,
                    int N, int heads, int D) const override {
    run([=, this] { cpu_.rope_forward(x, pos, cos_table, sin_table, N, heads, D); });
  }
  void rope_backward(float* dx, const int32_t* pos, const float* cos_table, const float* sin_table,
                     int N, int heads, int D) const override {
    run([=, this] { cpu_.rope_backward(dx, pos, cos_table, sin_table, N, heads, D); });
  }
  void attention_forward(float* y, float* lse, const float* q, const float* k, const float* v,
                         const int32_t* doc_start, const AttnShape& s) const override {
    run([=, this] { cpu_.attention_forward(y, lse, q, k, v, doc_start, s); });
  }
  void attention_backward(float* dq, float* dk, float* dv, const float* dy, const float* q,
                          const float* k, const float* v, const float* y, const float* lse,
                          const int32_t* doc_start, const AttnShape& s) const override {
    run([=, this] { cpu_.attention_backward(dq, dk, dv, dy, q, k, v, y, lse, doc_start, s); });
  }
  void attention_decode(float* y, const float* q, const float* k_cache, const float* v_cache,
                        int n_q, int past, int H, int KV, int D) const override {
    run([=, this] { cpu_.attention_decode(y, q, k_cache, v_cache, n_q, past, H, KV, D); });
  }
  void swiglu_forward(DevPtr h, const float* gate_up, int N, int I) const override {
    run([=, this] { cpu_.swiglu_forward(h, gate_up, N, I); });
  }
  void swiglu_backward(float* dgate_up, const float* dh, const float* gate_up, int N,
                       int I) const override {
    run([=, this] { cpu_.swiglu_backward(dgate_up, dh, gate_up, N, I); });
  }
  void add(float* out, const float* a, const float* b, size_t n) const override {
    run([=, this] { cpu_.add(out, a, b, n); });
  }
  void dropout(DevPtr out, ConstDevPtr x, size_t n, float p, uint64_t seed,
               uint64_t offset) const override {
    run([=, this] { cpu_.dropout(out, x, n, p, seed, offset); });
  }
  void cast_to_bf16(void* dst, const float* src, size_t n) const override {
    run([=, this] { cpu_.cast_to_bf16(dst, src, n); });
  }
  void cast_from_bf16(float* dst, const void* src, size_t n) const override {
    run([=, this] { cpu_.cast_from_bf16(dst, src, n); });
  }
  void cross_entropy(double* loss_sum, float* dx, float* dw, const float* x, ConstDevPtr w,
                     const int32_t* targets, int N, int targeted, int C, int V,
                     float scale) const override {
    run([=, this] {
      cpu_.cross_entropy(loss_sum, dx, dw, x, w, targets, N, targeted, C, V, scale);
    });
  }
  void ce_part_max(float* row_max, const float* logits, int n, int m, int ld,
                   bool accumulate) const override {
    run([=, this] { cpu_.ce_part_max(row_max, logits, n, m, ld, accumulate); });
  }
  void ce_part_sumexp(float* sums, const float* logits, const float* row_max,
                      const int32_t* targets, int v0, int n, int m, int ld) const override {
    run([=, this] { cpu_.ce_part_sumexp(sums, logits, row_max, targets, v0, n, m, ld); });
  }
  void ce_part_grad(float* logits, double* loss_sum, const float* row_max, const float* sums,
                    const int32_t* targets, int v0, int n, int m, int ld, float scale,
                    const float* row_weight, int loss_begin, int loss_end) const override {
    run([=, this] {
      cpu_.ce_part_grad(logits, loss_sum, row_max, sums, targets, v0, n, m, ld, scale, row_weight,
                        loss_begin, loss_end);
    });
  }
  void ce_part_row_loss(float* row_loss, const float* row_max, const float* sums,
                        const int32_t* targets, int n) const override {
    run([=, this] { cpu_.ce_part_row_loss(row_loss, row_max, sums, targets, n); });
  }
  void sequence_logps(double* seq, const float* row_loss, const int32_t* targets,
                      const int32_t* bounds, int S) const override {
    run([=, this] { cpu_.sequence_logps(seq, row_loss, targets, bounds, S); });
  }
  void preference_loss(float* row_weight, double* sums, const double* seq, const double* ref_seq,
                       const int32_t* bounds, int S, const PreferenceTerms& terms, int sum_begin,
                       int sum_end) const override {
    run([=, this] {
      cpu_.preference_loss(row_weight, sums, seq, ref_seq, bounds, S, terms, sum_begin, sum_end);
    });
  }
  void sum_squares(double* sum, const float* x, size_t n) const override {
    run([=, this] { cpu_.sum_squares(sum, x, n); });
  }
  void scale(float* x, float a, size_t n) const override {
    run([=, this] { cpu_.scale(x, a, n); });
  }
  void scale_rows(float* x, const float* row_scale, int n, int C) const override {
    run([=, this] { cpu_.scale_rows(x, row_scale, n, C); });
  }
  void clip_by_norm(float* x, size_t n, const double* sq_norm, double max_norm) const override {
    run([=, this] { cpu_.clip_by_norm(x, n, sq_norm, max_norm); });
  }
  void adamw_step(float* p, float* m, float* v, const float* g, size_t n,
                  const AdamWStep& s) const override {
    run([=, this] { cpu_.adamw_step(p, m, v, g, n, s); });
  }
  void sgd_step(float* p, float* m, const float* g, size_t n, const SgdStep& s) const override {
    run([=, this] { cpu_.sgd_step(p, m, g, n, s); });
  }

 private:
  template <typename F>
  void run(F&& f) const {
    stream_.enqueue(std::forward<F>(f));
  }

  CpuBackend cpu_;
  mutable EmulatedStream stream_;
  mutable std::atomic<uint64_t> streams_{1};
};

}  // namespace

std::unique_ptr<Backend> make_async_cpu_backend(bool bf16) {
  return std::make_unique<AsyncCpuBackend>(bf16);
}

}  // namespace kiln
