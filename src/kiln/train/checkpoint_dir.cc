#include "kiln/train/checkpoint_dir.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "kiln/base/error.h"
#include "kiln/base/fault.h"
#include "kiln/base/log.h"
#include "kiln/train/checkpoint_manifest.h"

namespace kiln {

std::string checkpoint_dir_name(int64_t step) { return fmt::format("step-{:08}", step); }

namespace {

// "step-NNNNNNNN" with no suffix or one of kSuffixes: its step and suffix.
struct DirName {
  int64_t step = 0;
  std::string suffix;
};
constexpr const char* kTmp = ".tmp";  // a commit in progress (or interrupted)
constexpr const char* kOld = ".old";  // a checkpoint being replaced by a commit of its step
constexpr const char* kDel = ".del";  // a checkpoint being pruned

std::optional<DirName> parse_dir_name(const std::string& name) {
  if (!name.starts_with("step-")) return std::nullopt;
  size_t end = 5;
  while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
  if (end == 5 || end - 5 > 16) return std::nullopt;
  DirName d{std::stoll(name.substr(5, end - 5)), name.substr(end)};
  if (!d.suffix.empty() && d.suffix != kTmp && d.suffix != kOld && d.suffix != kDel) {
    return std::nullopt;
  }
  return d;
}

fs::path with_suffix(const fs::path& dir, const char* suffix) {
  fs::path p = dir;
  p += suffix;
  return p;
}

// A directory kiln committed: its manifest is the last file written before the rename.
bool has_manifest(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "manifest.json", ec);
}

// Removes a checkpoint directory so that a kill at any instant leaves either the whole checkpoint
// or a ".del" directory the next prune removes, never a step-N missing some of its files.
void remove_checkpoint_dir(const fs::path& dir) {
  std::error_code ec;
  const fs::path doomed = with_suffix(dir, kDel);
  fs::remove_all(doomed, ec);
  fs::rename(dir, doomed, ec);
  if (ec) return;  // already gone (another node sharing the directory)
  fault_point("prune");
  fs::remove_all(doomed, ec);
}

}  // namespace

void commit_checkpoint_dir(const fs::path& tmp, const fs::path& final_dir, const fs::path& root,
                           const std::vector<std::pair<std::string, std::string>>& files,
                           int64_t step) {
  for (const auto& [name, contents] : files) write_file_atomic(tmp / name, contents);
  fsync_dir(tmp);
  // Committed from here on (its manifest is written): a crash before the rename below leaves a
  // complete step-N.tmp, which recover_checkpoints() puts in place.
  if (!fs::exists(final_dir)) {
    fault_point("commit", step);
    fs::rename(tmp, final_dir);
    fsync_dir(root);
    return;
  }
  // A step committed again (a resume from an older checkpoint passes it): the old one is set
  // aside, never deleted before the new one has its name, so a crash leaves one of them whole.
  const fs::path aside = with_suffix(final_dir, kOld);
  fs::remove_all(aside);
  fs::rename(final_dir, aside);
  fsync_dir(root);
  fault_point("commit", step);
  fs::rename(tmp, final_dir);
  fsync_dir(root);
  fs::remove_all(aside);
}

