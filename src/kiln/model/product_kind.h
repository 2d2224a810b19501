// A kind of product (layer_product.h) for a whole model: which units each layer's product reads
// besides the layer's own, the device buffers it keeps across a pass (planned with the model's
// activations), and each layer's LayerProduct, bound to that layer's parameters for one pass.
// The model (Decoder, Generator) holds one kind, made by make_product_kind from the layout, the
// one place that chooses it; it binds one layer at a time, in the order of its pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "kiln/kernels/device/device_buffer.h"
#include "kiln/kernels/ops.h"
#include "kiln/model/config.h"
#include "kiln/model/layer_product.h"
#include "kiln/model/layout.h"

namespace kiln {

// The parameters of the units one layer reads in a pass (layer_units.h): [0] the layer's own
// unit, then its product's own units (ProductKind::own_units), in that order; dw[i] its
// gradient, null for a frozen unit (not trainable) or a pass without backward.
struct LayerParams {
  std::span<const ConstDevPtr> w;
  std::span<float* const> dw;
};

// What a pass tells the products: its tokens, and whether it trains (dropout applies only then)
// with which seed (Decoder::set_dropout_seed).
struct ProductPass {
  int n = 0;
  bool training = false;
  uint64_t dropout_seed = 0;
  // The base product alone, a kind's adapters left out (forward only: a LoRA run's preference
  // reference is the base model); a kind without adapters ignores it.
  bool base_only = false;
};

class ProductKind {
 public:
  virtual ~ProductKind() = default;
  // The units of layer l the product reads besides the layer's own, in the order a pass
  // acquires them (LoRA: the layer's adapter unit).
  virtual std::span<const int> own_units(int l) const = 0;
  // Adds the kind's device buffers for passes of n tokens to `arena`, before the caller
  // allocates it. per_layer: every layer keeps its own saved state (a training forward without
  // recomputation); else the layers share one. training: the backward's scratch too.
  virtual void plan(DeviceArena& arena, size_t n, bool per_layer, bool training) = 0;
  // Layer l's product for one pass over p (p.w.size() == 1 + own_units(l).size()), valid until
  // the next bind.
  virtual const LayerProduct& bind(int l, const LayerParams& p, const ProductPass& pass) = 0;
};

// The kind for c's layout: LoRA over the plain product when the layout has adapter units, else
// the plain one.
std::unique_ptr<ProductKind> make_product_kind(const ModelConfig& c, const ParamLayout& layout,
                                               const Backend& be);

// The dropout seed of the pass after one seeded `seed` (Decoder::forward_backward advances by
// it): a stream of `seed` no layer's mask uses (lora_dropout_seed).
uint64_t next_dropout_seed(uint64_t seed);

}  // namespace kiln
