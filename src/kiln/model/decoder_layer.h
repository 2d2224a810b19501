// One decoder layer's forward, the one used by training (Decoder) and decoding (Generator), for
// every family (config.h). Over n tokens, x_in (n, C):
//   xn1 = rmsnorm(x_in); qkv (n, Q + 2 KV) = product kQkv of xn1 (plain: xn1 [Wq; Wk; Wv]^T
//   (+ [bq; bk; bv] with attention_bias)), split into q (n, Q), k, v (n, KV); with qk_norm
//   (Qwen3) q and k come out of the split as q_pre, k_pre and each head is RMSNorm'd over
//   head_dim by one shared weight, (n*H, D) and (n*KVH, D) rows; rope(q, k); y (n, Q) = attention
//   xmid = x_in + kO(y) (fused with xn2 = rmsnorm(xmid)); gate_up (n, 2I) = kGateUp(xn2);
//   h (n, I) = silu(gate) * up
//   x_out = xmid + kDown(h)
// Attention is the caller's (LayerAttention): causal attention within documents when training,
// attention over the KV cache when decoding, where k and v point straight into the cache rows.
// The projection groups are the caller's LayerProduct (layer_product.h: the plain product, LoRA
// over it, ...), bound to this layer. x_out may alias x_in (decoding runs in place) or be null
// (recomputation needs no output).
#pragma once

#include <cstdint>

#include "kiln/kernels/ops.h"
#include "kiln/model/config.h"
#include "kiln/model/layer_product.h"
#include "kiln/model/layout.h"
#include "kiln/model/rope_table.h"

namespace kiln {

// A layer's activations, device memory. xn1, xn2 and h only feed matrix products and are stored
// in `act_dtype` (the backend's activation_dtype() in training; f32 when decoding). qkv is
// scratch: it is read only while the layer's forward splits it into q, k and v.
struct DecoderActs {
  void *xn1, *xn2, *h;
  float *rstd1, *qkv, *q, *k, *v, *y, *lse, *xmid, *rstd2, *gate_up;  // lse: training only
  // qk_norm only: q and k before their norm, (n, Q) and (n, KV), and the norms' (n*H), (n*KVH)
  // reciprocal RMS.
  float *q_pre, *k_pre, *rstd_q, *rstd_k;
};

// The tensor at `offset` in a layer's unit, or null when the family has none
// (LayerOffsets::kNoTensor); and its gradient's place (null also when dw is: a frozen unit).
inline ConstDevPtr layer_tensor(ConstDevPtr w, size_t offset) {
  return offset == LayerOffsets::kNoTensor ? ConstDevPtr{nullptr, w.dtype} : w.at(offset);
}
inline float* layer_grad(float* dw, size_t offset) {
  return dw == nullptr || offset == LayerOffsets::kNoTensor ? nullptr : dw + offset;
}

class LayerAttention {
 public:
  virtual ~LayerAttention() = default;
  // Writes a.y (and a.lse when training) from a.q, a.k, a.v after RoPE.
  virtual void attend(const DecoderActs& a) const = 0;
};

struct LayerGeometry {
  int n;               // tokens
  const int32_t* pos;  // (n) positions, device memory
  DType act_dtype;     // storage of xn1, xn2, h
};

// Moves q (n, Q), k and v (n, KV) out of the columns of qkv (n, Q + 2 KV), or into them when
// to_qkv (the backward assembles d(qkv) from dq, dk and dv for one product).
void copy_qkv_columns(const Backend& be, float* qkv, float* q, float* k, float* v, int n, int Q,
                      int KV, bool to_qkv);

void decoder_layer_forward(const Backend& be, const ModelConfig& c, const LayerOffsets& o,
                           ConstDevPtr w, const float* x_in, float* x_out, const DecoderActs& a,
                           const LayerGeometry& g, const RopeTables& rope,
                           const LayerAttention& attention, const LayerProduct& product);

}  // namespace kiln