std::vector<std::string> recover_checkpoints(const fs::path& root) {
  std::vector<std::string> done;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return done;
  std::map<int64_t, std::vector<std::string>> by_step;  // step -> suffixes present
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const auto d = parse_dir_name(e.path().filename().string());
    if (d && e.is_directory(ec)) by_step[d->step].push_back(d->suffix);
  }
  for (const auto& [step, suffixes] : by_step) {
    const fs::path dir = root / checkpoint_dir_name(step);
    const auto has = [&](const char* s) {
      return std::find(suffixes.begin(), suffixes.end(), s) != suffixes.end();
    };
    if (has(kDel)) fs::remove_all(with_suffix(dir, kDel), ec);
    if (has(kTmp) && !fs::exists(dir) && has_manifest(with_suffix(dir, kTmp))) {
      fs::rename(with_suffix(dir, kTmp), dir, ec);  // a node sharing the directory may be first
      if (!ec) done.push_back(fmt::format("completed the interrupted commit of {}", dir.string()));
    }
    if (has(kOld)) {
      if (fs::exists(dir)) {
        fs::remove_all(with_suffix(dir, kOld), ec);
      } else {
        fs::rename(with_suffix(dir, kOld), dir, ec);
        if (!ec)
          done.push_back(
              fmt::format("restored {}, whose replacement was interrupted", dir.string()));
      }
    }
    if (has("") && fs::exists(dir) && !has_manifest(dir)) {
      // Left by an older kiln killed while it deleted the checkpoint.
      fs::remove_all(dir, ec);
      done.push_back(fmt::format("removed {}, a checkpoint partly deleted", dir.string()));
    }
  }
  if (!done.empty()) fsync_dir(root);
  return done;
}

std::vector<CheckpointInfo> list_checkpoints(const fs::path& root) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root)) {
    const auto name = parse_dir_name(e.path().filename().string());
    if (!e.is_directory() || !name || !name->suffix.empty()) continue;
    if (!fs::exists(e.path() / "manifest.json")) continue;
    try {
      Json m = read_json_file(e.path() / "manifest.json");
      // As read_manifest reads it: get<int64_t>() of 1e300 would be an undefined cast.
      const Json& step = m.at("step");
      if (!step.is_number_unsigned() ||
          step.get<uint64_t>() > static_cast<uint64_t>(kMaxCheckpointStep)) {
        fail("manifest.json: step is {}, expected an integer in [0, {}]", step.dump(),
             kMaxCheckpointStep);
      }
      out.push_back({e.path(), step.get<int64_t>(), std::move(m)});
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
  for (const std::string& what : recover_checkpoints(root)) KILN_LOG_WARN("checkpoints: {}", what);
  // What is left of saves that never committed (no manifest).
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const auto d = parse_dir_name(e.path().filename().string());
    if (d && d->suffix == kTmp) fs::remove_all(e.path(), ec);
  }
  if (keep_last <= 0) return;
  auto all = list_checkpoints(root);
  const size_t n = all.size();
  for (size_t i = 0; i + static_cast<size_t>(keep_last) < n; ++i) {
    if (std::find(protect.begin(), protect.end(), all[i].dir) != protect.end()) continue;
    remove_checkpoint_dir(all[i].dir);
  }
}

std::vector<fs::path> best_checkpoints(const fs::path& root, int n, const std::string& metric,
                                       bool maximize) {
  std::vector<std::pair<double, CheckpointInfo>> scored;
  for (auto& c : list_checkpoints(root)) {
    const Json* metrics = c.manifest.contains("metrics") ? &c.manifest.at("metrics") : nullptr;
    if (metrics == nullptr || !metrics->is_object() || !metrics->contains(metric)) continue;
    const Json& v = metrics->at(metric);
    if (!v.is_number()) continue;
    const double x = v.get<double>();
    if (!std::isfinite(x)) continue;
    scored.emplace_back(maximize ? -x : x, std::move(c));
  }
  // Best first; among equals the newer checkpoint.
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second.step > b.second.step;
  });
  std::vector<fs::path> out;
  for (size_t i = 0; i < scored.size() && static_cast<int>(i) < n; ++i) {
    out.push_back(scored[i].second.dir);
  }
  return out;
}

void apply_retention(const fs::path& root, const RetentionPolicy& policy) {
  std::vector<fs::path> protect;
  if (policy.keep_best > 0) {
    protect = best_checkpoints(root, policy.keep_best,
                               name_of(kBestMetricNames, policy.best_metric), policy.maximize);
  }
  prune_checkpoints(root, policy.keep_last, protect);
}

}  // namespace kiln
