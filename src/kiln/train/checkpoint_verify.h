// Verifying a trainer checkpoint before it is loaded, and choosing which one train.resume=auto
// loads. A checkpoint is intact when its manifest reads back (checkpoint_manifest.h) and every
// file it lists is a regular file of the directory with the recorded length and XXH3-64.
//
// Collective over `world`: file k of the manifest is read and hashed by rank k % world size
// only (the checkpoint is read once in all, not once per rank), and the per-file verdicts are
// all-reduced, so every rank reaches the same verdict with the same messages.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/comm/communicator.h"
#include "kiln/model/layout.h"
#include "kiln/train/checkpoint_manifest.h"

namespace kiln {

struct CheckpointCheck {
  fs::path dir;
  ManifestRead manifest;
  std::vector<std::string> problems;  // one line each, naming the file; empty: intact
  bool intact() const { return problems.empty(); }
  std::string summary() const;  // the problems joined by "; "
};

// Checks `dir`. Damage (a missing, truncated or altered file, an unreadable manifest) lands in
// problems; an incompatible checkpoint (another format version, another model) throws on every
// rank.
CheckpointCheck check_checkpoint(const fs::path& dir, const ParamLayout& layout,
                                 Communicator& world);

// train.resume=auto: the newest intact checkpoint among the directories step-N under `root`
// (nullopt when there is none). Each damaged one is skipped with a warning (rank 0) naming it and
// why. When checkpoints exist but none is intact this throws, listing each and why, rather than
// starting again from the base model: retraining from scratch is the user's call.
std::optional<CheckpointCheck> newest_intact_checkpoint(const fs::path& root,
                                                        const ParamLayout& layout,
                                                        Communicator& world);

}  // namespace kiln
