// One Qwen2 decoder layer's forward, the one used by training (Qwen2Model) and decoding
// (Generator). Over n tokens, x_in (n, C):
//   xn1 = rmsnorm(x_in); q (n, Q), k, v (n, KV) = xn1 W^T + b; rope(q, k); y (n, Q) = attention
//   xmid = x_in + y Wo^T (fused with xn2 = rmsnorm(xmid)); h (n, I) = silu(xn2 Wg^T) * (xn2 Wu^T)
//   x_out = xmid + h Wd^T
// Attention is the caller's (LayerAttention): causal attention within documents when training,
// attention over the KV cache when decoding, where k and v point straight into the cache rows.
// x_out may alias x_in (decoding runs in place) or be null (recomputation needs no output).
#pragma once

#include <cstdint>

#include "kiln/kernels/ops.h"
#include "kiln/model/config.h"
#include "kiln/model/layout.h"
#include "kiln/model/rope_table.h"

namespace kiln {

// A layer's activations, device memory. xn1, xn2 and h only feed matrix products and are stored
// in `act_dtype` (the backend's activation_dtype() in training; f32 when decoding).
struct DecoderActs {
  void *xn1, *xn2, *h;
  float *rstd1, *q, *k, *v, *y, *lse, *xmid, *rstd2, *gate, *up;  // lse: training only
};

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

void decoder_layer_forward(const Backend& be, const Qwen2Config& c, const LayerOffsets& o,
                           ConstDevPtr w, const float* x_in, float* x_out, const DecoderActs& a,
                           const LayerGeometry& g, const RopeTables& rope,
                           const LayerAttention& attention);

}  // namespace kiln
