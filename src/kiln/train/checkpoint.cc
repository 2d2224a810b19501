#include "kiln/train/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "kiln/base/error.h"
#include "kiln/base/fault.h"
#include "kiln/base/file.h"
#include "kiln/base/log.h"
#include "kiln/fsdp/fsdp.h"
#include "kiln/io/safetensors.h"
#include "kiln/train/checkpoint_manifest.h"
#include "kiln/train/checkpoint_verify.h"
#include "kiln/train/optimizer.h"

namespace kiln {

namespace {

std::string rank_file_name(int rank, int world) {
  return fmt::format("rank-{:05}-of-{:05}.safetensors", rank, world);
}

// One old shard file: its per-unit element ranges and tensors.
struct ShardFile {
  std::unique_ptr<SafetensorsFile> file;
  std::vector<ShardRange> ranges;  // per unit; empty range when the file holds none of it
};

// The shards of a verified checkpoint, their headers parsed.
std::vector<ShardFile> open_shards(const CheckpointCheck& c, int num_units) {
  if (!c.intact()) fail("{}", c.summary());
  std::vector<ShardFile> out;
  for (size_t k = 0; k < c.manifest.num_shards; ++k) {
    ShardFile f;
    f.file = std::make_unique<SafetensorsFile>(c.dir / c.manifest.files[k].name);
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
    // In pieces, each given back once copied: what was read is not kept resident.
    constexpr size_t kPiece = size_t{4} << 20;
    const float* src = reinterpret_cast<const float*>(f.file->data(*t));
    for (size_t i = lo; i < hi; i += kPiece) {
      const size_t n = std::min(kPiece, hi - i);
      std::memcpy(dst + (i - want.begin), src + (i - have.begin), n * sizeof(float));
      f.file->release(*t, i - have.begin, n);
    }
    covered += hi - lo;
  }
  if (covered != want.size()) {
    fail("{}: the shards cover {} of the {} elements [{}, {}) of unit {} (incomplete checkpoint)",
         dir.string(), covered, want.size(), want.begin, want.end, unit);
  }
}

}  // namespace

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Per unit: this rank's parameters, m and v (null when the optimizer keeps none).
struct ShardSource {
  std::vector<const float*> params, m, v;
};

}  // namespace

std::vector<ShardRange> checkpoint_ranges(const Fsdp& fsdp) {
  std::vector<ShardRange> ranges = fsdp.shard_ranges();
  for (int u = 0; u < fsdp.num_units(); ++u) {
    if (!fsdp.trainable(u)) ranges[u] = {};
  }
  return ranges;
}

size_t checkpoint_snapshot_floats(const std::vector<ShardRange>& ranges, const Optimizer& opt) {
  size_t total = 0;
  for (size_t u = 0; u < ranges.size(); ++u) {
    const int unit = static_cast<int>(u);
    total += ranges[u].size() * (1 + (opt.m(unit).size() > 0) + (opt.v(unit).size() > 0));
  }
  return total;
}

size_t checkpoint_stage_floats(const std::vector<ShardRange>& ranges) {
  size_t largest = 0;
  for (const auto& r : ranges) largest = std::max(largest, r.size());
  return largest;
}

