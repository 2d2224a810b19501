// What train.resume checks of a checkpoint before continuing from it, and the data position it
// continues at. Every rank calls these with the same values, so every rank fails alike.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/base/checksum.h"
#include "kiln/data/sampler.h"
#include "kiln/train/checkpoint.h"
#include "kiln/train/recipe.h"

namespace kiln {

// The checkpoint must be this run's (run_identity.h): with `refuse` (train.resume=auto) another
// run's is an error naming the key that changed; otherwise (an explicit checkpoint directory) a
// warning on `verbose` says what differs.
void check_same_run(const fs::path& checkpoint, const Recipe& written_with, const Recipe& now,
                    bool refuse, bool verbose);

// The step budget may change on resume (it is not in the run's identity), but it reshapes the
// learning-rate schedule, which decays to the last step: one warning on `verbose` says so, with
// the old and new train.max_steps (or train.epochs) and the step the run now ends at.
void note_step_budget(const fs::path& checkpoint, const Recipe& written_with, const Recipe& now,
                      int64_t max_steps, bool verbose);

// Resuming over other data would continue the old order over new examples: an error naming the
// first data.train file whose digest (`now`, in data.train order) differs from the manifest's,
// unless data.allow_changed (then a warning on `verbose`). A format 3 checkpoint records none.
void check_data_unchanged(const fs::path& checkpoint, const CheckpointState& st,
                          const Recipe& recipe, const std::vector<FileDigest>& now, bool verbose);

// A LoRA run's adapters continue only on the base they were trained on: an error naming
// model.path and both fingerprints when `now` (model.path's, base_fingerprint.h) differs from the
// one the checkpoint recorded. A checkpoint without one (a full run's, or older) is not checked.
void check_base_unchanged(const fs::path& checkpoint, const CheckpointState& st,
                          const Recipe& recipe, const std::optional<FileDigest>& now);

// Where the data order continues. Format 4 records the group's position, valid on any world
// size; format 3 recorded rank 0's own count, which is that position only when every rank took
// the same examples in the same pattern: unpacked (batches x B x W), or packed on one rank. A
// packed format 3 checkpoint of several ranks is an error naming the format.
SamplerState resumed_data_position(const fs::path& checkpoint, const CheckpointState& st,
                                   const Recipe& written_with);

}  // namespace kiln
