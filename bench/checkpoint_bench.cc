// Checkpoint throughput beside the raw disk: one process saves and loads a sharded checkpoint of
// a preset model (parameters + AdamW m and v, f32) and writes and reads a plain file of the same
// size the same way (write in 8 MiB chunks + fsync; read with the page cache dropped for the
// file). Also the time training is blocked per save, synchronous and in the background, and a
// checkpoint of the `tiny` model that carries a real tokenizer (a base model directory with the
// Qwen tokenizer.json, 11 MB, whose files every checkpoint holds).
// Prints figures, asserts nothing.
//
//   checkpoint_bench [--preset 25m] [--dir DIR] [--runs 3] [--tokenizer FILE]
//
// DIR (default: a fresh directory under the system temp dir) should be on the disk to measure;
// it is removed at the end. Each figure is the best of --runs runs.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/file.h"
#include "kiln/comm/communicator.h"
#include "kiln/fsdp/fsdp.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/model/config.h"
#include "kiln/model/layout.h"
#include "kiln/model_files/hf_model_files.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/optimizer.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Drops a file's pages from the page cache (clean pages: no root needed), so reads hit the disk.
void drop_cache(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void drop_cache_dir(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) drop_cache(e.path());
  }
}

// Raw disk: write `bytes` in 8 MiB chunks, fsync, close. Returns seconds.
double raw_write(const fs::path& p, size_t bytes) {
  std::vector<char> chunk(size_t{8} << 20, 'k');
  const auto t0 = Clock::now();
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) kiln::fail("{}: {}", p.string(), std::strerror(errno));
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(chunk.size(), bytes - done);
    const ssize_t w = ::write(fd, chunk.data(), n);
    if (w <= 0) kiln::fail("{}: write failed: {}", p.string(), std::strerror(errno));
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) kiln::fail("{}: fsync failed: {}", p.string(), std::strerror(errno));
  ::close(fd);
  return seconds_since(t0);
}

double raw_read(const fs::path& p) {
  std::vector<char> chunk(size_t{8} << 20);
  const auto t0 = Clock::now();
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) kiln::fail("{}: {}", p.string(), std::strerror(errno));
  while (::read(fd, chunk.data(), chunk.size()) > 0) {
  }
  ::close(fd);
  return seconds_since(t0);
}

