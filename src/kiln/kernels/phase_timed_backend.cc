#include "kiln/kernels/phase_timed_backend.h"

#include "kiln/base/error.h"

namespace kiln {

std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::kGemm:
      return "gemm";
    case Phase::kLmHead:
      return "lm_head";
    case Phase::kAttention:
      return "attention";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kOther:
      return "other";
  }
  return "?";
}

double PhaseSeconds::total() const {
  double t = 0;
  for (double s : seconds) t += s;
  return t;
}

void PhaseTimedBackend::start() {
  marks_.clear();
  start_ = inner_.compute_stream().record_timed();
}

PhaseSeconds PhaseTimedBackend::stop() {
  KILN_CHECK(start_ != nullptr, "PhaseTimedBackend::stop() without start()");
  inner_.synchronize();
  PhaseSeconds out;
  const Event* previous = start_.get();
  for (const Mark& m : marks_) {
    out.seconds[static_cast<int>(m.phase)] += m.done->seconds_since(*previous);
    previous = m.done.get();
  }
  start_.reset();
  marks_.clear();
  return out;
}

void PhaseTimedBackend::mark(Phase p) const {
  if (start_ != nullptr) marks_.push_back({p, inner_.compute_stream().record_timed()});
}

void PhaseTimedBackend::copy_to_device(void* dst, const void* host_src, size_t bytes) const {
  inner_.copy_to_device(dst, host_src, bytes);
  mark(Phase::kOther);
}

void PhaseTimedBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) const {
  inner_.copy_to_host(host_dst, src, bytes);
  mark(Phase::kOther);
}

void PhaseTimedBackend::copy_on_device(void* dst, const void* src, size_t bytes) const {
  inner_.copy_on_device(dst, src, bytes);
  mark(Phase::kOther);
}

void PhaseTimedBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                                size_t width, size_t rows) const {
  inner_.copy_2d(dst, dst_pitch, src, src_pitch, width, rows);
  mark(Phase::kOther);
}

void PhaseTimedBackend::fill_zero(void* dst, size_t bytes) const {
  inner_.fill_zero(dst, bytes);
  mark(Phase::kOther);
}

void PhaseTimedBackend::embedding_forward(float* out, const int32_t* ids, ConstDevPtr wte, int N,
                                          int C) const {
  inner_.embedding_forward(out, ids, wte, N, C);
  mark(Phase::kOther);
}

void PhaseTimedBackend::embedding_forward_part(float* out, const int32_t* ids, const float* part,
                                               size_t part_begin, size_t part_len, int N, int C,
                                               bool round_bf16) const {
  inner_.embedding_forward_part(out, ids, part, part_begin, part_len, N, C, round_bf16);
  mark(Phase::kOther);
}

void PhaseTimedBackend::embedding_backward(float* dwte, const float* dout, const int32_t* ids,
                                           int N, int C) const {
  inner_.embedding_backward(dwte, dout, ids, N, C);
  mark(Phase::kOther);
}

void PhaseTimedBackend::embedding_backward_part(float* dpart, const float* dout, const int32_t* ids,
                                                size_t part_begin, size_t part_len, int N,
                                                int C) const {
  inner_.embedding_backward_part(dpart, dout, ids, part_begin, part_len, N, C);
  mark(Phase::kOther);
}

void PhaseTimedBackend::rmsnorm_forward(DevPtr out, float* rstd, const float* x, ConstDevPtr w,
                                        int N, int C, float eps) const {
  inner_.rmsnorm_forward(out, rstd, x, w, N, C, eps);
  mark(Phase::kOther);
}

void PhaseTimedBackend::add_rmsnorm_forward(float* sum, DevPtr out, float* rstd, const float* a,
                                            const float* b, ConstDevPtr w, int N, int C,
                                            float eps) const {
  inner_.add_rmsnorm_forward(sum, out, rstd, a, b, w, N, C, eps);
  mark(Phase::kOther);
}

void PhaseTimedBackend::rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                                         ConstDevPtr w, const float* rstd, int N, int C,
                                         bool accumulate) const {
  inner_.rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C, accumulate);
  mark(Phase::kOther);
}

void PhaseTimedBackend::matmul_forward(float* out, ConstDevPtr x, ConstDevPtr w, ConstDevPtr b,
                                       int N, int IC, int OC) const {
  inner_.matmul_forward(out, x, w, b, N, IC, OC);
  mark(Phase::kGemm);
}

void PhaseTimedBackend::matmul_backward(float* dx, float* dw, float* db, const float* dout,
                                        ConstDevPtr x, ConstDevPtr w, int N, int IC, int OC,
                                        bool accumulate) const {
  inner_.matmul_backward(dx, dw, db, dout, x, w, N, IC, OC, accumulate);
  mark(Phase::kGemm);
}

void PhaseTimedBackend::rope_forward(float* x, const int32_t* pos, const float* cos_table,
                                     const float* sin_table, int N, int heads, int D) const {
  inner_.rope_forward(x, pos, cos_table, sin_table, N, heads, D);
  mark(Phase::kOther);
}

void PhaseTimedBackend::rope_backward(float* dx, const int32_t* pos, const float* cos_table,
                                      const float* sin_table, int N, int heads, int D) const {
  inner_.rope_backward(dx, pos, cos_table, sin_table, N, heads, D);
  mark(Phase::kOther);
}

void PhaseTimedBackend::attention_forward(float* y, float* lse, const float* q, const float* k,
                                          const float* v, const int32_t* doc_start,
                                          const AttnShape& s) const {
  inner_.attention_forward(y, lse, q, k, v, doc_start, s);
  mark(Phase::kAttention);
}

