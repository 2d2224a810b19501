#include "kernels/emul/dry_run_backend.h"

#include <cstdlib>
#include <cstring>

#include "kernels/emul/emulator.h"
#include "kiln/base/error.h"
#include "kiln/kernels/cuda/attention_ops.h"
#include "kiln/kernels/cuda/column_sums.h"
#include "kiln/kernels/cuda/cross_entropy_kernels.h"
#include "kiln/kernels/cuda/cross_entropy_plan.h"
#include "kiln/kernels/cuda/linear_gemms.h"
#include "kiln/kernels/cuda/pointwise_ops.h"
#include "kiln/kernels/cuda/scratch_sizes.h"

namespace kiln::emul {

namespace cu = ::kiln::emul_cuda;

void* DryRunCudaBackend::alloc(size_t bytes) const {
  if (bytes == 0) return nullptr;
  void* p = device_alloc(bytes, "");
  memory_.allocated(p, bytes);
  return p;
}

void* DryRunCudaBackend::take_scratch(size_t bytes) const {
  scratch_.push_back(bytes);
  return device_alloc(bytes, "");
}

void DryRunCudaBackend::free(void* p) const {
  if (p == nullptr) return;
  memory_.freed(p);
  device_free(p);
}

void* DryRunCudaBackend::alloc_pinned(size_t bytes) const {
  return bytes == 0 ? nullptr : std::aligned_alloc(64, (bytes + 63) / 64 * 64);
}

void DryRunCudaBackend::free_pinned(void* p) const { std::free(p); }

void DryRunCudaBackend::copy_to_host(void* host_dst, const void*, size_t bytes) const {
  std::memset(host_dst, 0, bytes);
}

// ---- Forwarded as cuda_backend.cc forwards them ----

void DryRunCudaBackend::embedding_forward(float* out, const int32_t* ids, ConstDevPtr wte, int N,
                                          int C) const {
  cu::embedding_forward(out, ids, wte, N, C, nullptr);
}
void DryRunCudaBackend::embedding_forward_part(float* out, const int32_t* ids, const float* part,
                                               size_t part_begin, size_t part_len, int N, int C,
                                               bool round_bf16) const {
  cu::embedding_forward_part(out, ids, part, part_begin, part_len, N, C, round_bf16, nullptr);
}
void DryRunCudaBackend::embedding_backward(float* dwte, const float* dout, const int32_t* ids,
                                           int N, int C) const {
  cu::embedding_backward(dwte, dout, ids, 0, SIZE_MAX, N, C, nullptr);
}
void DryRunCudaBackend::embedding_backward_part(float* dpart, const float* dout, const int32_t* ids,
                                                size_t part_begin, size_t part_len, int N,
                                                int C) const {
  cu::embedding_backward(dpart, dout, ids, part_begin, part_len, N, C, nullptr);
}
void DryRunCudaBackend::rmsnorm_forward(DevPtr out, float* rstd, const float* x, ConstDevPtr w,
                                        int N, int C, float eps) const {
  cu::rmsnorm_forward(out, rstd, x, w, N, C, eps, nullptr);
}
void DryRunCudaBackend::add_rmsnorm_forward(float* sum, DevPtr out, float* rstd, const float* a,
                                            const float* b, ConstDevPtr w, int N, int C,
                                            float eps) const {
  cu::add_rmsnorm_forward(sum, out, rstd, a, b, w, N, C, eps, nullptr);
}
void DryRunCudaBackend::rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                                         ConstDevPtr w, const float* rstd, int N, int C,
                                         bool accumulate) const {
  cu::rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C, accumulate, nullptr, stream_scratch_);
}
void DryRunCudaBackend::rope_forward(float* x, const int32_t* pos, const float* cos_table,
                                     const float* sin_table, int N, int heads, int D) const {
  cu::rope_forward(x, pos, cos_table, sin_table, N, heads, D, nullptr);
}
void DryRunCudaBackend::rope_backward(float* dx, const int32_t* pos, const float* cos_table,
                                      const float* sin_table, int N, int heads, int D) const {
  cu::rope_backward(dx, pos, cos_table, sin_table, N, heads, D, nullptr);
}
void DryRunCudaBackend::swiglu_forward(DevPtr h, const float* gate_up, int N, int I) const {
  cu::swiglu_forward(h, gate_up, N, I, nullptr);
}
void DryRunCudaBackend::swiglu_backward(float* dgate_up, const float* dh, const float* gate_up,
                                        int N, int I) const {
  cu::swiglu_backward(dgate_up, dh, gate_up, N, I, nullptr);
}
void DryRunCudaBackend::add(float* out, const float* a, const float* b, size_t n) const {
  cu::add(out, a, b, n, nullptr);
}
void DryRunCudaBackend::dropout(DevPtr out, ConstDevPtr x, size_t n, float p, uint64_t seed,
                                uint64_t offset) const {
  cu::dropout(out, x, n, p, seed, offset, nullptr);
}
void DryRunCudaBackend::cast_to_bf16(void* dst, const float* src, size_t n) const {
  cu::cast_f32_to_bf16(static_cast<uint16_t*>(dst), src, n, nullptr);
}
void DryRunCudaBackend::cast_from_bf16(float* dst, const void* src, size_t n) const {
  cu::cast_bf16_to_f32(dst, static_cast<const uint16_t*>(src), n, nullptr);
}
void DryRunCudaBackend::sum_squares(double* sum, const float* x, size_t n) const {
  cu::sum_squares(sum, x, n, nullptr, stream_scratch_);
}
void DryRunCudaBackend::scale(float* x, float a, size_t n) const { cu::scale(x, a, n, nullptr); }

