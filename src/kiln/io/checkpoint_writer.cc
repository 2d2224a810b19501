#include "kiln/io/checkpoint_writer.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/json.h"
#include "kiln/io/checkpoint_reader.h"

namespace kiln {

namespace {

const std::map<std::string, std::string> kShardMetadata = {{"format", "pt"}};

// "model-DDDDD-of-DDDDD.safetensors", the names shard_file_name produces.
bool is_shard_name(std::string_view s) {
  constexpr std::string_view kPattern = "model-#####-of-#####.safetensors";
  if (s.size() != kPattern.size()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool ok = kPattern[i] == '#' ? (s[i] >= '0' && s[i] <= '9') : s[i] == kPattern[i];
    if (!ok) return false;
  }
  return true;
}

void remove_file(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
  if (ec) fail("{}: cannot remove stale file: {}", p.string(), ec.message());
}

// Removes shards of an earlier save that are not among `keep`.
void remove_stale_shards(const fs::path& dir, const std::set<std::string>& keep) {
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && is_shard_name(name) && !keep.contains(name)) stale.push_back(e);
  }
  for (const fs::path& p : stale) remove_file(p);
}

}  // namespace

std::string shard_file_name(size_t index, size_t count) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

void write_checkpoint_dir(const fs::path& dir, std::span<const TensorToWrite> tensors, DType dtype,
                          uint64_t max_shard_bytes) {
  const std::string what = dir.string();
  const uint64_t total_size = check_tensors_to_write(tensors, dtype, what);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{}: cannot create directory: {}", what, ec.message());

  // Shard plan, as huggingface_hub's split_state_dict_into_shards: shards[k] lists tensor
  // indices. An oversized tensor becomes its own shard immediately, ahead of the open one.
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> open;
  uint64_t open_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t bytes = *checked_numel(tensors[i].shape) * dtype_size(dtype);
    if (bytes > max_shard_bytes) {
      shards.push_back({i});
      continue;
    }
    if (open_bytes + bytes > max_shard_bytes) {
      shards.push_back(std::move(open));
      open.clear();
      open_bytes = 0;
    }
    open.push_back(i);
    open_bytes += bytes;
  }
  if (!open.empty()) shards.push_back(std::move(open));

  if (shards.size() <= 1) {
    write_safetensors(dir / kSafetensorsSingleFile, tensors, dtype, kShardMetadata);
    if (fs::exists(dir / kSafetensorsIndexFile)) remove_file(dir / kSafetensorsIndexFile);
    remove_stale_shards(dir, {});
    return;
  }

  Json index;
  index["metadata"]["total_size"] = total_size;
  Json& weight_map = index["weight_map"] = Json::object();
  std::set<std::string> names;
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string name = shard_file_name(k, shards.size());
    std::vector<TensorToWrite> shard;
    shard.reserve(shards[k].size());
    for (size_t i : shards[k]) {
      shard.push_back(tensors[i]);
      weight_map[tensors[i].name] = name;
    }
    write_safetensors(dir / name, shard, dtype, kShardMetadata);
    names.insert(name);
  }
  // A stale single file would win over the index when the checkpoint is loaded.
  if (fs::exists(dir / kSafetensorsSingleFile)) remove_file(dir / kSafetensorsSingleFile);
  std::string text;
  try {
    // Formatted as json.dumps(index, indent=2, sort_keys=True) + "\n" in save_pretrained.
    text = index.dump(2, ' ', true, Json::error_handler_t::strict) + "\n";
  } catch (const Json::exception& e) {
    fail("{}: tensor names must be valid UTF-8: {}", what, e.what());
  }
  write_file_atomic(dir / kSafetensorsIndexFile, text);
  remove_stale_shards(dir, names);
}

}  // namespace kiln
