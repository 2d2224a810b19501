#include "kiln/io/checkpoint_reader.h"

#include <algorithm>

#include "kiln/base/error.h"
#include "kiln/base/json.h"

namespace kiln {

CheckpointReader::CheckpointReader(const fs::path& path) : path_(path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_directory(st)) {
    // transformers looks for the single file first, then the index.
    if (fs::exists(path / kSafetensorsSingleFile)) {
      open_single(path / kSafetensorsSingleFile);
    } else if (fs::exists(path / kSafetensorsIndexFile)) {
      open_index(path / kSafetensorsIndexFile);
    } else {
      fail("{}: neither {} nor {} found in this directory", path.string(), kSafetensorsSingleFile,
           kSafetensorsIndexFile);
    }
  } else if (!fs::exists(st)) {
    fail("{}: no such file or directory", path.string());
  } else if (path.filename().string().ends_with(".index.json")) {
    open_index(path);
  } else {
    open_single(path);
  }
}

void CheckpointReader::open_single(const fs::path& file) {
  const auto& tensors = files_.emplace_back(file).tensors();
  for (size_t i = 0; i < tensors.size(); ++i) entries_.emplace(tensors[i].name, Entry{0, i});
}

// Index: {"metadata": {...}, "weight_map": {tensor name: shard file name, ...}}.
void CheckpointReader::open_index(const fs::path& index_path) {
  const std::string what = index_path.string();
  const Json index = read_json_file(index_path);
  if (!index.is_object()) fail("{}: not a JSON object", what);
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) fail("{}: missing \"weight_map\" object", what);

  std::map<std::string, size_t> shard_ids;  // shard file name -> index into files_
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string()) fail("{}: weight_map entry of tensor {} is not a string", what, name);
    const auto& s = shard.get_ref<const std::string&>();
    // Shards live next to the index; refuse paths that would reach elsewhere.
    if (s.empty() || s == "." || s == ".." || s.find('/') != std::string::npos) {
      fail("{}: tensor {}: shard {} is not a file name in the checkpoint directory", what, name, s);
    }
    shard_ids.emplace(s, 0);
  }
  const fs::path dir = index_path.parent_path();
  files_.reserve(shard_ids.size());
  for (auto& [shard, id] : shard_ids) {
    const fs::path p = dir / shard;
    if (!fs::exists(p)) fail("{}: shard {} does not exist", what, p.string());
    id = files_.size();
    files_.emplace_back(p);
  }

  for (const auto& [name, shard] : wm->items()) {
    const size_t f = shard_ids.at(shard.get<std::string>());
    const TensorInfo* t = files_[f].find(name);
    if (t == nullptr) {
      fail("{}: tensor {} is mapped to this shard by {} but the file does not hold it",
           files_[f].path().string(), name, what);
    }
    entries_.emplace(name, Entry{f, static_cast<size_t>(t - files_[f].tensors().data())});
  }
  for (size_t f = 0; f < files_.size(); ++f) {
    for (const TensorInfo& t : files_[f].tensors()) {
      auto it = entries_.find(t.name);
      if (it == entries_.end()) {
        fail("{}: tensor {} is not in the weight_map of {}", files_[f].path().string(), t.name,
             what);
      }
      if (it->second.file != f) {
        fail("{}: tensor {} is also in {}, where the weight_map of {} places it",
             files_[f].path().string(), t.name, files_[it->second.file].path().string(), what);
      }
    }
  }
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, e] : entries_) out.push_back(name);
  return out;
}

bool CheckpointReader::contains(std::string_view name) const {
  return entries_.find(name) != entries_.end();
}

const CheckpointReader::Entry& CheckpointReader::entry(std::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) fail("{}: no tensor named {} in the checkpoint", path_.string(), name);
  return it->second;
}

const TensorInfo& CheckpointReader::info(std::string_view name) const {
  const Entry& e = entry(name);
  return files_[e.file].tensors()[e.tensor];
}

std::string CheckpointReader::file_of(std::string_view name) const {
  return files_[entry(name).file].path().string();
}

void CheckpointReader::read_f32(std::string_view name, std::span<const int64_t> expected_shape,
                                float* dst) const {
  const auto n = checked_numel(expected_shape);
  KILN_CHECK(n.has_value(), "tensor {}: bad expected shape", name);
  read_f32_range(name, expected_shape, 0, static_cast<size_t>(*n), dst);
}

void CheckpointReader::read_f32_range(std::string_view name,
                                      std::span<const int64_t> expected_shape, size_t begin,
                                      size_t count, float* dst) const {
  const Entry& e = entry(name);
  const SafetensorsFile& f = files_[e.file];
  const TensorInfo& t = f.tensors()[e.tensor];
  if (!std::ranges::equal(t.shape, expected_shape)) {
    fail("{}: tensor {} has shape {}, expected {}", f.path().string(), t.name,
         format_shape(t.shape), format_shape(expected_shape));
  }
  // In pieces, each given back once read: a large tensor is never resident all at once.
  constexpr size_t kPiece = size_t{4} << 20;
  for (size_t i = 0; i < count; i += kPiece) {
    const size_t n = std::min(kPiece, count - i);
    f.read_f32_range(t, begin + i, n, dst + i);
    f.release(t, begin + i, n);
  }
}

}  // namespace kiln