namespace {

// Writes one rank's shard file (temporary name, fsync, rename). The "checkpoint" fault point
// fires once about half of the file has been written. Returns the tensor bytes written and the
// file's digest. `src` holds host pointers (a snapshot), or, when `device` is given, that
// backend's device pointers: each tensor is then read into one reused host buffer right before
// it is written, so a save written at once holds one tensor of host memory, not a copy of the
// shard.
std::pair<uint64_t, FileDigest> write_rank_file(const fs::path& path, int rank, int world_size,
                                                int64_t step, const std::vector<ShardRange>& ranges,
                                                const ShardSource& src,
                                                const Backend* device = nullptr) {
  std::vector<TensorToWrite> tensors;
  std::map<std::string, std::string> meta = {{"rank", std::to_string(rank)},
                                             {"world_size", std::to_string(world_size)}};
  std::vector<float> stage(device != nullptr ? checkpoint_stage_floats(ranges) : 0);
  auto add = [&](std::string name, int64_t n, const float* data) {
    if (device == nullptr) {
      tensors.push_back({std::move(name), {n}, data, {}});
      return;
    }
    tensors.push_back({std::move(name), {n}, nullptr, [device, data, n, &stage] {
                         device->copy_to_host(stage.data(), data,
                                              static_cast<size_t>(n) * sizeof(float));
                         device->synchronize();
                         return static_cast<const float*>(stage.data());
                       }});
  };
  uint64_t bytes = 0;
  for (size_t u = 0; u < ranges.size(); ++u) {
    const int64_t n = static_cast<int64_t>(ranges[u].size());
    if (n == 0) continue;
    meta[fmt::format("u{}.begin", u)] = std::to_string(ranges[u].begin);
    add(fmt::format("u{}.params", u), n, src.params[u]);
    if (src.m[u] != nullptr) add(fmt::format("u{}.m", u), n, src.m[u]);
    if (src.v[u] != nullptr) add(fmt::format("u{}.v", u), n, src.v[u]);
    bytes += static_cast<uint64_t>(n) * sizeof(float) *
             (1 + (src.m[u] != nullptr) + (src.v[u] != nullptr));
  }
  if (!tensors.empty()) {
    // Kill tests land in the middle of the write: the tensors before this one are written.
    TensorToWrite& mid = tensors[tensors.size() / 2];
    const float* data = mid.data;
    mid.data = nullptr;
    mid.source = [data, step, inner = std::move(mid.source)] {
      fault_point("checkpoint", step);
      return inner ? inner() : data;
    };
  }
  const FileDigest digest = write_safetensors(path, tensors, DType::F32, meta);
  return {bytes, digest};
}

// config.json (and, from a base model, its tokenizer and generation files) beside the shards.
void write_checkpoint_config(const fs::path& dir, const Json& model_config,
                             const HfModelFiles* files) {
  if (files == nullptr) {
    write_file_atomic(dir / "config.json", model_config.dump(2) + "\n");
    return;
  }
  files->write(dir, "float32");
}

// A shard's digest as kDigestSlots doubles {written, its digest}, all-reduced (max) from the one
// rank that wrote it.
constexpr size_t kDigestSlots = 1 + kDigestDoubles;

void put_digest(const FileDigest& d, double* out) {
  out[0] = 1;
  digest_to_doubles(d, out + 1);
}

// "files": the shards of the ranks that wrote one, in rank order.
Json shard_entries(const double* digests, int world_size) {
  Json files = Json::array();
  for (int r = 0; r < world_size; ++r) {
    const double* d = digests + kDigestSlots * r;
    if (d[0] == 0) continue;
    files.push_back(
        manifest_file_entry({rank_file_name(r, world_size), digest_from_doubles(d + 1)}));
  }
  return files;
}

// "other_files": config.json and the tokenizer and generation files beside the shards, by name.
// They are small, so they are digested from disk once written.
Json other_file_entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && !name.starts_with("rank-") && name != "manifest.json") {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  Json files = Json::array();
  for (const auto& name : names)
    files.push_back(manifest_file_entry({name, digest_file(dir / name)}));
  return files;
}

}  // namespace

struct CheckpointSaver::Pending {
  int64_t step = 0;
  fs::path tmp, final_dir;
  Json manifest;  // without "files"
  Json model_config;
  std::shared_ptr<const HfModelFiles> hf_files;
  std::thread thread;         // background write
  std::atomic<int> state{0};  // 0 running, 1 done, 2 failed
  std::string error;          // set before state becomes 2
  double write_s = 0, blocked_s = 0;
  uint64_t bytes = 0;
  FileDigest digest;  // of this rank's shard file
  bool background = false;
  void join() {
    if (thread.joinable()) thread.join();
  }
};

CheckpointSaver::CheckpointSaver(fs::path root, const ParamLayout& layout, Fsdp& fsdp,
                                 Optimizer& opt, Communicator& world, bool write_shard,
                                 bool background, RetentionPolicy policy, bool log)
    : root_(std::move(root)),
      layout_(layout),
      fsdp_(fsdp),
      opt_(opt),
      world_(world),
      write_shard_(write_shard),
      background_(background),
      log_(log),
      policy_(std::move(policy)) {}

CheckpointSaver::~CheckpointSaver() {
  if (pending_) pending_->join();
}

std::array<double, 2> CheckpointSaver::status() const {
  if (!pending_) return {0, 0};
  const int s = pending_->state.load(std::memory_order_acquire);
  return {s == 0 ? 1.0 : 0.0, s == 2 ? 1.0 : 0.0};
}

void CheckpointSaver::on_status(double running, double failed) {
  if (!pending_) return;
  if (running > 0 && failed == 0) return;
  finalize();
}

void CheckpointSaver::flush() {
  if (pending_) finalize();
}