void PhaseTimedBackend::attention_backward(float* dq, float* dk, float* dv, const float* dy,
                                           const float* q, const float* k, const float* v,
                                           const float* y, const float* lse,
                                           const int32_t* doc_start, const AttnShape& s) const {
  inner_.attention_backward(dq, dk, dv, dy, q, k, v, y, lse, doc_start, s);
  mark(Phase::kAttention);
}

void PhaseTimedBackend::attention_decode(float* y, const float* q, const float* k_cache,
                                         const float* v_cache, int n_q, int past, int H, int KV,
                                         int D) const {
  inner_.attention_decode(y, q, k_cache, v_cache, n_q, past, H, KV, D);
  mark(Phase::kAttention);
}

void PhaseTimedBackend::swiglu_forward(DevPtr h, const float* gate_up, int N, int I) const {
  inner_.swiglu_forward(h, gate_up, N, I);
  mark(Phase::kOther);
}

void PhaseTimedBackend::swiglu_backward(float* dgate_up, const float* dh, const float* gate_up,
                                        int N, int I) const {
  inner_.swiglu_backward(dgate_up, dh, gate_up, N, I);
  mark(Phase::kOther);
}

void PhaseTimedBackend::add(float* out, const float* a, const float* b, size_t n) const {
  inner_.add(out, a, b, n);
  mark(Phase::kOther);
}

void PhaseTimedBackend::dropout(DevPtr out, ConstDevPtr x, size_t n, float p, uint64_t seed,
                                uint64_t offset) const {
  inner_.dropout(out, x, n, p, seed, offset);
  mark(Phase::kOther);
}

void PhaseTimedBackend::cast_to_bf16(void* dst, const float* src, size_t n) const {
  inner_.cast_to_bf16(dst, src, n);
  mark(Phase::kOther);
}

void PhaseTimedBackend::cast_from_bf16(float* dst, const void* src, size_t n) const {
  inner_.cast_from_bf16(dst, src, n);
  mark(Phase::kOther);
}

void PhaseTimedBackend::cross_entropy(double* loss_sum, float* dx, float* dw, const float* x,
                                      ConstDevPtr w, const int32_t* targets, int N, int targeted,
                                      int C, int V, float scale) const {
  inner_.cross_entropy(loss_sum, dx, dw, x, w, targets, N, targeted, C, V, scale);
  mark(Phase::kLmHead);
}

void PhaseTimedBackend::ce_part_max(float* row_max, const float* logits, int n, int m, int ld,
                                    bool accumulate) const {
  inner_.ce_part_max(row_max, logits, n, m, ld, accumulate);
  mark(Phase::kLmHead);
}

void PhaseTimedBackend::ce_part_sumexp(float* sums, const float* logits, const float* row_max,
                                       const int32_t* targets, int v0, int n, int m, int ld) const {
  inner_.ce_part_sumexp(sums, logits, row_max, targets, v0, n, m, ld);
  mark(Phase::kLmHead);
}

void PhaseTimedBackend::ce_part_grad(float* logits, double* loss_sum, const float* row_max,
                                     const float* sums, const int32_t* targets, int v0, int n,
                                     int m, int ld, float scale, const float* row_weight,
                                     int loss_begin, int loss_end) const {
  inner_.ce_part_grad(logits, loss_sum, row_max, sums, targets, v0, n, m, ld, scale, row_weight,
                      loss_begin, loss_end);
  mark(Phase::kLmHead);
}

void PhaseTimedBackend::ce_part_row_loss(float* row_loss, const float* row_max, const float* sums,
                                         const int32_t* targets, int n) const {
  inner_.ce_part_row_loss(row_loss, row_max, sums, targets, n);
  mark(Phase::kLmHead);
}

void PhaseTimedBackend::sequence_logps(double* seq, const float* row_loss, const int32_t* targets,
                                       const int32_t* bounds, int S) const {
  inner_.sequence_logps(seq, row_loss, targets, bounds, S);
  mark(Phase::kLmHead);
}

void PhaseTimedBackend::preference_loss(float* row_weight, double* sums, const double* seq,
                                        const double* ref_seq, const int32_t* bounds, int S,
                                        const PreferenceTerms& terms, int sum_begin,
                                        int sum_end) const {
  inner_.preference_loss(row_weight, sums, seq, ref_seq, bounds, S, terms, sum_begin, sum_end);
  mark(Phase::kLmHead);
}

void PhaseTimedBackend::sum_squares(double* sum, const float* x, size_t n) const {
  inner_.sum_squares(sum, x, n);
  mark(Phase::kOptimizer);
}

void PhaseTimedBackend::scale(float* x, float a, size_t n) const {
  inner_.scale(x, a, n);
  mark(Phase::kOptimizer);
}

void PhaseTimedBackend::scale_rows(float* x, const float* row_scale, int n, int C) const {
  inner_.scale_rows(x, row_scale, n, C);
  mark(Phase::kLmHead);
}

void PhaseTimedBackend::clip_by_norm(float* x, size_t n, const double* sq_norm,
                                     double max_norm) const {
  inner_.clip_by_norm(x, n, sq_norm, max_norm);
  mark(Phase::kOptimizer);
}

void PhaseTimedBackend::adamw_step(float* p, float* m, float* v, const float* g, size_t n,
                                   const AdamWStep& s) const {
  inner_.adamw_step(p, m, v, g, n, s);
  mark(Phase::kOptimizer);
}

void PhaseTimedBackend::sgd_step(float* p, float* m, const float* g, size_t n,
                                 const SgdStep& s) const {
  inner_.sgd_step(p, m, g, n, s);
  mark(Phase::kOptimizer);
}

}  // namespace kiln
