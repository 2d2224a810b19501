// WorkerContext's checkpoint commits (report(metrics, checkpoint_dir)) and their lookup: the
// runtime API's own checkpoint format, a directory per rank under one manifest (runtime.h).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/fault.h"
#include "kiln/train/checkpoint_dir.h"
#include "kiln/train/runtime.h"

namespace kiln {

namespace {

void fsync_file(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open to fsync: {}", p.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail("{}: fsync failed: {}", p.string(), std::strerror(err));
}

// Copies the tree under `src` to `dst` (which must not exist) and fsyncs every file and
// directory written, so the later rename publishes durable data.
void copy_tree_synced(const fs::path& src, const fs::path& dst) {
  if (!fs::is_directory(src)) fail("{}: not a directory", src.string());
  fs::create_directories(dst);
  std::vector<fs::path> dirs = {dst};
  for (auto it = fs::recursive_directory_iterator(src); it != fs::recursive_directory_iterator();
       ++it) {
    const fs::path to = dst / fs::relative(it->path(), src);
    if (it->is_directory()) {
      fs::create_directories(to);
      dirs.push_back(to);
    } else if (it->is_regular_file()) {
      fs::copy_file(it->path(), to);
      fsync_file(to);
    } else {
      fail("{}: only regular files and directories can be checkpointed", it->path().string());
    }
  }
  for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) fsync_dir(*d);
}

}  // namespace

fs::path WorkerContext::checkpoint_part(const fs::path& checkpoint) const {
  return checkpoint / fmt::format("rank-{:05d}", identity_.rank);
}

std::optional<fs::path> WorkerContext::latest_checkpoint() const {
  if (run_dir_.empty()) return std::nullopt;
  auto latest = ::kiln::latest_checkpoint(run_dir_ / "checkpoints");
  if (!latest) return std::nullopt;
  return latest->dir;
}

fs::path WorkerContext::report(const Json& metrics, const std::optional<fs::path>& checkpoint_dir) {
  const int rank = identity_.rank, world_size = identity_.world_size;
  if (run_dir_.empty()) {
    fail(
        "report(metrics, checkpoint): no run directory to commit into (set "
        "LaunchOptions::run_dir)");
  }
  if (!metrics.is_object()) fail("report(metrics, checkpoint): metrics must be a JSON object");
  const fs::path root = run_dir_ / "checkpoints";
  int64_t step = 0;
  if (metrics.contains("step")) {
    if (!metrics["step"].is_number_integer() || metrics["step"].get<int64_t>() < 0) {
      fail("report(metrics, checkpoint): metrics \"step\" must be a non-negative integer, got {}",
           metrics["step"].dump());
    }
    step = metrics["step"].get<int64_t>();
  } else {
    const auto latest = ::kiln::latest_checkpoint(root);
    step = latest ? latest->step + 1 : 1;
  }
  // Every rank must name the same checkpoint.
  double agree[2] = {static_cast<double>(step), -static_cast<double>(step)};
  world_.all_reduce(agree, size_t{2}, ReduceOp::kMax);
  if (agree[0] != -agree[1]) {
    fail("report(metrics, checkpoint): ranks disagree on the step (from {} to {})", -agree[1],
         agree[0]);
  }
  const std::string name = checkpoint_dir_name(step);
  const fs::path tmp = root / (name + ".tmp"), final_dir = root / name;

  // Rank 0 prepares the temporary directory; errors anywhere become one agreed failure.
  auto agreed_failure = [&](const std::string& local_error, const char* what) {
    double failed = local_error.empty() ? 0 : rank + 1;
    world_.all_reduce(&failed, size_t{1}, ReduceOp::kMax);
    if (failed == 0) return;
    const int who = static_cast<int>(failed) - 1;
    if (rank == 0) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
    fail("report: checkpoint {} not committed: rank {} could not {}{}", final_dir.string(), who,
         what, local_error.empty() ? "" : ": " + local_error);
  };
  std::string err;
  if (rank == 0) {
    try {
      if (fs::exists(final_dir)) fail("{} already exists", final_dir.string());
      fs::create_directories(root);
      fs::remove_all(tmp);
      fs::create_directories(tmp);
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  agreed_failure(err, "prepare the checkpoint directory");

  double has_part = 0;
  if (checkpoint_dir) {
    try {
      copy_tree_synced(*checkpoint_dir, checkpoint_part(tmp));
      has_part = 1;
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  fault_point("checkpoint");
  agreed_failure(err, "write its part");
  std::vector<double> parts(world_size, 0.0);
  parts[rank] = has_part;
  world_.all_reduce(parts.data(), parts.size(), ReduceOp::kSum);

  // Rank 0 commits: manifest, fsync, rename, fsync of the parent.
  if (rank == 0) {
    try {
      Json ranks = Json::array();
      for (int r = 0; r < world_size; ++r) {
        if (parts[r] > 0) ranks.push_back(r);
      }
      const Json manifest{{"kind", "runtime"},
                          {"step", step},
                          {"world_size", world_size},
                          {"ranks_with_parts", ranks},
                          {"metrics", metrics}};
      commit_checkpoint_dir(tmp, final_dir, root, {{"manifest.json", manifest.dump(2) + "\n"}},
                            step);
    } catch (const std::exception& e) {
      err = e.what();
    }
  }
  agreed_failure(err, "commit the manifest");
  if (rank == 0) prune_checkpoints(root, keep_last_, {final_dir});
  Json row = metrics;
  row["step"] = step;
  row["checkpoint"] = final_dir.string();
  report(row);
  world_.barrier();
  return final_dir;
}

}  // namespace kiln