// The tiny model with a real tokenizer: a base directory (config.json + `tokenizer`) read once,
// as a run reads it at start, then synchronous checkpoints that each carry the base's files.
void tokenizer_row(const fs::path& dir, const fs::path& tokenizer, int runs) {
  if (!fs::is_regular_file(tokenizer)) {
    std::printf("with a tokenizer: skipped (%s: no such file)\n", tokenizer.c_str());
    return;
  }
  const kiln::ModelConfig config = kiln::preset_config("tiny");
  const kiln::ParamLayout layout(config);
  const fs::path base = dir / "base";
  fs::create_directories(base);
  kiln::write_file_atomic(base / "config.json", kiln::config_to_json(config).dump(2));
  fs::copy_file(tokenizer, base / "tokenizer.json");
  auto comm = kiln::make_local_communicator();
  const auto be = kiln::make_backend(kiln::DeviceRequest::kCpu, kiln::ComputeDType::kFp32);
  kiln::Fsdp fsdp(layout, *be, kiln::ShardStrategy::kNoShard, *comm, nullptr, false);
  kiln::Optimizer opt(kiln::OptimizerSettings{}, layout, fsdp.shard_ranges(), *be);
  const auto t0 = Clock::now();
  kiln::CheckpointState st;
  st.strategy = "no_shard";
  st.recipe_yaml = "bench";
  st.hf_files =
      std::make_shared<const kiln::HfModelFiles>(kiln::HfModelFiles::read(base, tokenizer));
  const double read_s = seconds_since(t0);
  kiln::RetentionPolicy keep_one;
  keep_one.keep_last = 1;
  kiln::CheckpointSaver saver(dir / "checkpoints", layout, fsdp, opt, *comm, true, false, keep_one,
                              false);
  double blocked = 1e30, commit = 1e30;
  for (int run = 0; run < runs; ++run) {
    st.step = run + 1;
    const auto t1 = Clock::now();
    saver.save(st);
    blocked = std::min(blocked, seconds_since(t1));
    commit = std::min(commit, saver.last_stats().commit_s);
  }
  std::printf(
      "with a tokenizer (tiny model + %s, %.1f MiB): base files read once %.3f s; training "
      "blocked per synchronous save %.3f s (commit %.3f s)\n",
      tokenizer.filename().c_str(), static_cast<double>(fs::file_size(tokenizer)) / 1048576.0,
      read_s, blocked, commit);
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "25m";
  fs::path dir = fs::temp_directory_path() / ("kiln_checkpoint_bench_" + std::to_string(getpid()));
  int runs = 3;
  fs::path tokenizer = fs::path(KILN_SOURCE_DIR) / "assets/tokenizer/qwen3/tokenizer.json";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--preset" && i + 1 < argc) {
      preset = argv[++i];
    } else if (a == "--dir" && i + 1 < argc) {
      dir = fs::path(argv[++i]) / ("kiln_checkpoint_bench_" + std::to_string(getpid()));
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--tokenizer" && i + 1 < argc) {
      tokenizer = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: checkpoint_bench [--preset 25m] [--dir DIR] [--runs 3] "
                   "[--tokenizer FILE]\n");
      return 2;
    }
  }
  try {
    if (!kiln::is_preset(preset)) kiln::fail("--preset: unknown preset '{}'", preset);
    const kiln::ModelConfig config = kiln::preset_config(preset);
    const kiln::ParamLayout layout(config);
    auto comm = kiln::make_local_communicator();
    // The synchronous CPU backend: its device memory is host memory, filled directly below.
    const auto be = kiln::make_backend(kiln::DeviceRequest::kCpu, kiln::ComputeDType::kFp32);
    kiln::Fsdp fsdp(layout, *be, kiln::ShardStrategy::kNoShard, *comm, nullptr, false);
    kiln::OptimizerSettings os;
    const auto ranges = fsdp.shard_ranges();
    kiln::Optimizer opt(os, layout, ranges, *be);
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    size_t bytes = 0;
    for (int u = 0; u < layout.num_units(); ++u) {
      const size_t n = ranges[u].size();
      float* p = fsdp.shard_params(u);
      for (size_t i = 0; i < n; ++i) p[i] = nd(rng);
      for (size_t i = 0; i < opt.m(u).size(); ++i) opt.m(u).data()[i] = nd(rng);
      for (size_t i = 0; i < opt.v(u).size(); ++i) opt.v(u).data()[i] = nd(rng) * nd(rng);
      bytes += (n + opt.m(u).size() + opt.v(u).size()) * sizeof(float);
    }
    fs::create_directories(dir);
    std::printf(
        "checkpoint_bench: preset %s (%.1fM parameters), %.1f MiB per checkpoint "
        "(params + AdamW m, v; f32) in %s\n",
        preset.c_str(), static_cast<double>(kiln::parameter_count(config)) / 1e6,
        static_cast<double>(bytes) / 1048576.0, dir.c_str());

    double raw_w = 1e30, raw_r = 1e30, save_w = 1e30, load_t = 1e30;
    double sync_blocked = 1e30, bg_blocked = 1e30, bg_write = 1e30;
    kiln::CheckpointState st;
    st.strategy = "no_shard";
    st.recipe_yaml = "bench";
    st.model_config = kiln::config_to_json(config);
    int64_t step = 0;
    kiln::RetentionPolicy keep_one;
    keep_one.keep_last = 1;
    // One saver each, as in training: the snapshot buffers are reused from the second save on.
    kiln::CheckpointSaver sync_saver(dir / "sync", layout, fsdp, opt, *comm, true, false, keep_one,
                                     false);
    kiln::CheckpointSaver bg_saver(dir / "bg", layout, fsdp, opt, *comm, true, true, keep_one,
                                   false);
    double bg_first = 0, bg_commit = 1e30, bg_snapshot = 0;
    for (int run = 0; run < runs; ++run) {
      const fs::path raw = dir / "raw.bin";
      raw_w = std::min(raw_w, raw_write(raw, bytes));
      drop_cache(raw);
      raw_r = std::min(raw_r, raw_read(raw));
      fs::remove(raw);

      // Synchronous: training waits for the whole save (write, fsync, commit).
      st.step = ++step;
      const auto t0 = Clock::now();
      sync_saver.save(st);
      sync_blocked = std::min(sync_blocked, seconds_since(t0));
      save_w = std::min(save_w, sync_saver.last_stats().write_s);
      drop_cache_dir(sync_saver.last_committed());
      const auto t1 = Clock::now();
      kiln::load_checkpoint(sync_saver.last_committed(), layout, fsdp, opt, *comm);
      load_t = std::min(load_t, seconds_since(t1));

      // Background: training waits for the snapshot copy and, once the write is durable, the
      // commit (the trainer learns it from status() every step).
      st.step = ++step;
      const auto t2 = Clock::now();
      bg_saver.save(st);
      const double snap = seconds_since(t2);
      while (bg_saver.status()[0] != 0) ::usleep(1000);
      bg_saver.on_status(0, bg_saver.status()[1]);
      const auto& s = bg_saver.last_stats();
      if (run == 0) bg_first = s.blocked_s;
      if (s.blocked_s < bg_blocked) bg_snapshot = snap;
      bg_blocked = std::min(bg_blocked, s.blocked_s);
      bg_commit = std::min(bg_commit, s.commit_s);
      bg_write = std::min(bg_write, s.write_s);
    }
    const double gb = static_cast<double>(bytes) / 1e9;
    std::printf("raw disk   write+fsync %7.2f GB/s   read %7.2f GB/s\n", gb / raw_w, gb / raw_r);
    std::printf(
        "checkpoint save        %7.2f GB/s   load %7.2f GB/s (shard write %.3f s, load "
        "%.3f s)\n",
        gb / save_w, gb / load_t, save_w, load_t);
    std::printf(
        "training blocked per save: synchronous %.3f s; background %.3f s (snapshot copy %.3f s + "
        "commit; fastest commit %.3f s), the first background save %.3f s (allocates the "
        "snapshot buffers); background write %.3f s\n",
        sync_blocked, bg_blocked, bg_snapshot, bg_commit, bg_first, bg_write);
    tokenizer_row(dir / "tokenizer", tokenizer, runs);
    fs::remove_all(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_bench: error: %s\n", e.what());
    std::error_code ec;
    fs::remove_all(dir, ec);
    return 1;
  }
  return 0;
}
