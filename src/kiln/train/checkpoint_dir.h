// The checkpoints directory (<output.dir>/checkpoints): what a checkpoint is called, how one is
// committed and replaced, what a crash in between leaves and how the next run settles it, which
// ones exist, and which retention keeps. Names:
//   step-NNNNNNNN       a committed checkpoint (its manifest.json is the last file written)
//   step-NNNNNNNN.tmp   a commit in progress; complete once it holds its manifest.json
//   step-NNNNNNNN.old   a checkpoint being replaced by a commit of the same step
//   step-NNNNNNNN.del   a checkpoint being pruned
// Every rename is followed by an fsync of the directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/train/best_checkpoint.h"

namespace kiln {

struct CheckpointInfo {
  fs::path dir;
  int64_t step = 0;
  Json manifest;
};

std::string checkpoint_dir_name(int64_t step);

// Commits a checkpoint directory: writes `files` (name, contents; manifest.json last) into `tmp`
// atomically, fsyncs it, puts it in place of `final_dir` and fsyncs `root`, the parent. Until the
// manifest is written the checkpoint does not exist; once it is, a crash leaves it whole under
// one of two names (recover_checkpoints). A step committed again replaces the old checkpoint
// without a moment where neither exists: the old one is renamed to step-N.old first and removed
// only after the new one has its name. The fault point "commit" (KILN_FAULT RANK:`step`:
// KIND@commit) fires between the two renames. The trainer's saver and the runtime API's report()
// both commit through it.
void commit_checkpoint_dir(const fs::path& tmp, const fs::path& final_dir, const fs::path& root,
                           const std::vector<std::pair<std::string, std::string>>& files,
                           int64_t step);

// Finishes what a crash interrupted under `root`: a committed step-N.tmp (its manifest written)
// without a step-N is renamed to step-N; a step-N.old is removed once step-N exists, else
// renamed back; a step-N.del (a prune in progress) and a step-N without a manifest (an older
// kiln killed while it pruned) are removed. Safe to run from several nodes sharing `root`, never
// while a commit is in progress. Returns one line per action, for the log.
std::vector<std::string> recover_checkpoints(const fs::path& root);

// Complete checkpoints under `root` (directories named step-N holding manifest.json), oldest
// first. ".tmp", ".old" and ".del" directories are ignored (recover_checkpoints settles them).
std::vector<CheckpointInfo> list_checkpoints(const fs::path& root);
std::optional<CheckpointInfo> latest_checkpoint(const fs::path& root);

// What to keep after each commit: the newest `keep_last` (<= 0: everything) and the `keep_best`
// checkpoints with the best `best_metric` in their manifests' metrics (lowest, or highest when
// `maximize`); checkpoints whose manifest lacks the metric do not compete.
struct RetentionPolicy {
  int keep_last = 0;
  int keep_best = 0;
  BestMetric best_metric = BestMetric::kEvalLoss;
  bool maximize = false;
};

// Removes all but the newest `keep_last` checkpoints (keep_last <= 0 keeps everything), and any
// checkpoint named in `protect`; first recovers what a crash left (recover_checkpoints) and
// removes ".tmp" directories of saves that never committed. A checkpoint is renamed to step-N.del
// before it is deleted (the fault point "prune" fires in between), so a kill while pruning
// never leaves a step-N missing files.
void prune_checkpoints(const fs::path& root, int keep_last,
                       const std::vector<fs::path>& protect = {});

// The `n` complete checkpoints under `root` with the best `metric` (manifest "metrics"), best
// first; those without the metric are skipped. Ties go to the newer checkpoint.
std::vector<fs::path> best_checkpoints(const fs::path& root, int n, const std::string& metric,
                                       bool maximize);
// prune_checkpoints(root, policy.keep_last, best_checkpoints(...)).
void apply_retention(const fs::path& root, const RetentionPolicy& policy);

}  // namespace kiln
