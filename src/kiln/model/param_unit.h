// A flat parameter unit's tensors: the names, shapes and offsets FSDP, checkpoints and the
// model share (layout.h builds the model's units, lora_layout.h the adapters').
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/tensor/dtype.h"

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
  // Whether the unit trains (has a gradient and optimizer state); a LoRA run's base is frozen:
  // the model only acquires and releases it.
  bool trainable = true;
  // A (V, C) table (the embedding, an untied LM head): C, the floats of a row, and FSDP shards
  // it by whole rows (fsdp/shard_geometry.h); 0 for every other unit.
  size_t row_width = 0;
  const ParamEntry& entry(const std::string& hf_name) const;
  // Appends a tensor after the unit's last; returns its offset (floats).
  size_t add(std::string hf_name, std::vector<int64_t> shape, bool decay);
};

// The dtype a unit's parameters are kept in, given `read`, the dtype the model reads them in (the
// backend's activation_dtype()): a trainable unit keeps fp32 master weights; a frozen one never
// changes, so it is kept as the model reads it (bf16 under bf16 products: half the bytes, handed
// out with no copy). ParamStore and Fsdp both store by it (what they hold is read from them).
inline DType stored_dtype(const ParamUnit& u, DType read) {
  return u.trainable ? DType::F32 : read;
}

// The part of a unit one rank owns under sharding, in floats: [begin, end).
struct ShardRange {
  size_t begin = 0, end = 0;
  size_t size() const { return end - begin; }
};

}  // namespace kiln
