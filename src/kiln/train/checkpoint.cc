#include "kiln/train/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/base/log.h"
#include "kiln/dist/fsdp.h"
#include "kiln/io/safetensors.h"
#include "kiln/train/optimizer.h"

namespace kiln {

namespace {

constexpr int kFormatVersion = 1;

std::string rank_file_name(int rank, int world) {
  return fmt::format("rank-{:05}-of-{:05}.safetensors", rank, world);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// One old shard file: its per-unit element ranges and tensors.
struct ShardFile {
  std::unique_ptr<SafetensorsFile> file;
  std::vector<ShardRange> ranges;  // per unit; empty range when the file holds none of it
};

std::vector<ShardFile> open_shards(const fs::path& dir, const Json& manifest, int num_units) {
  std::vector<ShardFile> out;
  for (const auto& name : manifest.at("files")) {
    ShardFile f;
    f.file = std::make_unique<SafetensorsFile>(dir / name.get<std::string>());
    f.ranges.resize(num_units);
    const auto& meta = f.file->metadata();
    for (int u = 0; u < num_units; ++u) {
      auto it = meta.find(fmt::format("u{}.begin", u));
      const TensorInfo* t = f.file->find(fmt::format("u{}.params", u));
      if (it == meta.end() || t == nullptr) continue;
      const size_t b = std::stoull(it->second);
      f.ranges[u] = {b, b + t->numel()};
    }
    out.push_back(std::move(f));
  }
  return out;
}

// Copies elements [want.begin, want.end) of tensor `kind` ("params", "m", "v") of `unit` from
// whichever shards hold them into dst. Errors when some element is in no shard.
void assemble(const std::vector<ShardFile>& shards, const fs::path& dir, int unit, const char* kind,
              ShardRange want, float* dst) {
  size_t covered = 0;
  for (const auto& f : shards) {
    const ShardRange have = f.ranges[unit];
    const size_t lo = std::max(want.begin, have.begin), hi = std::min(want.end, have.end);
    if (lo >= hi) continue;
    const TensorInfo* t = f.file->find(fmt::format("u{}.{}", unit, kind));
    if (t == nullptr) {
      fail("{}: {} has no optimizer state '{}' for unit {} (was it saved with another optimizer?)",
           dir.string(), f.file->path().filename().string(), kind, unit);
    }
    if (t->dtype != DType::F32 || t->numel() != have.size()) {
      fail("{}: tensor u{}.{} has the wrong size or dtype", f.file->path().string(), unit, kind);
    }
    std::memcpy(dst + (lo - want.begin),
                reinterpret_cast<const float*>(f.file->data(*t)) + (lo - have.begin),
                (hi - lo) * sizeof(float));
    covered += hi - lo;
  }
  if (covered != want.size()) {
    fail("{}: the shards cover {} of the {} elements [{}, {}) of unit {} (incomplete checkpoint)",
         dir.string(), covered, want.size(), want.begin, want.end, unit);
  }
}

Json read_manifest(const fs::path& dir, const ParamLayout& layout) {
  Json m = read_json_file(dir / "manifest.json");
  if (m.value("format_version", 0) != kFormatVersion) {
    fail("{}/manifest.json: unsupported checkpoint format version {}", dir.string(),
         m.value("format_version", 0));
  }
  const auto& units = m.at("units");
  if (static_cast<int>(units.size()) != layout.num_units()) {
    fail("{}: checkpoint has {} units, this model {} (a different model?)", dir.string(),
         units.size(), layout.num_units());
  }
  for (int u = 0; u < layout.num_units(); ++u) {
    const size_t n = units[u].at("numel").get<size_t>();
    if (n != layout.units()[u].numel) {
      fail("{}: unit {} has {} elements in the checkpoint, {} in this model (a different model?)",
           dir.string(), layout.units()[u].name, n, layout.units()[u].numel);
    }
  }
  return m;
}

}  // namespace

std::string checkpoint_dir_name(int64_t step) { return fmt::format("step-{:08}", step); }

fs::path save_checkpoint(const fs::path& root, const CheckpointState& st, const ParamLayout& layout,
                         Fsdp& fsdp, Optimizer& opt, Communicator& world, bool write_shard) {
  const int rank = world.rank(), W = world.world_size();
  const fs::path final_dir = root / checkpoint_dir_name(st.step);
  fs::path tmp = final_dir;
  tmp += ".tmp";
  std::string err;
  try {
    if (rank == 0) {
      fs::remove_all(tmp);
      fs::create_directories(tmp);
    }
  } catch (const std::exception& e) {
    err = e.what();
  }
  double failed = err.empty() ? 0 : 1;
  world.all_reduce(&failed, 1, ReduceOp::kMax);
  if (failed != 0) fail("checkpoint {}: cannot create {}: {}", st.step, tmp.string(), err);

  if (write_shard) {
    try {
      const auto ranges = fsdp.shard_ranges();
      std::vector<TensorToWrite> tensors;
      std::map<std::string, std::string> meta = {{"rank", std::to_string(rank)},
                                                 {"world_size", std::to_string(W)}};
      for (int u = 0; u < layout.num_units(); ++u) {
        const int64_t n = static_cast<int64_t>(ranges[u].size());
        if (n == 0) continue;
        meta[fmt::format("u{}.begin", u)] = std::to_string(ranges[u].begin);
        tensors.push_back({fmt::format("u{}.params", u), {n}, fsdp.shard_params(u), {}});
        if (opt.m(u).size() > 0)
          tensors.push_back({fmt::format("u{}.m", u), {n}, opt.m(u).data(), {}});
        if (opt.v(u).size() > 0)
          tensors.push_back({fmt::format("u{}.v", u), {n}, opt.v(u).data(), {}});
      }
      write_safetensors(tmp / rank_file_name(rank, W), tensors, DType::F32, meta);
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  // Which rank (if any) failed: the others must not commit.
  double bad = err.empty() ? 0 : rank + 1;
  world.all_reduce(&bad, 1, ReduceOp::kMax);
  if (bad == 0 && rank == 0) {
    try {
      Json units = Json::array();
      for (const auto& u : layout.units()) units.push_back({{"name", u.name}, {"numel", u.numel}});
      Json files = Json::array();
      for (const auto& e : fs::directory_iterator(tmp)) {
        const std::string name = e.path().filename().string();
        if (name.starts_with("rank-") && name.ends_with(".safetensors")) files.push_back(name);
      }
      std::sort(files.begin(), files.end());
      const Json manifest = {
          {"format_version", kFormatVersion},
          {"kiln_version", "0.1.0"},
          {"step", st.step},
          {"world_size", W},
          {"strategy", st.strategy},
          {"units", units},
          {"files", files},
          {"sampler", {{"epoch", st.sampler.epoch}, {"index", st.sampler.index}}},
          {"optimizer_steps", opt.step_count()},
          {"recipe", st.recipe_yaml},
          {"recipe_hash", fmt::format("{:016x}", fnv1a(st.recipe_yaml))},
          {"metrics", st.metrics}};
      write_file_atomic(tmp / "config.json", st.model_config.dump(2) + "\n");
      write_file_atomic(tmp / "manifest.json", manifest.dump(2) + "\n");
      fsync_dir(tmp);
      if (fs::exists(final_dir)) fs::remove_all(final_dir);
      fs::rename(tmp, final_dir);
      fsync_dir(root);
    } catch (const std::exception& e) {
      err = e.what();
      bad = 1;
    }
  }
  world.all_reduce(&bad, 1, ReduceOp::kMax);
  if (bad != 0) {
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
    if (!err.empty()) fail("checkpoint step {} failed on rank {}: {}", st.step, rank, err);
    fail("checkpoint step {} failed on rank {} (see its log); the previous checkpoint is intact",
         st.step, static_cast<int>(bad) - 1);
  }
  return final_dir;
}

CheckpointState load_checkpoint(const fs::path& dir, const ParamLayout& layout, Fsdp& fsdp,
                                Optimizer& opt) {
  const Json m = read_manifest(dir, layout);
  const auto shards = open_shards(dir, m, layout.num_units());
  const auto ranges = fsdp.shard_ranges();
  for (int u = 0; u < layout.num_units(); ++u) {
    assemble(shards, dir, u, "params", ranges[u], fsdp.shard_params(u));
    if (opt.m(u).size() > 0) assemble(shards, dir, u, "m", ranges[u], opt.m(u).data());
    if (opt.v(u).size() > 0) assemble(shards, dir, u, "v", ranges[u], opt.v(u).data());
  }
  opt.set_step_count(m.at("optimizer_steps").get<int64_t>());
  CheckpointState st;
  st.step = m.at("step").get<int64_t>();
  st.sampler.epoch = m.at("sampler").at("epoch").get<uint64_t>();
  st.sampler.index = m.at("sampler").at("index").get<uint64_t>();
  st.strategy = m.at("strategy").get<std::string>();
  st.recipe_yaml = m.at("recipe").get<std::string>();
  st.metrics = m.at("metrics");
  return st;
}

std::vector<CheckpointInfo> list_checkpoints(const fs::path& root) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (!e.is_directory() || !name.starts_with("step-") || name.ends_with(".tmp")) continue;
    if (!fs::exists(e.path() / "manifest.json")) continue;
    try {
      Json m = read_json_file(e.path() / "manifest.json");
      out.push_back({e.path(), m.at("step").get<int64_t>(), std::move(m)});
    } catch (const std::exception& ex) {
      KILN_LOG_WARN("ignoring {}: {}", e.path().string(), ex.what());
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

std::optional<CheckpointInfo> latest_checkpoint(const fs::path& root) {
  auto all = list_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back();
}

void prune_checkpoints(const fs::path& root, int keep_last, const std::vector<fs::path>& protect) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return;
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.path().filename().string().ends_with(".tmp")) fs::remove_all(e.path(), ec);
  }
  if (keep_last <= 0) return;
  auto all = list_checkpoints(root);
  const size_t n = all.size();
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < n; ++i) {
    if (std::find(protect.begin(), protect.end(), all[i].dir) != protect.end()) continue;
    fs::remove_all(all[i].dir, ec);
  }
}

struct CheckpointUnitReader::Impl {
  fs::path dir;
  std::vector<ShardFile> shards;
  const ParamLayout* layout;
};

CheckpointUnitReader::CheckpointUnitReader(const fs::path& dir, const ParamLayout& layout)
    : impl_(std::make_unique<Impl>()) {
  manifest_ = read_manifest(dir, layout);
  impl_->dir = dir;
  impl_->shards = open_shards(dir, manifest_, layout.num_units());
  impl_->layout = &layout;
}

CheckpointUnitReader::~CheckpointUnitReader() = default;

void CheckpointUnitReader::read_unit(int unit, float* out) const {
  assemble(impl_->shards, impl_->dir, unit, "params", {0, impl_->layout->units()[unit].numel}, out);
}

}  // namespace kiln
