// Reading Hugging Face checkpoints: a model directory holding one "model.safetensors" or a
// "model.safetensors.index.json" with its shards, or a single .safetensors file.
#pragma once

#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/file.h"
#include "kiln/io/safetensors.h"

namespace kiln {

// File names save_pretrained uses.
inline constexpr std::string_view kSafetensorsSingleFile = "model.safetensors";
inline constexpr std::string_view kSafetensorsIndexFile = "model.safetensors.index.json";

// All tensors of a checkpoint, memory-mapped. Opening validates every file header and, for a
// sharded checkpoint, that the index's weight_map and the shards agree exactly: each mapped
// tensor is in its shard and no shard holds a tensor the map does not send there.
class CheckpointReader {
 public:
  // `path`: a model directory (model.safetensors preferred over the index, as transformers
  // does), a model.safetensors.index.json, or any .safetensors file.
  explicit CheckpointReader(const fs::path& path);

  const fs::path& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(std::string_view name) const;
  // Errors name the tensor and the checkpoint when it is missing.
  const TensorInfo& info(std::string_view name) const;
  // The file holding the tensor.
  std::string file_of(std::string_view name) const;
  // Checks the tensor's shape against `expected_shape` and converts it to f32 into
  // dst[0, numel). Error: "<file>: tensor <name> has shape [a, b], expected [c, d]".
  void read_f32(std::string_view name, std::span<const int64_t> expected_shape, float* dst) const;
  // Elements [begin, begin + count) of the flat tensor, converted to f32 into dst[0, count)
  // (same shape check). Only that range's bytes are read, and its mapped pages are given back
  // afterwards, so a rank that reads its part holds only that part.
  void read_f32_range(std::string_view name, std::span<const int64_t> expected_shape, size_t begin,
                      size_t count, float* dst) const;

 private:
  struct Entry {
    size_t file;    // index into files_
    size_t tensor;  // index into files_[file].tensors()
  };
  const Entry& entry(std::string_view name) const;
  void open_single(const fs::path& file);
  void open_index(const fs::path& index_path);

  fs::path path_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace kiln
