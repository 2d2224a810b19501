// Flat parameter units: every FSDP unit is one contiguous buffer with a fixed name -> offset
// layout. Units, in order: "embed" (model.embed_tokens.weight, also the LM head when tied), one
// per decoder layer "layers.{i}", "head" (model.norm.weight) and, untied, "lm_head"
// (lm_head.weight): the (V, C) table the LM head reads is always a unit of its own, which FSDP
// can split along the vocabulary (vocab_parallel_loss.h); the embedding and an untied lm_head
// carry their row width (ParamUnit::row_width), so FSDP shards them by whole rows. With LoRA (a
// LoraConfig), one adapter unit per layer follows, "layers.{i}.lora" (lora_layout.h), and the
// base's units are frozen: not trainable, so they take no gradient and no optimizer state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/model/config.h"
#include "kiln/model/lora_config.h"
#include "kiln/model/lora_layout.h"
#include "kiln/model/param_unit.h"

namespace kiln {

// Offsets of one decoder layer's tensors inside its unit (in floats). The unit holds, in order:
// ln1; wq, wk, wv (adjacent: one (Q + 2 KV, C) matrix, so q, k and v come from one product);
// bq, bk, bv (adjacent: that product's bias; only with attention_bias); q_norm, k_norm (D each;
// only with qk_norm); wo; ln2; wg, wu (adjacent: one (2I, C) matrix for gate and up); wd. A tensor
// the family does not have is kNoTensor.
struct LayerOffsets {
  static constexpr size_t kNoTensor = static_cast<size_t>(-1);
  size_t ln1, wq, bq, wk, bk, wv, bv, q_norm, k_norm, wo, ln2, wg, wu, wd;
};

class ParamLayout {
 public:
  // A LoraConfig is validated here (LoraConfig::validate), for every model built on the layout.
  explicit ParamLayout(const ModelConfig& c, const std::optional<LoraConfig>& lora = std::nullopt);

  const std::vector<ParamUnit>& units() const { return units_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  int embed_unit() const { return 0; }
  int layer_unit(int i) const { return 1 + i; }
  int head_unit() const { return head_; }  // the final norm
  // The LM head's (V, C) table: the embedding when tied, else the "lm_head" unit.
  int lm_head_unit() const { return lm_head_; }
  const LayerOffsets& layer_offsets() const { return layer_; }  // same for every layer
  size_t final_norm_offset() const { return 0; }                // in the head unit
  size_t total_numel() const;
  size_t trainable_numel() const;
  // The same layout with every unit frozen: a model that is only read (a preference reference).
  ParamLayout frozen() const {
    ParamLayout l = *this;
    for (ParamUnit& u : l.units_) u.trainable = false;
    return l;
  }

  // LoRA: the adapter units (one per layer, after the base's), their offsets (the same for
  // every layer) and the settings they were laid out for.
  bool has_lora() const { return lora_.has_value(); }
  const LoraConfig& lora() const;
  int lora_unit(int i) const { return lora_first_ + i; }
  const LoraOffsets& lora_offsets() const;

  // (unit index, entry index) of an HF name, or {-1, -1}.
  std::pair<int, int> find(const std::string& hf_name) const;

 private:
  std::vector<ParamUnit> units_;
  LayerOffsets layer_{};
  int head_ = 0, lm_head_ = 0;
  std::optional<LoraConfig> lora_;
  LoraOffsets lora_offsets_;
  int lora_first_ = 0;
};

// Parameter count (embeddings counted once when tied): the layout's total.
int64_t parameter_count(const ModelConfig& c);

}  // namespace kiln