void DryRunCudaBackend::scale_rows(float* x, const float* row_scale, int n, int C) const {
  cu::scale_rows(x, row_scale, n, C, nullptr);
}
void DryRunCudaBackend::clip_by_norm(float* x, size_t n, const double* sq_norm,
                                     double max_norm) const {
  cu::clip_by_norm(x, n, sq_norm, max_norm, nullptr);
}
void DryRunCudaBackend::adamw_step(float* p, float* m, float* v, const float* g, size_t n,
                                   const AdamWStep& s) const {
  cu::adamw_step(p, m, v, g, n, s, nullptr);
}
void DryRunCudaBackend::sgd_step(float* p, float* m, const float* g, size_t n,
                                 const SgdStep& s) const {
  cu::sgd_step(p, m, g, n, s, nullptr);
}
void DryRunCudaBackend::ce_part_max(float* row_max, const float* logits, int n, int m, int ld,
                                    bool accumulate) const {
  cu::ce_part_max(row_max, logits, n, m, ld, accumulate, nullptr);
}
void DryRunCudaBackend::ce_part_sumexp(float* sums, const float* logits, const float* row_max,
                                       const int32_t* targets, int v0, int n, int m, int ld) const {
  cu::ce_part_sumexp(sums, logits, row_max, targets, v0, n, m, ld, nullptr);
}
void DryRunCudaBackend::ce_part_grad(float* logits, double* loss_sum, const float* row_max,
                                     const float* sums, const int32_t* targets, int v0, int n,
                                     int m, int ld, float scale, const float* row_weight,
                                     int loss_begin, int loss_end) const {
  cu::ce_part_grad(logits, loss_sum, row_max, sums, targets, v0, n, m, ld, scale, row_weight,
                   loss_begin, loss_end, nullptr);
}

void DryRunCudaBackend::ce_part_row_loss(float* row_loss, const float* row_max, const float* sums,
                                         const int32_t* targets, int n) const {
  cu::ce_part_row_loss(row_loss, row_max, sums, targets, n, nullptr);
}

void DryRunCudaBackend::sequence_logps(double* seq, const float* row_loss, const int32_t* targets,
                                       const int32_t* bounds, int S) const {
  cu::sequence_logps(seq, row_loss, targets, bounds, S, nullptr);
}

