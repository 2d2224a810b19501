// The op interface: every op the model needs, forward and backward, declared once. Backends
// (cpu/ now, cuda/ next) implement it; the model and trainer never branch on the device.
//
// Conventions: pointers are device pointers of the backend; shapes are given per op, row-major.
// Activation gradients are written (overwritten) unless the argument is named `*_acc`; parameter
// gradients (dw, db) are always accumulated (+=), so micro-batches and tied weights just add up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kiln {

// Target id meaning "no loss at this position" (HF's ignore_index).
inline constexpr int32_t kIgnoreIndex = -100;

// Attention geometry. q: (B, T, H, D), k/v: (B, T, KV, D), H % KV == 0 (grouped-query heads:
// query head h reads kv head h / (H / KV)).
struct AttnShape {
  int B, T, H, KV, D;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // out: (N, C) = wte[ids[n]]; wte: (V, C)
  virtual void embedding_forward(float* out, const int32_t* ids, const float* wte, int N,
                                 int C) const = 0;
  // dwte[ids[n]] += dout[n]
  virtual void embedding_backward(float* dwte, const float* dout, const int32_t* ids, int N,
                                  int C) const = 0;

  // out: (N, C) = x * rstd * w, rstd: (N) = 1/sqrt(mean(x^2) + eps); x: (N, C), w: (C)
  virtual void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N,
                               int C, float eps) const = 0;
  // Residual add fused with RMSNorm, one pass over memory: sum (N, C) = a + b, then out and rstd
  // from sum exactly as rmsnorm_forward. sum may alias a or b.
  virtual void add_rmsnorm_forward(float* sum, float* out, float* rstd, const float* a,
                                   const float* b, const float* w, int N, int C,
                                   float eps) const = 0;
  // dx (N, C) written, or added to when accumulate is true; dw (C) +=
  virtual void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                                const float* w, const float* rstd, int N, int C,
                                bool accumulate) const = 0;

  // out: (N, OC) = x (N, IC) @ w^T (OC, IC) + b (OC, may be null)
  virtual void matmul_forward(float* out, const float* x, const float* w, const float* b, int N,
                              int IC, int OC) const = 0;
  // dx: (N, IC) = dout @ w (written, or added when accumulate); dw (OC, IC) += dout^T @ x;
  // db (OC) += column sums of dout (skipped when null). dx may be null (no input gradient).
  virtual void matmul_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                               const float* w, int N, int IC, int OC, bool accumulate) const = 0;

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

  // h = silu(gate) * up, all (n)
  virtual void swiglu_forward(float* h, const float* gate, const float* up, size_t n) const = 0;
  // dgate, dup written (n)
  virtual void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate,
                               const float* up, size_t n) const = 0;

  // out = a + b, (n); out may alias a or b
  virtual void add(float* out, const float* a, const float* b, size_t n) const = 0;

  // Fused LM head and cross-entropy over rows whose target is not kIgnoreIndex, never holding
  // more than a chunk of logits: x: (N, C), w: (V, C), targets: (N).
  // Returns the sum over valid rows of -log softmax(x w^T)[target]. When dx is non-null it also
  // writes dx (N, C) (zero on ignored rows) and adds dw (V, C) += for loss scaled by `scale`
  // (the caller passes 1 / number of targets in the whole optimizer step).
  virtual double cross_entropy(float* dx, float* dw, const float* x, const float* w,
                               const int32_t* targets, int N, int C, int V, float scale) const = 0;

  // sum of squares of x (n), in double
  virtual double sum_squares(const float* x, size_t n) const = 0;
  // x *= a
  virtual void scale(float* x, float a, size_t n) const = 0;
};

const Backend& cpu_backend();
// Rows of logits the CPU cross_entropy holds at once for `rows` targets over `vocab` (for memory
// estimates).
size_t ce_chunk_rows(size_t rows, size_t vocab);
// The CPU backend for a compute dtype (train.dtype): "fp32", or "bf16" (mixed precision: bf16
// GEMM inputs, fp32 accumulation and everything else in fp32). Throws kiln::Error naming the
// dtype when it is unknown or unsupported.
const Backend& cpu_backend_for(std::string_view dtype);

}  // namespace kiln
