// Flat parameter units: every FSDP unit is one contiguous buffer with a fixed name -> offset
// layout. Units, in order: "embed" (model.embed_tokens.weight, also the LM head when tied), one
// per decoder layer "layers.{i}", and "head" (model.norm.weight, then lm_head.weight if untied).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/model/config.h"

namespace kiln {

struct ParamEntry {
  std::string name;            // Hugging Face tensor name
  std::vector<int64_t> shape;  // HF shape
  size_t offset = 0;           // in floats, within the unit
  size_t numel = 0;
  bool decay = true;  // weight decay applies (matrices); not to norms and biases
};

struct ParamUnit {
  std::string name;
  std::vector<ParamEntry> entries;
  size_t numel = 0;
  const ParamEntry& entry(const std::string& hf_name) const;
};

// The part of a unit one rank owns under sharding, in floats: [begin, end).
struct ShardRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

// Offsets of one decoder layer's tensors inside its unit (in floats). The unit holds, in order:
// ln1; wq, wk, wv (adjacent: one (Q + 2 KV, C) matrix, so q, k and v come from one product);
// bq, bk, bv (adjacent: that product's bias); wo; ln2; wg, wu (adjacent: one (2I, C) matrix for
// gate and up); wd.
struct LayerOffsets {
  size_t ln1, wq, bq, wk, bk, wv, bv, wo, ln2, wg, wu, wd;
};

class ParamLayout {
 public:
  explicit ParamLayout(const Qwen2Config& c);

  const std::vector<ParamUnit>& units() const { return units_; }
  int num_units() const { return static_cast<int>(units_.size()); }
  int embed_unit() const { return 0; }
  int layer_unit(int i) const { return 1 + i; }
  int head_unit() const { return num_units() - 1; }
  const LayerOffsets& layer_offsets() const { return layer_; }  // same for every layer
  size_t final_norm_offset() const { return 0; }                // in the head unit
  size_t lm_head_offset() const { return head_off_; }           // untied only
  size_t total_numel() const;

  // (unit index, entry index) of an HF name, or {-1, -1}.
  std::pair<int, int> find(const std::string& hf_name) const;

 private:
  std::vector<ParamUnit> units_;
  LayerOffsets layer_{};
  size_t head_off_ = 0;
};

}  // namespace kiln
