// Hugging Face model directories <-> kiln's flat parameter units.
#pragma once

#include <functional>
#include <memory>

#include "kiln/model/config.h"
#include "kiln/model/unit_access.h"
#include "kiln/tensor/dtype.h"

namespace kiln {

// Reads a checkpoint unit by unit, so memory is bounded by one unit (each rank of a sharded run
// keeps only its shard of what it reads). Opening validates the whole checkpoint against the
// layout: every tensor present with its shape, nothing unexpected.
class HfWeightsReader {
 public:
  HfWeightsReader(const fs::path& path, const ParamLayout& layout);
  ~HfWeightsReader();
  // out: (layout.units()[unit].numel) floats
  void read_unit(int unit, float* out) const;
  // Elements [r.begin, r.end) of the unit's flat buffer into out: (r.size()) floats. A unit is
  // its tensors laid end to end, so the range is a tail of one tensor, whole tensors and a head
  // of another: only those elements are read (and converted), nothing else of the unit.
  void read_range(int unit, ShardRange r, float* out) const;

 private:
  std::unique_ptr<class CheckpointReader> reader_;
  const ParamLayout& layout_;
};

// Reads every parameter of `layout` from the checkpoint at `path` (a directory with
// model.safetensors or model.safetensors.index.json, F32/BF16/F16) into `store`, converting to
// f32. Errors name the file and tensor: missing tensors, wrong shapes, tensors the model does not
// have (unexpected), truncated or malformed files.
void load_hf_weights(const fs::path& path, const ParamLayout& layout, ParamStore& store);

// The host buffer (floats) a streaming save reads units into: the largest unit.
size_t hf_save_buffer_floats(const ParamLayout& layout);

// Only the weights (config.json untouched), streaming as save_hf_checkpoint_streaming.
void save_hf_weights_streaming(const fs::path& dir, const ParamLayout& layout,
                               const std::function<void(int unit, float* out)>& read_unit,
                               DType dtype, uint64_t max_shard_bytes = 5'000'000'000);

// As save_hf_checkpoint, streaming: read_unit(u, out) fills unit u's parameters when the writer
// first needs them, so memory is bounded by the largest unit, not the model.
void save_hf_checkpoint_streaming(const fs::path& dir, const ModelConfig& config,
                                  const ParamLayout& layout,
                                  const std::function<void(int unit, float* out)>& read_unit,
                                  DType dtype, uint64_t max_shard_bytes = 5'000'000'000);

// Writes config.json and the weights (in `dtype`, sharded above max_shard_bytes) to `dir` in the
// layout save_pretrained uses. Each file is written atomically; the weights come last so a
// directory whose weights are complete also has its config.
void save_hf_checkpoint(const fs::path& dir, const ModelConfig& config, const ParamLayout& layout,
                        const ParamStore& store, DType dtype,
                        uint64_t max_shard_bytes = 5'000'000'000);

}  // namespace kiln
