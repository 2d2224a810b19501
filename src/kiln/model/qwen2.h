// The Qwen2 decoder with explicit forward and backward passes per layer (no autograd graph).
//
// Shapes (N = B*T tokens, C hidden, Q = heads*head_dim, KV = kv_heads*head_dim, I intermediate):
//   embed:  ids (N) -> x (N, C)
//   layer:  xn1 = rmsnorm(x); q,k,v = xn1 W^T + b; rope(q,k); y = attn(q,k,v) (N, Q);
//           x += y Wo^T; xn2 = rmsnorm(x); h = silu(xn2 Wg^T) * (xn2 Wu^T) (N, I); x += h Wd^T
//   head:   xf = rmsnorm(x); loss = CE(xf W_head^T, targets), chunked (kernels' cross_entropy)
#pragma once

#include <vector>

#include "kiln/data/batch.h"
#include "kiln/kernels/ops.h"
#include "kiln/model/config.h"
#include "kiln/model/layout.h"
#include "kiln/model/unit_access.h"
#include "kiln/tensor/buffer.h"

namespace kiln {

class Qwen2Model {
 public:
  Qwen2Model(const Qwen2Config& config, const Backend& backend);

  const Qwen2Config& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }

  // Forward and backward over one micro-batch. Returns the sum of per-token losses over the
  // batch's targets; adds d(scale * loss_sum)/d(param) into the units' gradients. With
  // `recompute`, each layer keeps only its input and recomputes its activations in backward.
  double forward_backward(const Batch& batch, UnitAccess& params, float scale, bool recompute);

  // Forward only; returns the sum of per-token losses over the batch's targets.
  double forward(const Batch& batch, UnitAccess& params);

  // Bytes of activation memory held for the last batch shape.
  size_t activation_bytes() const;

  // The final norm's output xf (B*T, C) of the last forward: the LM head's input, from which
  // tests compute full-sequence logits (incremental decoding is checked against them).
  const float* final_hidden() const { return xf_.data(); }

 private:
  // One layer's saved activations (pointers into acts_).
  struct LayerActs {
    float *xn1, *rstd1, *q, *k, *v, *y, *lse, *xmid, *xn2, *rstd2, *gate, *up, *h;
  };

  void prepare(const Batch& batch, bool recompute, bool training);
  void layer_forward(const float* w, const float* x_in, float* x_out, const LayerActs& a,
                     const Batch& batch, bool need_output);
  void layer_backward(const float* w, float* dw, const float* x_in, const LayerActs& a,
                      const Batch& batch);
  // Embedding and every layer's forward: fills res_ (and the saved activations).
  void forward_trunk(const Batch& batch, UnitAccess& params);

  Qwen2Config config_;
  ParamLayout layout_;
  const Backend& be_;

  // Buffers, sized for the largest batch seen; no allocation once warm.
  int B_ = 0, T_ = 0;
  bool recompute_ = false, training_ = false;
  Buffer<float> res_;   // (L+1, N, C) residual stream at each layer boundary
  Buffer<float> acts_;  // saved activations for every layer (or one, when recomputing)
  std::vector<LayerActs> layer_acts_;
  Buffer<float> xf_, rstdf_, dxf_;                                   // final norm
  Buffer<float> dres_, dxn_, dq_, dk_, dv_, dy_, dgate_, dup_, dh_;  // backward scratch
  Buffer<float> rope_cos_, rope_sin_;                                // (positions, head_dim/2)
  int rope_positions_ = 0;
};

}  // namespace kiln
