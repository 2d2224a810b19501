// The backend seam: device memory, copies and order (streams, events), and every op the model,
// FSDP and the optimizer need, forward and backward, declared once. Backends (cpu/ and cuda/)
// implement it; the model, FSDP and trainer never branch on the device, and only make_backend()
// (device/backend.h) names one.
//
// Conventions: pointers are device pointers of the backend (memory from alloc(), DeviceBuffer,
// DeviceArena or DevicePool), except where a parameter says "host". Ops run on the compute stream
// in issue order; the host sees their results only through copy_to_host() followed by a wait.
// Shapes are given per op, row-major. Activation gradients are written (overwritten) unless the op
// takes `accumulate` (then they are added to); parameter gradients (dw, db) are always
// accumulated (+=), so micro-batches and tied weights just add up. Scalar results (loss sums,
// sums of squares) are added (+=) into device doubles, so a step's sums stay on the device and
// the host reads them once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "kiln/base/ignore_index.h"  // kIgnoreIndex
#include "kiln/kernels/device/memory_counter.h"
#include "kiln/kernels/device/stream.h"
#include "kiln/kernels/preference_terms.h"
#include "kiln/tensor/dtype.h"

namespace kiln {

// Attention geometry. q: (B, T, H, D), k/v: (B, T, KV, D), H % KV == 0 (grouped-query heads:
// query head h reads kv head h / (H / KV)).
struct AttnShape {
  int B, T, H, KV, D;
};

// Where a backend computes.
enum class Device { kCpu, kCuda };
// The dtype of matrix-product inputs (train.dtype): fp32, or bf16 mixed precision (bf16 GEMM
// inputs, fp32 accumulation; master weights, optimizer state and reductions stay fp32).
enum class ComputeDType { kFp32, kBf16 };

// A device pointer with the dtype of what it points to: F32, or BF16 for what only feeds matrix
// products under bf16 mixed precision (the backend's activation_dtype(): the normalised inputs
// of the q/k/v and gate/up products, SwiGLU's output, and FSDP's gathered parameters). A float*
// converts implicitly (F32). at(i) is the pointer to element i.
struct DevPtr {
  void* data = nullptr;
  DType dtype = DType::F32;
  DevPtr(float* p) : data(p) {}  // NOLINT(google-explicit-constructor): fp32 is the common case
  DevPtr(void* p, DType t) : data(p), dtype(t) {}
  DevPtr at(size_t i) const { return {static_cast<char*>(data) + i * dtype_size(dtype), dtype}; }
};
struct ConstDevPtr {
  const void* data = nullptr;
  DType dtype = DType::F32;
  ConstDevPtr(const float* p) : data(p) {}  // NOLINT(google-explicit-constructor)
  ConstDevPtr(const void* p, DType t) : data(p), dtype(t) {}
  ConstDevPtr(DevPtr p) : data(p.data), dtype(p.dtype) {}  // NOLINT(google-explicit-constructor)
  ConstDevPtr at(size_t i) const {
    return {static_cast<const char*>(data) + i * dtype_size(dtype), dtype};
  }
  bool null() const { return data == nullptr; }
  // The pointer as fp32; kiln::Error-free invariant check that it is F32.
  const float* f32() const;
};

// One AdamW update's constants, computed once per step on the host (PyTorch's AdamW):
// p = p * decay - step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps), after the moment updates.
struct AdamWStep {
  float beta1, beta2, step_size, inv_sqrt_bc2, eps, decay;
};
// One SGD update (PyTorch's SGD): d = g + weight_decay * p; with momentum, m = first ? d :
// momentum * m + d and d = m; p -= lr * d.
struct SgdStep {
  float lr, weight_decay, momentum;
  bool first;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual Device device() const = 0;
  virtual ComputeDType compute_dtype() const = 0;
  // Whether this backend computes in `dtype` (fp32 always).
  virtual bool supports(ComputeDType dtype) const = 0;
  // The storage dtype of activations that only feed matrix products (the normalised inputs of
  // the q/k/v and gate/up products, SwiGLU's output) and of the parameters the model reads
  // (FSDP's gathered units, ParamStore's copies; master weights stay F32): BF16 when the
  // products take bf16 inputs natively, F32 otherwise.
  virtual DType activation_dtype() const = 0;