void CheckpointSaver::finalize() {
  const auto t0 = Clock::now();
  Pending& p = *pending_;
  p.join();  // on failure elsewhere this rank's write must end before the directory goes
  const int rank = world_.rank();
  std::string err = p.state.load() == 2 ? p.error : std::string();
  // Which rank (if any) failed, the others must not commit; and each shard's digest, for the
  // manifest.
  std::vector<double> v(1 + kDigestSlots * world_.world_size(), 0.0);
  v[0] = err.empty() ? 0 : rank + 1;
  if (write_shard_ && err.empty()) put_digest(p.digest, &v[1 + kDigestSlots * rank]);
  world_.all_reduce(v.data(), v.size(), ReduceOp::kMax);
  double bad = v[0];
  if (bad == 0 && rank == 0) {
    try {
      Json manifest = p.manifest;
      manifest["files"] = shard_entries(v.data() + 1, world_.world_size());
      write_checkpoint_config(p.tmp, p.model_config, p.hf_files.get());
      manifest["other_files"] = other_file_entries(p.tmp);
      commit_checkpoint_dir(p.tmp, p.final_dir, root_, {{"manifest.json", manifest.dump(2) + "\n"}},
                            p.step);
    } catch (const std::exception& e) {
      err = e.what();
      bad = 1;
    }
  }
  world_.all_reduce(&bad, 1, ReduceOp::kMax);
  const std::unique_ptr<Pending> done = std::move(pending_);
  if (bad != 0) {
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(p.tmp, ec);
    }
    if (!err.empty()) fail("checkpoint step {} failed on rank {}: {}", p.step, rank, err);
    fail("checkpoint step {} failed on rank {} (see its log); the previous checkpoint is intact",
         p.step, static_cast<int>(bad) - 1);
  }
  last_committed_ = p.final_dir;
  if (rank == 0) {
    try {
      apply_retention(root_, policy_);
    } catch (const std::exception& e) {
      KILN_LOG_WARN("checkpoint retention in {}: {}", root_.string(), e.what());
    }
  }
  const double commit_s = seconds_since(t0);
  p.blocked_s += commit_s;
  last_stats_ = {p.step, p.blocked_s, commit_s, p.write_s, p.bytes};
  if (log_ && rank == 0) {
    KILN_LOG_INFO(
        "checkpoint {}: training blocked {:.3f} s; shard write {:.3f} s ({:.2f} GB/s, {:.1f} MiB "
        "on rank 0{})",
        p.final_dir.string(), p.blocked_s, p.write_s,
        p.write_s > 0 ? static_cast<double>(p.bytes) / p.write_s / 1e9 : 0.0,
        static_cast<double>(p.bytes) / 1048576.0, p.background ? ", in the background" : "");
  }
}

void CheckpointSaver::save(const CheckpointState& st, bool sync) {
  const auto t0 = Clock::now();
  double waited = 0;
  if (pending_) {
    finalize();
    waited = seconds_since(t0);
  }
  const auto t1 = Clock::now();
  const int rank = world_.rank(), W = world_.world_size();
  auto p = std::make_unique<Pending>();
  p->step = st.step;
  p->final_dir = root_ / checkpoint_dir_name(st.step);
  p->tmp = p->final_dir;
  p->tmp += ".tmp";
  p->background = background_ && !sync;
  std::string err;
  try {
    if (rank == 0) {
      fs::remove_all(p->tmp);
      fs::create_directories(p->tmp);
    }
  } catch (const std::exception& e) {
    err = e.what();
  }
  double failed = err.empty() ? 0 : 1;
  world_.all_reduce(&failed, 1, ReduceOp::kMax);
  if (failed != 0) fail("checkpoint {}: cannot create {}: {}", st.step, p->tmp.string(), err);

  // Everything the manifest records is taken now: the optimizer moves on during a background
  // write.
  p->manifest = manifest_json(st, layout_, W, opt_.step_count());
  p->model_config = st.model_config;
  p->hf_files = st.hf_files;

  if (!write_shard_) {
    p->state = 1;
  } else {
    const auto ranges = checkpoint_ranges(fsdp_);
    const int U = layout_.num_units();
    ShardSource src;
    src.params.assign(U, nullptr);
    src.m.assign(U, nullptr);
    src.v.assign(U, nullptr);
    for (int u = 0; u < U; ++u) {
      if (ranges[u].size() == 0) continue;
      src.params[u] = fsdp_.shard_params(u);
      if (opt_.m(u).size() > 0) src.m[u] = opt_.m(u).data();
      if (opt_.v(u).size() > 0) src.v[u] = opt_.v(u).data();
    }
    const fs::path file = p->tmp / rank_file_name(rank, W);
    const Backend& be = fsdp_.backend();
    if (!p->background) {
      // Written at once, straight from the device buffers, one tensor at a time.
      const auto tw = Clock::now();
      try {
        std::tie(p->bytes, p->digest) = write_rank_file(file, rank, W, st.step, ranges, src, &be);
        p->state = 1;
      } catch (const std::exception& e) {
        p->error = e.what();
        p->state = 2;
      }
      p->write_s = seconds_since(tw);
    } else {
      // In the background: one device read into host buffers reused by every save, since the
      // optimizer moves on while the file is written.
      {
        const size_t total = checkpoint_snapshot_floats(ranges, opt_);
        if (arena_size_ != total) {
          arena_.reset(new float[total]);
          arena_size_ = total;
        }
        float* dst = arena_.get();
        auto copy = [&](const float*& ptr, size_t n) {
          if (ptr == nullptr) return;
          be.copy_to_host(dst, ptr, n * sizeof(float));
          ptr = dst;
          dst += n;
        };
        for (int u = 0; u < U; ++u) {
          copy(src.params[u], ranges[u].size());
          copy(src.m[u], ranges[u].size());
          copy(src.v[u], ranges[u].size());
        }
        be.synchronize();
      }
      Pending* pp = p.get();
      p->thread = std::thread([pp, file, rank, W, ranges, src = std::move(src)] {
        const auto tw = Clock::now();
        try {
          std::tie(pp->bytes, pp->digest) = write_rank_file(file, rank, W, pp->step, ranges, src);
          pp->write_s = seconds_since(tw);
          pp->state.store(1, std::memory_order_release);
        } catch (const std::exception& e) {
          pp->error = e.what();
          pp->write_s = seconds_since(tw);
          pp->state.store(2, std::memory_order_release);
        }
      });
    }
  }
  p->blocked_s = waited + seconds_since(t1);
  pending_ = std::move(p);
  if (!pending_->background) finalize();
}