void DryRunCudaBackend::preference_loss(float* row_weight, double* sums, const double* seq,
                                        const double* ref_seq, const int32_t* bounds, int S,
                                        const PreferenceTerms& terms, int sum_begin,
                                        int sum_end) const {
  cu::preference_loss(row_weight, sums, seq, ref_seq, bounds, S, terms, sum_begin, sum_end,
                      nullptr);
}

void DryRunCudaBackend::attention_forward(float* y, float* lse, const float* q, const float* k,
                                          const float* v, const int32_t* doc_start,
                                          const AttnShape& s) const {
  if (bf16_ && cu::flash_attention_supports(s)) {
    cu::flash_attention_forward(y, lse, q, k, v, doc_start, s, nullptr);
  } else {
    cu::reference_attention_forward(y, lse, q, k, v, doc_start, s, nullptr);
  }
}

void DryRunCudaBackend::attention_backward(float* dq, float* dk, float* dv, const float* dy,
                                           const float* q, const float* k, const float* v,
                                           const float* y, const float* lse,
                                           const int32_t* doc_start, const AttnShape& s) const {
  void* scratch = take_scratch(cu::attention_backward_scratch_bytes(s));
  if (bf16_ && cu::flash_attention_supports(s)) {
    cu::flash_attention_backward(dq, dk, dv, dy, q, k, v, y, lse, doc_start, s, scratch, nullptr);
  } else {
    cu::reference_attention_backward(dq, dk, dv, dy, q, k, v, y, lse, doc_start, s, scratch,
                                     nullptr);
  }
}

void DryRunCudaBackend::attention_decode(float* y, const float* q, const float* k_cache,
                                         const float* v_cache, int n_q, int past, int H, int KV,
                                         int D) const {
  cu::attention_decode(y, q, k_cache, v_cache, n_q, past, H, KV, D, nullptr);
}

// ---- The products, as cuda_matmul.cc and cross_entropy.cc build them ----

void DryRunCudaBackend::gemm(const std::string& op, const cu::GemmSpec& s, const void* a,
                             const void* b, const float* c, const float* bias) const {
  cu::validate(s);
  gemms_.push_back({op, s, a, b, c, bias});
}

const void* DryRunCudaBackend::gemm_operand(ConstDevPtr p, size_t n) const {
  const DType inputs = bf16_ ? DType::BF16 : DType::F32;
  if (cu::reads_in_place(p.dtype, inputs)) return p.data;
  void* rounded = take_scratch(n * sizeof(uint16_t));  // the cast scratch, cudaMalloc'd
  cu::cast_f32_to_bf16(static_cast<uint16_t*>(rounded), p.f32(), n, nullptr);
  return rounded;
}

const float* DryRunCudaBackend::gemm_bias(ConstDevPtr b, int OC) const {
  if (b.null()) return nullptr;
  if (b.dtype == DType::F32 && cu::pointer_alignment(b.data) >= cu::kLtBiasAlignment) {
    return b.f32();
  }
  auto* copy = static_cast<float*>(take_scratch(sizeof(float) * static_cast<size_t>(OC)));
  if (b.dtype == DType::BF16) {
    cu::cast_bf16_to_f32(copy, static_cast<const uint16_t*>(b.data), static_cast<size_t>(OC),
                         nullptr);
  }
  return copy;
}

void DryRunCudaBackend::matmul_forward(float* out, ConstDevPtr x, ConstDevPtr w, ConstDevPtr b,
                                       int N, int IC, int OC) const {
  if (N == 0) return;
  const void* xa = gemm_operand(x, static_cast<size_t>(N) * IC);
  const void* wa = gemm_operand(w, static_cast<size_t>(OC) * IC);
  const float* bias = gemm_bias(b, OC);
  const DType in = bf16_ ? DType::BF16 : DType::F32;
  gemm("matmul_forward", cu::linear_forward_spec(N, IC, OC, in, bias != nullptr), xa, wa, out,
       bias);
}

