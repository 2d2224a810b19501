#include "kiln/model/phase_costs.h"

#include "kiln/model/layout.h"

namespace kiln {

namespace {

// One linear product's forward, dx and (when `weight_grad`) dw over N rows, x (N, IC) -> y (N, OC),
// fp32 outputs and gradients, inputs of `a` bytes: FLOPs and bytes. Forward reads x and w and
// writes y; dx reads dy and w and writes dx; dw reads dy and x and accumulates into dw (read and
// written). A frozen weight (LoRA's base) has no dw.
PhaseCost linear(double N, double IC, double OC, double a, bool recompute, bool weight_grad) {
  const double fwd_flops = 2 * N * IC * OC;
  const double fwd_bytes = a * N * IC + a * IC * OC + 4 * N * OC;
  const double dx_bytes = 4 * N * OC + a * IC * OC + 4 * N * IC;
  const double dw_bytes = weight_grad ? 4 * N * OC + a * N * IC + 8 * IC * OC : 0;
  const double passes = recompute ? 2 : 1;
  return {fwd_flops * (passes + (weight_grad ? 2 : 1)), fwd_bytes * passes + dx_bytes + dw_bytes};
}

// One layer's adapters (LoRA): per target t with W_t (out, in), u = s x A_t^T (N, r) and
// y += u B_t^T, each a product with its weight gradient; u is fp32. The scale of u, the add into
// y and their backward are elementwise work, returned in `other`.
PhaseCost lora_layer(const ModelConfig& c, const LoraConfig& lora, double N, double a,
                     bool recompute, PhaseCost* other) {
  const double r = static_cast<double>(lora.rank), passes = recompute ? 2 : 1;
  PhaseCost out;
  for (LoraTarget t : lora.targets) {
    const LoraShape s = lora_shape(c, t);
    const double in = static_cast<double>(s.in), o = static_cast<double>(s.out);
    for (const PhaseCost& p :
         {linear(N, in, r, a, recompute, true), linear(N, r, o, 4, recompute, true)}) {
      out.flops += p.flops;
      out.bytes += p.bytes;
    }
    other->flops += passes * N * (r + o) + N * r;  // scale u, add into y; scale du
    other->bytes += passes * (8 * N * r + 12 * N * o) + 8 * N * r;
  }
  return out;
}

}  // namespace

PhaseCosts phase_costs(const ModelConfig& c, const StepShape& s) {
  const double N = static_cast<double>(s.tokens), T = static_cast<double>(s.seq);
  const double C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const double Q = c.q_dim(), KV = c.kv_dim(), L = c.num_hidden_layers;
  const double a = s.act_bytes;
  const double rows = s.head_rows >= 0 ? static_cast<double>(s.head_rows) : N;
  const bool frozen = s.lora != nullptr;
  // The parameters the optimizer steps: all, or the adapters'.
  const double P =
      static_cast<double>(frozen ? lora_parameter_count(c, *s.lora) : parameter_count(c));
  const double fwd_passes = s.recompute ? 2 : 1;
  PhaseCosts out{};
  auto& gemm = out[static_cast<int>(Phase::kGemm)];
  auto& other = out[static_cast<int>(Phase::kOther)];
  for (const auto& [ic, oc] : {std::pair{C, Q + 2 * KV}, {Q, C}, {C, 2 * I}, {I, C}}) {
    const PhaseCost p = linear(N, ic, oc, a, s.recompute, !frozen);
    gemm.flops += L * p.flops;
    gemm.bytes += L * p.bytes;
  }
  if (frozen) {
    PhaseCost elementwise;
    const PhaseCost p = lora_layer(c, *s.lora, N, a, s.recompute, &elementwise);
    gemm.flops += L * p.flops;
    gemm.bytes += L * p.bytes;
    other.flops += L * elementwise.flops;
    other.bytes += L * elementwise.bytes;
  }
  // The fused LM head over `rows` rows: logits, dx and dw products (6 V C per row; a frozen
  // head's 4, no dw); w read by each, dw read and written; the logits written, read by the
  // softmax, its gradient written (in the input dtype) and read by the backward products.
  auto& head = out[static_cast<int>(Phase::kLmHead)];
  const double head_products = frozen ? 2 : 3;
  head.flops = 2 * head_products * V * C * rows;
  head.bytes = V * C * (head_products * a + (frozen ? 0 : 8)) + rows * V * (8 + head_products * a) +
               rows * C * (frozen ? 8 : 12);
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
  // backwards; the residual adds; and zeroing the gradients (4 bytes per trained parameter); with
  // q/k norms, those too.
  const double norm_fwd = 2 * N * C * (12 + a), rope = 8 * N * (Q + KV),
               swiglu_fwd = N * I * (8 + a);
  const double norm_bwd = 2 * 4 * N * C * 4, swiglu_bwd = N * I * 20, adds = 2 * 12 * N * C;
  other.flops += L * N * (fwd_passes * (10 * C + 6 * (Q + KV) + 8 * I) + 20 * C + 12 * I);
  other.bytes +=
      L * (fwd_passes * (norm_fwd + rope + swiglu_fwd) + norm_bwd + rope + swiglu_bwd + adds) +
      4 * P;
  if (c.qk_norm) {  // Qwen3's per-head q/k norms: RMSNorm's work over (N, Q + KV) values
    other.flops += L * N * (Q + KV) * (fwd_passes * 5 + 10);
    other.bytes += L * N * (Q + KV) * (fwd_passes * 8 + 16);
  }
  return out;
}

double train_flops(const ModelConfig& c, int64_t tokens, int64_t T, int64_t head_rows,
                   const LoraConfig* lora) {
  const PhaseCosts p =
      phase_costs(c, {.tokens = tokens, .seq = T, .head_rows = head_rows, .lora = lora});
  const auto flops = [&p](Phase phase) { return p[static_cast<int>(phase)].flops; };
  return flops(Phase::kGemm) + flops(Phase::kLmHead) + flops(Phase::kAttention);
}

}  // namespace kiln
