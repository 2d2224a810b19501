#include "kiln/model/phase_costs.h"

namespace kiln {

namespace {

// One linear product's forward, dx and dw over N rows, x (N, IC) -> y (N, OC), fp32 outputs and
// gradients, inputs of `a` bytes: FLOPs and bytes. Forward reads x and w and writes y; dx reads
// dy and w and writes dx; dw reads dy and x and accumulates into dw (read and written).
PhaseCost linear(double N, double IC, double OC, double a, bool recompute) {
  const double fwd_flops = 2 * N * IC * OC;
  const double fwd_bytes = a * N * IC + a * IC * OC + 4 * N * OC;
  const double bwd_bytes =
      (4 * N * OC + a * IC * OC + 4 * N * IC) + (4 * N * OC + a * N * IC + 8 * IC * OC);
  const double passes = recompute ? 2 : 1;
  return {fwd_flops * (passes + 2), fwd_bytes * passes + bwd_bytes};
}

}  // namespace

PhaseCosts phase_costs(const ModelConfig& c, const StepShape& s) {
  const double N = static_cast<double>(s.tokens), T = static_cast<double>(s.seq);
  const double C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const double Q = c.q_dim(), KV = c.kv_dim(), L = c.num_hidden_layers;
  const double a = s.act_bytes;
  const double rows = s.head_rows >= 0 ? static_cast<double>(s.head_rows) : N;
  const double P = static_cast<double>(parameter_count(c));
  const double fwd_passes = s.recompute ? 2 : 1;
  PhaseCosts out{};
  auto& gemm = out[static_cast<int>(Phase::kGemm)];
  for (const auto& [ic, oc] : {std::pair{C, Q + 2 * KV}, {Q, C}, {C, 2 * I}, {I, C}}) {
    const PhaseCost p = linear(N, ic, oc, a, s.recompute);
    gemm.flops += L * p.flops;
    gemm.bytes += L * p.bytes;
  }
  // The fused LM head over `rows` rows: logits, dx and dw products (6 V C per row); w read by
  // each, dw read and written; the logits written, read by the softmax, its gradient written
  // (in the input dtype) and read by both backward products.
  auto& head = out[static_cast<int>(Phase::kLmHead)];
  head.flops = 6 * V * C * rows;
  head.bytes = V * C * (3 * a + 8) + rows * V * (8 + 3 * a) + rows * C * 12;
  // Causal attention: QK^T and PV, 2 * 2 * (T/2) * q_dim FLOPs per token forward, backward
  // twice that (train_flops' 3x); q, k, v read and y, lse written forward; backward reads them
  // with dy and writes dq, dk, dv (fp32).
  auto& attn = out[static_cast<int>(Phase::kAttention)];
  const double attn_fwd = 2.0 * 2.0 * (T / 2.0) * Q * N;
  attn.flops = L * attn_fwd * (fwd_passes + 2);
  const double attn_fwd_bytes = 4 * N * (Q + 2 * KV) + 4 * N * Q;
  attn.bytes = L * (attn_fwd_bytes * fwd_passes + 2 * 4 * N * (Q + 2 * KV) + 3 * 4 * N * Q);
  // AdamW: p, m, v and g read, p, m, v written (28 bytes per parameter), the gradient norm and
  // clipping read g once more and may scale it (12): about 12 FLOPs per parameter.
  auto& opt = out[static_cast<int>(Phase::kOptimizer)];
  opt.flops = 12 * P;
  opt.bytes = 40 * P;
  // The rest, per layer: two fused add + RMSNorm, RoPE on q and k, SwiGLU forward; their
  // backwards; the residual adds; and zeroing the gradients (4 bytes per parameter); with q/k
  // norms, those too.
  auto& other = out[static_cast<int>(Phase::kOther)];
  const double norm_fwd = 2 * N * C * (12 + a), rope = 8 * N * (Q + KV),
               swiglu_fwd = N * I * (8 + a);
  const double norm_bwd = 2 * 4 * N * C * 4, swiglu_bwd = N * I * 20, adds = 2 * 12 * N * C;
  other.flops = L * N * (fwd_passes * (10 * C + 6 * (Q + KV) + 8 * I) + 20 * C + 12 * I);
  other.bytes =
      L * (fwd_passes * (norm_fwd + rope + swiglu_fwd) + norm_bwd + rope + swiglu_bwd + adds) +
      4 * P;
  if (c.qk_norm) {  // Qwen3's per-head q/k norms: RMSNorm's work over (N, Q + KV) values
    other.flops += L * N * (Q + KV) * (fwd_passes * 5 + 10);
    other.bytes += L * N * (Q + KV) * (fwd_passes * 8 + 16);
  }
  return out;
}

}  // namespace kiln