fs::path save_checkpoint(const fs::path& root, const CheckpointState& st, const ParamLayout& layout,
                         Fsdp& fsdp, Optimizer& opt, Communicator& world, bool write_shard) {
  CheckpointSaver saver(root, layout, fsdp, opt, world, write_shard, /*background=*/false,
                        RetentionPolicy{}, /*log=*/false);
  saver.save(st);
  return saver.last_committed();
}

CheckpointState load_checkpoint(const CheckpointCheck& checked, const ParamLayout& layout,
                                Fsdp& fsdp, Optimizer& opt) {
  const auto shards = open_shards(checked, layout.num_units());
  const auto ranges = checkpoint_ranges(fsdp);
  const Backend& be = fsdp.backend();
  std::vector<float> host;
  // Each piece through host memory: assembled from the old shards, then copied to the device.
  auto load = [&](int u, const char* kind, float* device) {
    host.resize(ranges[u].size());
    assemble(shards, checked.dir, u, kind, ranges[u], host.data());
    be.copy_to_device(device, host.data(), host.size() * sizeof(float));
    be.synchronize();
  };
  for (int u = 0; u < layout.num_units(); ++u) {
    if (ranges[u].size() == 0) continue;
    load(u, "params", fsdp.shard_params(u));
    if (opt.m(u).size() > 0) load(u, "m", opt.m(u).data());
    if (opt.v(u).size() > 0) load(u, "v", opt.v(u).data());
  }
  opt.set_step_count(checked.manifest.optimizer_steps);
  return checked.manifest.state;
}

CheckpointState load_checkpoint(const fs::path& dir, const ParamLayout& layout, Fsdp& fsdp,
                                Optimizer& opt, Communicator& world) {
  return load_checkpoint(check_checkpoint(dir, layout, world), layout, fsdp, opt);
}

struct CheckpointUnitReader::Impl {
  fs::path dir;
  std::vector<ShardFile> shards;
  const ParamLayout* layout;
};

CheckpointUnitReader::CheckpointUnitReader(const fs::path& dir, const ParamLayout& layout)
    : impl_(std::make_unique<Impl>()) {
  const CheckpointCheck checked = check_checkpoint(dir, layout, *make_local_communicator());
  manifest_ = checked.manifest.manifest;
  impl_->dir = dir;
  impl_->shards = open_shards(checked, layout.num_units());
  impl_->layout = &layout;
}

CheckpointUnitReader::~CheckpointUnitReader() = default;

void CheckpointUnitReader::read_unit(int unit, float* out) const {
  assemble(impl_->shards, impl_->dir, unit, "params", {0, impl_->layout->units()[unit].numel}, out);
}

}  // namespace kiln