  // ---- Memory. Device memory is 64-byte aligned; pinned host memory stages copies. ----
  virtual void* alloc(size_t bytes) const = 0;
  virtual void free(void* p) const = 0;
  virtual void* alloc_pinned(size_t bytes) const = 0;
  virtual void free_pinned(void* p) const = 0;
  // Device memory handed out by alloc() and not yet freed, and its peak over the backend's life.
  virtual DeviceMemoryStats memory_stats() const = 0;
  // The device's dense matrix-product peak in the compute dtype, FLOP/s (the denominator of MFU);
  // 0 when unknown. The CPU measures it on the first call (an FMA or vdpbf16ps loop, ~0.3 s);
  // CUDA computes it from the GPU's SM count, clock and architecture.
  virtual double peak_flops() const = 0;

  // ---- Copies and fill, on the compute stream. The host must not reuse `host_src` nor read
  // `host_dst` until an event recorded after the copy (or synchronize()) says it ran; host
  // buffers should be pinned (alloc_pinned) for the copy to be asynchronous. ----
  virtual void copy_to_device(void* dst, const void* host_src, size_t bytes) const = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) const = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t bytes) const = 0;
  // Copies `rows` rows of `width` bytes from src to dst, rows `src_pitch` and `dst_pitch` bytes
  // apart (cudaMemcpy2D): a column block of a row-major matrix into one of another.
  virtual void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                       size_t rows) const = 0;
  virtual void fill_zero(void* dst, size_t bytes) const = 0;

  // ---- Order. Ops and copies run on compute_stream(); communicators take a stream of their
  // own from create_stream(). ----
  virtual Stream& compute_stream() const = 0;
  virtual std::unique_ptr<Stream> create_stream() const = 0;
  // The host waits for everything enqueued on the compute stream.
  void synchronize() const { compute_stream().synchronize(); }

  // Parameters (w, b, wte) are F32, or BF16 when FSDP gathered them in the backend's
  // activation_dtype(); their gradients are always F32.

  // out: (N, C) = wte[ids[n]]; wte: (V, C)
  virtual void embedding_forward(float* out, const int32_t* ids, ConstDevPtr wte, int N,
                                 int C) const = 0;
  // out: (N, C) = the part of wte[ids[n]] held in `part`, a slice of the flattened (V, C) table:
  // element e = ids[n] * C + c is part[e - part_begin] when part_begin <= e < part_begin +
  // part_len (rounded to bf16 and back when round_bf16), else 0. Summed over the ranks of a
  // sharded table it is embedding_forward of the whole (model/sharded_table.h's table_lookup).
  virtual void embedding_forward_part(float* out, const int32_t* ids, const float* part,
                                      size_t part_begin, size_t part_len, int N, int C,
                                      bool round_bf16) const = 0;
  // dwte[ids[n]] += dout[n]
  virtual void embedding_backward(float* dwte, const float* dout, const int32_t* ids, int N,
                                  int C) const = 0;
  // The same into `dpart`, a slice of the flattened (V, C) gradient: element e = ids[n] * C + c
  // adds into dpart[e - part_begin] when part_begin <= e < part_begin + part_len, and is
  // dropped otherwise (another rank's shard).
  virtual void embedding_backward_part(float* dpart, const float* dout, const int32_t* ids,
                                       size_t part_begin, size_t part_len, int N, int C) const = 0;

  // out: (N, C) = x * rstd * w, rstd: (N) = 1/sqrt(mean(x^2) + eps); x: (N, C), w: (C). out
  // may be stored in bf16 (rounded to nearest even).
  virtual void rmsnorm_forward(DevPtr out, float* rstd, const float* x, ConstDevPtr w, int N, int C,
                               float eps) const = 0;
  // Residual add fused with RMSNorm, one pass over memory: sum (N, C) = a + b, then out and rstd
  // from sum exactly as rmsnorm_forward. sum may alias a or b.
  virtual void add_rmsnorm_forward(float* sum, DevPtr out, float* rstd, const float* a,
                                   const float* b, ConstDevPtr w, int N, int C,
                                   float eps) const = 0;
  // dx (N, C) written, or added to when accumulate is true; dw (C) += (none when null)
  virtual void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                                ConstDevPtr w, const float* rstd, int N, int C,
                                bool accumulate) const = 0;

  // out: (N, OC) = x (N, IC) @ w^T (OC, IC) + b (OC, may be null); x and w may be bf16
  virtual void matmul_forward(float* out, ConstDevPtr x, ConstDevPtr w, ConstDevPtr b, int N,
                              int IC, int OC) const = 0;
  // dx: (N, IC) = dout @ w (written, or added when accumulate); dw (OC, IC) += dout^T @ x;
  // db (OC) += column sums of dout (skipped when null). dx may be null (no input gradient), and
  // dw (no weight gradient).
  virtual void matmul_backward(float* dx, float* dw, float* db, const float* dout, ConstDevPtr x,
                               ConstDevPtr w, int N, int IC, int OC, bool accumulate) const = 0;

  // In-place rotary embedding (HF rotate-half): x: (N, heads, D); pairs (d, d + D/2) rotate by
  // angle pos[n] * theta^(-2d/D). cos/sin tables: (max_pos, D/2).
  virtual void rope_forward(float* x, const int32_t* pos, const float* cos_table,
                            const float* sin_table, int N, int heads, int D) const = 0;
  // In-place inverse rotation of the gradient.
  virtual void rope_backward(float* dx, const int32_t* pos, const float* cos_table,
                             const float* sin_table, int N, int heads, int D) const = 0;

  // Causal attention within documents: query t attends keys [doc_start[t], t] of its row.
  // y: (B, T, H, D); lse: (B, H, T) log-sum-exp of the scaled scores, kept for backward.
  // doc_start: (B, T) or null (all zero).
  virtual void attention_forward(float* y, float* lse, const float* q, const float* k,
                                 const float* v, const int32_t* doc_start,
                                 const AttnShape& s) const = 0;
  // dq (B,T,H,D), dk, dv (B,T,KV,D) written. Recomputes the probabilities from q, k and lse.
  virtual void attention_backward(float* dq, float* dk, float* dv, const float* dy, const float* q,
                                  const float* k, const float* v, const float* y, const float* lse,
                                  const int32_t* doc_start, const AttnShape& s) const = 0;

  // Attention of n_q new tokens over a KV cache, for incremental decoding (no doc_start, nothing
  // kept for backward). q: (n_q, H, D), the new tokens at positions [past, past + n_q);
  // k_cache, v_cache: (past + n_q, KV, D), rows [past, past + n_q) already holding the new tokens'
  // keys and values (after RoPE); y: (n_q, H, D). New token i attends keys [0, past + i] (causal);
  // query head h reads kv head h / (H / KV). Equals rows [past, past + n_q) of attention_forward
  // over the whole sequence.
  virtual void attention_decode(float* y, const float* q, const float* k_cache,
                                const float* v_cache, int n_q, int past, int H, int KV,
                                int D) const = 0;

  // h (N, I) = silu(gate) * up, where gate_up (N, 2I) holds each row's gate then its up (the
  // output of one product with the adjacent gate and up weights); h may be stored in bf16.
  virtual void swiglu_forward(DevPtr h, const float* gate_up, int N, int I) const = 0;
  // dgate_up (N, 2I) written, laid out as gate_up.
  virtual void swiglu_backward(float* dgate_up, const float* dh, const float* gate_up, int N,
                               int I) const = 0;

  // out = a + b, (n); out may alias a or b
  virtual void add(float* out, const float* a, const float* b, size_t n) const = 0;
  // Inverted dropout (nn.Dropout(p) in training): out (n) = x / (1 - p) where kept, 0 where
  // dropped; element i is kept with probability 1 - p, decided by dropout_mask.h's hash of
  // (seed, offset + i) alone: the same mask on every backend and for every call with the same
  // seed and offset, so the backward is this same call on the gradient (the mask is redrawn,
  // never stored). p in [0, 1); x and out each F32 or BF16 (a BF16 out rounded to nearest
  // even); out may alias x (of the same dtype).
  virtual void dropout(DevPtr out, ConstDevPtr x, size_t n, float p, uint64_t seed,
                       uint64_t offset) const = 0;
  // dst (n, BF16) = src (n, F32) rounded to nearest even: parameters for bf16 products.
  virtual void cast_to_bf16(void* dst, const float* src, size_t n) const = 0;
  // dst (n, F32) = src (n, BF16), exactly: gradients reduced in bf16.
  virtual void cast_from_bf16(float* dst, const void* src, size_t n) const = 0;

  // Fused LM head and cross-entropy over rows whose target is not kIgnoreIndex, never holding
  // more than a chunk of logits: x: (N, C), w: (V, C), targets: (N). `targeted` is how many of
  // the targets are not kIgnoreIndex (rows_with_target(), counted by the caller on the host):
  // backends size their work by it and compute only those rows; the CPU checks it.
  // *loss_sum (one device double) += the sum over valid rows of -log softmax(x w^T)[target].
  // When dx is non-null it also writes dx (N, C) (zero on ignored rows) and adds dw (V, C) +=
  // (none when null) for loss scaled by `scale` (the caller passes 1 / the step's targets).
  virtual void cross_entropy(double* loss_sum, float* dx, float* dw, const float* x, ConstDevPtr w,
                             const int32_t* targets, int N, int targeted, int C, int V,
                             float scale) const = 0;

  // The cross-entropy of a vocabulary split across ranks (model/vocab_parallel_loss.h),
  // in three passes over blocks of logits: logits (n, m), rows ld floats apart, whose column j
  // is vocabulary id v0 + j. Between the passes the caller combines the ranks' partial results
  // (a max, then a sum). Rows whose target is kIgnoreIndex take part in the statistics but get
  // no loss and a zero gradient.
  // row_max (n) = the max of each row (with accumulate, of row_max and the row).
  virtual void ce_part_max(float* row_max, const float* logits, int n, int m, int ld,
                           bool accumulate) const = 0;
  // sums (n, 2) += (sum over the row of exp(logit - row_max), the logit of the row's target when
  // it lies in [v0, v0 + m)).
  virtual void ce_part_sumexp(float* sums, const float* logits, const float* row_max,
                              const int32_t* targets, int v0, int n, int m, int ld) const = 0;
  // Given the whole vocabulary's row_max and sums: logits becomes the loss gradient, scale *
  // (softmax - onehot(target)), zero on ignored rows, each row's also times row_weight[i] when
  // row_weight (n) is given; with loss_sum, *loss_sum (one device double) += the sum of -log
  // softmax[target] over the targeted rows in [loss_begin, loss_end).
  virtual void ce_part_grad(float* logits, double* loss_sum, const float* row_max,
                            const float* sums, const int32_t* targets, int v0, int n, int m, int ld,
                            float scale, const float* row_weight, int loss_begin,
                            int loss_end) const = 0;
  // Given the whole vocabulary's row_max and sums: row_loss (n) = each row's -log
  // softmax[target], 0 on ignored rows.
  virtual void ce_part_row_loss(float* row_loss, const float* row_max, const float* sums,
                                const int32_t* targets, int n) const = 0;

  // Preference losses (preference_terms.h) over S sequences, sequence 2p a pair's chosen and
  // 2p + 1 its rejected, each a range of rows of per-row arrays: sequence s is rows
  // [bounds[2s], bounds[2s + 1]) (bounds (S, 2), device; a row of an unpacked batch, or a
  // document of a packed row).
  // seq (S, 2) += (-sum of the sequence's row_loss, its rows with a target).
  virtual void sequence_logps(double* seq, const float* row_loss, const int32_t* targets,
                              const int32_t* bounds, int S) const = 0;
  // From the policy's seq and the reference's ref_seq (each (S, 2) as sequence_logps writes
  // them; ref_seq unused by SimPO): with row_weight, row_weight = -scale * d(loss)/d(the row's
  // sequence log-probability) for every row of every sequence (0 in a pair with an empty
  // completion: such a pair is not counted; rows outside the sequences untouched), the factor
  // ce_part_grad's row_weight takes; with sums, sums (kNumPreferenceSums) += the loss and metric
  // sums of pairs [sum_begin, sum_end). bounds may be null without row_weight.
  virtual void preference_loss(float* row_weight, double* sums, const double* seq,
                               const double* ref_seq, const int32_t* bounds, int S,
                               const PreferenceTerms& terms, int sum_begin, int sum_end) const = 0;

  // *sum (one device double) += sum of squares of x (n), accumulated in double in fixed blocks
  // (the result does not depend on the thread count).
  virtual void sum_squares(double* sum, const float* x, size_t n) const = 0;
  // x *= a
  virtual void scale(float* x, float a, size_t n) const = 0;
  // x (n, C): row i *= row_scale[i] (n)
  virtual void scale_rows(float* x, const float* row_scale, int n, int C) const = 0;
  // Gradient clipping with the norm on the device: norm = sqrt(*sq_norm); when norm > max_norm,
  // x (n) *= (float)(max_norm / (norm + 1e-6)).
  virtual void clip_by_norm(float* x, size_t n, const double* sq_norm, double max_norm) const = 0;

  // Optimizer updates over n elements of a shard: p (params), m, v (state), g (gradient).
  virtual void adamw_step(float* p, float* m, float* v, const float* g, size_t n,
                          const AdamWStep& s) const = 0;
  // m may be null without momentum.
  virtual void sgd_step(float* p, float* m, const float* g, size_t n, const SgdStep& s) const = 0;
};

// How many of targets (n, host memory) are not kIgnoreIndex: cross_entropy's `targeted`.
inline int rows_with_target(const int32_t* targets, int n) {
  int r = 0;
  for (int i = 0; i < n; ++i) r += targets[i] != kIgnoreIndex ? 1 : 0;
  return r;
}

// Rows of logits the CPU cross_entropy holds at once for `rows` targets over `vocab` (for memory
// estimates).
size_t ce_chunk_rows(size_t rows, size_t vocab);

}  // namespace kiln
