// A product: how a decoder layer's projection groups turn their input into their output, forward
// and backward. The layer (decoder_layer.h, Decoder::layer_backward) calls only this interface,
// once per group, and never knows which kind computes it. The four groups, each one product of
// the layer's (n tokens):
//   kQkv:    xn1 (n, C) -> qkv (n, Q + 2 KV)   q, k and v fused (and their biases)
//   kO:      y (n, Q)   -> (n, C)              attention's output projection
//   kGateUp: xn2 (n, C) -> gate_up (n, 2I)     gate and up fused
//   kDown:   h (n, I)   -> (n, C)              the MLP's output projection
// Kinds (product_kind.h makes one per model and binds it to one layer at a time):
//   plain (plain_product.h): x W^T (+ b) with the layer unit's weights;
//   LoRA (lora_ops.h): a base product plus s B A dropout(x) from the layer's adapter unit; it
//     wraps whatever base it is given, so LoRA over another base kind needs no change to it.
// Two more join without touching the layer, each a LayerProduct and a ProductKind of its own,
// chosen in make_product_kind:
//   experts (mixture of experts): kGateUp routes each token of xn2 to its top-k experts (the router
//     and the experts' weights in the kind's own units) and writes their gate and up columns side
//     by side, all gates then all ups, so the layer's swiglu runs unchanged over the activated
//     width k I_e (the config's MLP width for that family); kDown sums h's k blocks times their
//     experts' Wd, weighted by the routing weights, into (n, C). Its backward of kDown keeps
//     d(routing weights); its backward of kGateUp, which the layer calls after kDown's, adds the
//     router's share to dx.
//   a quantised base: the four groups by dequantising products over the layer unit's packed
//     weights; its unit is frozen (not trainable), so backward computes dx only; LoRA over it
//     (QLoRA) is the LoRA kind given it as its base.
#pragma once

#include "kiln/kernels/ops.h"

namespace kiln {

// A layer's projection groups, in the order of its forward.
enum class ProjectionGroup { kQkv, kO, kGateUp, kDown };
inline constexpr int kNumProjectionGroups = 4;

// One layer's products during one pass (bound by its ProductKind).
class LayerProduct {
 public:
  virtual ~LayerProduct() = default;
  // y (n, out) = the group's product of x (n, in). y null: only what the backward keeps (the
  // down group of a recomputed forward, whose output nothing reads).
  virtual void forward(ProjectionGroup g, ConstDevPtr x, float* y) const = 0;
  // From dy (n, out), the gradient of the group's output: dx (n, in) written (the layer's input
  // gradient for the group), and the gradients of the group's parameters += where the pass has
  // them (a trainable unit's; none for a frozen one).
  virtual void backward(ProjectionGroup g, ConstDevPtr x, const float* dy, float* dx) const = 0;
};

}  // namespace kiln
