// Where a decoder layer's LoRA adapters live: one flat unit per layer, "layers.{i}.lora", after
// the base model's units (layout.h). Its tensors carry PEFT's names
// (base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight, ...lora_B.weight; A is
// (r, in), B is (out, r)) and take weight decay, as PEFT's AdamW does by default.
//
// The targets fall into the layer's four projection groups (layer_product.h): q/k/v (input xn1,
// output the (n, Q + 2 KV) q/k/v product), o (input y, output (n, C)), gate/up (input xn2,
// output the (n, 2I) gate/up product) and down (input h, output (n, C)). Within a unit the
// groups follow in that order, and each group holds its chosen targets' A's adjacent, then their
// B's adjacent: the A's of a group are one (n_g r, in) matrix, so a group's down-projection is
// one product, as the base fuses q/k/v and gate/up.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/model/config.h"
#include "kiln/model/layer_product.h"
#include "kiln/model/lora_config.h"
#include "kiln/model/param_unit.h"

namespace kiln {

// One group's chosen targets inside the layer's adapter unit (offsets in elements).
struct LoraGroup {
  std::vector<LoraTarget> targets;  // chosen, in LoraTarget order; empty: no adapter here
  size_t a = 0;                     // the targets' A's, one (targets.size() * r, in) matrix
  size_t b = 0;                     // their B's, one (sum of their out, r) matrix
  int64_t in = 0;                   // the group's input width
  int64_t out = 0;                  // its base product's output width (all its targets')
  std::vector<int64_t> out_begin;   // per chosen target, its first column of that output
  std::vector<int64_t> out_size;    // per chosen target, its out
  int ranks() const { return static_cast<int>(targets.size()); }  // A's stacked
  int64_t b_rows() const;                                         // sum of out_size
};

// The adapter unit's geometry, the same for every layer.
struct LoraOffsets {
  int64_t rank = 0;
  std::array<LoraGroup, kNumProjectionGroups> groups;  // in ProjectionGroup order
  const LoraGroup& group(ProjectionGroup g) const { return groups[static_cast<int>(g)]; }
  // The widest group's A rows (n_g r) and output (its base product's), for scratch sizes.
  int64_t max_ranks() const;
  int64_t max_out() const;
  int64_t max_in() const;       // the widest input of a group with targets
  int64_t total_ranks() const;  // sum of every group's A rows: a layer's saved (n, .) inputs
};

// Layer `layer`'s adapter unit ("layers.{layer}.lora"), trainable, with its offsets.
ParamUnit lora_unit(const ModelConfig& c, const LoraConfig& lora, int64_t layer,
                    LoraOffsets* offsets);

}  // namespace kiln
