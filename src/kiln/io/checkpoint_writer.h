// Writing Hugging Face checkpoint directories the way save_pretrained lays them out.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kiln/base/file.h"
#include "kiln/io/safetensors.h"
#include "kiln/tensor/dtype.h"

namespace kiln {

// save_pretrained's default max_shard_size, "5GB" (decimal).
inline constexpr uint64_t kDefaultMaxShardBytes = 5'000'000'000;

// Shard names as save_pretrained writes them: shard_file_name(0, 3) ==
// "model-00001-of-00003.safetensors".
std::string shard_file_name(size_t index, size_t count);

// Writes `tensors` (converted to `dtype`) into `dir`, creating it if needed. When all tensor
// bytes fit in max_shard_bytes this is one "model.safetensors"; otherwise shards are planned as
// huggingface_hub does (in order, a new shard when the next tensor would tip the current one
// over the limit, a tensor larger than the limit alone in its own shard), written as
// "model-0000i-of-0000n.safetensors", and "model.safetensors.index.json" (metadata.total_size,
// weight_map) is written last, so the checkpoint is complete only once its index is. Every file
// is written atomically with metadata {"format": "pt"}. Files of an earlier save in the same
// layout that this one does not overwrite (a stale index, single file or shard) are removed, as
// save_pretrained does, so the directory never mixes two checkpoints.
void write_checkpoint_dir(const fs::path& dir, std::span<const TensorToWrite> tensors, DType dtype,
                          uint64_t max_shard_bytes = kDefaultMaxShardBytes);

}  // namespace kiln
