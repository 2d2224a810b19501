// Sharded checkpoints. Every rank writes its own shard of the parameters and optimizer state
// (rank-RRRRR-of-WWWWW.safetensors: per unit "u{i}.params", "u{i}.m", "u{i}.v" over the unit's
// element range [begin, end), recorded in the file's metadata), in parallel, never gathering the
// model. Rank 0 then writes manifest.json (step, world size, strategy, unit layout, each rank's
// ranges, data-loader position, optimizer step count, recipe and its hash, kiln version, the
// step's metrics) and only then renames "step-NNNNNNNN.tmp" to "step-NNNNNNNN": a checkpoint
// exists once its directory has its final name, so a kill or a full disk at any instant leaves
// the previous checkpoints intact and loadable.
//
// Loading reshards: each rank assembles its new ranges from whichever old shards overlap them,
// so a 4-worker run continues on 2 (or any other world size or strategy).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/base/json.h"
#include "kiln/data/sampler.h"
#include "kiln/dist/communicator.h"
#include "kiln/model/layout.h"
#include "kiln/model/unit_access.h"

namespace kiln {

class Fsdp;
class Optimizer;

struct CheckpointInfo {
  fs::path dir;
  int64_t step = 0;
  Json manifest;
};

// What a save records besides the tensors.
struct CheckpointState {
  int64_t step = 0;  // optimizer steps completed
  SamplerState sampler;
  std::string strategy;
  std::string recipe_yaml;
  Json metrics = Json::object();  // e.g. {"loss": ..., "eval_loss": ...}
  Json model_config;              // HF config.json, written beside the shards
};

// Collective over `world`: every rank with `write_shard` writes its shard (ranks whose shard
// another rank already holds, as under no_shard or across hybrid_shard's nodes, pass false);
// rank 0 commits the manifest. Returns the checkpoint directory. On any rank's failure every
// rank throws, naming the rank (and its error on that rank), and the partial directory is
// removed: the previous checkpoints stay intact.
fs::path save_checkpoint(const fs::path& root, const CheckpointState& state,
                         const ParamLayout& layout, Fsdp& fsdp, Optimizer& opt, Communicator& world,
                         bool write_shard);

// Loads `dir` into this rank's shards (resharding as needed). Returns the manifest's state.
CheckpointState load_checkpoint(const fs::path& dir, const ParamLayout& layout, Fsdp& fsdp,
                                Optimizer& opt);

// Complete checkpoints under `root` (directories named step-N holding manifest.json), oldest
// first. Incomplete ".tmp" directories are ignored.
std::vector<CheckpointInfo> list_checkpoints(const fs::path& root);
std::optional<CheckpointInfo> latest_checkpoint(const fs::path& root);

// Removes all but the newest `keep_last` checkpoints (keep_last <= 0 keeps everything), and any
// checkpoint named in `protect`; also removes stale ".tmp" directories.
void prune_checkpoints(const fs::path& root, int keep_last, const std::vector<fs::path>& protect = {});

// Reads a checkpoint's parameters unit by unit (memory bounded by one unit): for export.
class CheckpointUnitReader {
 public:
  CheckpointUnitReader(const fs::path& dir, const ParamLayout& layout);
  ~CheckpointUnitReader();
  void read_unit(int unit, float* out) const;  // out: (numel of the unit)
  const Json& manifest() const { return manifest_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Json manifest_;
};

std::string checkpoint_dir_name(int64_t step);

}  // namespace kiln