void DryRunCudaBackend::matmul_backward(float* dx, float* dw, float* db, const float* dout,
                                        ConstDevPtr x, ConstDevPtr w, int N, int IC, int OC,
                                        bool accumulate) const {
  if (N == 0) return;
  const DType in = bf16_ ? DType::BF16 : DType::F32;
  const void* douta = gemm_operand(dout, static_cast<size_t>(N) * OC);
  if (dx != nullptr) {
    const void* wa = gemm_operand(w, static_cast<size_t>(OC) * IC);
    gemm("matmul_backward dx", cu::linear_dx_spec(N, IC, OC, in, accumulate), douta, wa, dx,
         nullptr);
  }
  if (dw != nullptr) {
    const void* xa = gemm_operand(x, static_cast<size_t>(N) * IC);
    gemm("matmul_backward dw", cu::linear_dw_spec(N, IC, OC, in), douta, xa, dw, nullptr);
  }
  if (db != nullptr) cu::add_column_sums(db, dout, N, OC, nullptr);
}

// cross_entropy.cc: the rows compacted, then per chunk gather, logits, softmax, dx, dw.
void DryRunCudaBackend::cross_entropy(double* loss_sum, float* dx, float* dw, const float* x,
                                      ConstDevPtr w, const int32_t* targets, int N, int targeted,
                                      int C, int V, float scale) const {
  const cu::CePlan plan = cu::ce_plan(targeted, V);
  if (plan.chunks == 0) return;
  const DType in = bf16_ ? DType::BF16 : DType::F32;
  const size_t chunk = static_cast<size_t>(plan.chunk_rows);
  const cu::CeScratchBytes sz =
      cu::ce_scratch_bytes(plan, C, V, bf16_, dx != nullptr, w.dtype == DType::F32);
  auto* rows = static_cast<int32_t*>(take_scratch(sz.rows));
  auto* row_loss = static_cast<double*>(take_scratch(sz.row_loss));
  void* xr = take_scratch(sz.xr);
  auto* logits = static_cast<float*>(take_scratch(sz.logits));
  void* dlogits = sz.dlogits_bf16 > 0 ? take_scratch(sz.dlogits_bf16) : logits;
  float* dxr = sz.dxr > 0 ? static_cast<float*>(take_scratch(sz.dxr)) : nullptr;
  const void* wv = w.data;
  if (sz.w_bf16 > 0) {
    void* w16 = take_scratch(sz.w_bf16);
    cu::cast_f32_to_bf16(static_cast<uint16_t*>(w16), w.f32(), static_cast<size_t>(V) * C, nullptr);
    wv = w16;
  }
  cu::ce_compact_rows(rows, targets, N, plan.padded_rows(), nullptr);
  for (int c = 0; c < plan.chunks; ++c) {
    const int32_t* r = rows + static_cast<size_t>(c) * chunk;
    double* rl = row_loss + static_cast<size_t>(c) * chunk;
    const int n = plan.chunk_rows;
    if (bf16_) {
      cu::ce_gather_rows_bf16(static_cast<uint16_t*>(xr), x, r, n, C, nullptr);
    } else {
      cu::ce_gather_rows_f32(static_cast<float*>(xr), x, r, n, C, nullptr);
    }
    gemm("cross_entropy logits", cu::linear_forward_spec(n, C, V, in, false), xr, wv, logits,
         nullptr);
    if (dx == nullptr) {
      cu::ce_softmax_rows(rl, logits, targets, r, n, V, nullptr);
      continue;
    }
    if (bf16_) {
      cu::ce_softmax_grad_rows_bf16(rl, static_cast<uint16_t*>(dlogits), logits, targets, r, n, V,
                                    scale, nullptr);
    } else {
      cu::ce_softmax_grad_rows_f32(rl, logits, logits, targets, r, n, V, scale, nullptr);
    }
    gemm("cross_entropy dx", cu::linear_dx_spec(n, C, V, in, false), dlogits, wv, dxr, nullptr);
    cu::ce_scatter_rows(dx, dxr, r, n, C, nullptr);
    gemm("cross_entropy dw", cu::linear_dw_spec(n, C, V, in), dlogits, xr, dw, nullptr);
  }
  cu::ce_add_loss_sum(loss_sum, row_loss, plan.padded_rows(), nullptr);
}

}  // namespace kiln::emul
