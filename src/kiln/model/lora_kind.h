// The LoRA kind (product_kind.h): each layer's product is a LoRA product (lora_ops.h) over the
// base kind's, reading the layer's adapter unit ("layers.{i}.lora", lora_layout.h) after the
// base's own units. Its device buffers: each layer's saved u's, (n, total_ranks()) floats (one
// shared by every layer unless planned per layer), and one LoraScratch for every layer.
// lora.dropout applies in training passes only.
#pragma once

#include <memory>
#include <vector>

#include "kiln/model/lora_layout.h"
#include "kiln/model/lora_ops.h"
#include "kiln/model/product_kind.h"

namespace kiln {

class LoraKind final : public ProductKind {
 public:
  // layout: c's with adapter units (ParamLayout::has_lora).
  LoraKind(const ModelConfig& c, const ParamLayout& layout, const Backend& be,
           std::unique_ptr<ProductKind> base);

  std::span<const int> own_units(int l) const override { return units_[l]; }
  void plan(DeviceArena& arena, size_t n, bool per_layer, bool training) override;
  const LayerProduct& bind(int l, const LayerParams& p, const ProductPass& pass) override;

 private:
  const Backend& be_;
  std::unique_ptr<ProductKind> base_;
  LoraOffsets offsets_;
  float dropout_;                        // lora.dropout
  std::vector<std::vector<int>> units_;  // per layer: the base's own units, then the adapters'
  std::vector<float*> u_;                // per layer; only u_[0] when not per_layer_
  bool per_layer_ = false;
  LoraScratch scratch_;
  LoraProduct product_;
};

}  // namespace kiln
