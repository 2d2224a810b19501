// Sharded checkpoints. Every rank writes its own shard of the parameters and optimizer state
// (rank-RRRRR-of-WWWWW.safetensors: per unit "u{i}.params", "u{i}.m", "u{i}.v" over the unit's
// element range [begin, end), recorded in the file's metadata), in parallel, never gathering the
// model. Only trainable units are saved: a LoRA run's checkpoint holds its adapters and their
// optimizer state (the manifest marks the base's units "frozen"). Rank 0 then writes manifest.json
// (step, world size, strategy, unit layout, each rank's ranges, data-loader position, optimizer
// step count, recipe and its hash, kiln version, the step's metrics, every file's length and
// XXH3-64: checkpoint_manifest.h) and only then renames "step-NNNNNNNN.tmp" to "step-NNNNNNNN": a
// checkpoint exists once its directory has its final name, so a kill or a full disk at any instant
// leaves the previous checkpoints intact and loadable. Every load verifies the files against the
// manifest first (checkpoint_verify.h).
//
// Loading reshards: each rank assembles its new ranges from whichever old shards overlap them,
// so a 4-worker run continues on 2 (or any other world size or strategy).
//
// CheckpointSaver (below) is what the trainer uses: the same format, written synchronously or
// from a snapshot on a background thread while training continues, plus retention (keep_last,
// keep_best by a metric).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kiln/base/checksum.h"
#include "kiln/base/json.h"
#include "kiln/comm/communicator.h"
#include "kiln/data/sampler.h"
#include "kiln/model/layout.h"
#include "kiln/model/unit_access.h"
#include "kiln/model_files/hf_model_files.h"
#include "kiln/train/checkpoint_dir.h"

namespace kiln {

class Fsdp;
class Optimizer;
struct CheckpointCheck;

// A training data file as a checkpoint records it: its path and its contents' digest.
struct DataFileRecord {
  std::string path;
  FileDigest digest;
  bool operator==(const DataFileRecord&) const = default;
};

// What a save records besides the tensors.
struct CheckpointState {
  int64_t step = 0;  // optimizer steps completed
  // The group's position in the data order (format 4). Read from a format 3 manifest it holds
  // that format's per-rank index (batches, or packed examples, of rank 0), which the reader
  // converts with the manifest's world size (format_version, world_size).
  SamplerState sampler;
  int format_version = 0;                  // of a manifest read back
  int world_size = 0;                      // of a manifest read back
  std::vector<DataFileRecord> data_files;  // data.train in order (format 4)
  // data/mixture.h's kHoldOutRule when written; 1 read from a manifest that records none.
  int holdout_rule = 0;
  // A LoRA run's base (model.path): its fingerprint (model/base_fingerprint.h), which resuming,
  // evaluating and merging the adapters check; nullopt for a full run or an older checkpoint.
  std::optional<FileDigest> base;
  std::string strategy;
  std::string recipe_yaml;
  Json metrics = Json::object();  // e.g. {"loss": ..., "eval_loss": ...}
  Json model_config;              // HF config.json, written beside the shards
  // When set, config.json is the base's instead (every field kept) and the tokenizer and
  // generation files travel along (read once at start), so an export of the checkpoint is a
  // complete model directory. Only the rank that commits (rank 0) needs it.
  std::shared_ptr<const HfModelFiles> hf_files;
};

// Collective over `world`: every rank with `write_shard` writes its shard (ranks whose shard
// another rank already holds, as under no_shard or across hybrid_shard's nodes, pass false);
// rank 0 commits the manifest. Returns the checkpoint directory. On any rank's failure every
// rank throws, naming the rank (and its error on that rank), and the partial directory is
// removed: the previous checkpoints stay intact.
fs::path save_checkpoint(const fs::path& root, const CheckpointState& state,
                         const ParamLayout& layout, Fsdp& fsdp, Optimizer& opt, Communicator& world,
                         bool write_shard);

// This rank's part of each unit that a checkpoint holds: its shard of every trainable unit; none
// of a frozen one (a LoRA run's base comes from the base model, not the checkpoint).
std::vector<ShardRange> checkpoint_ranges(const Fsdp& fsdp);

// Host memory a save holds (floats), for the memory plan too: a background save's snapshot of
// this rank's shard (parameters, and the optimizer's m and v where it keeps them), reused by
// every save; a save written at once stages one tensor at a time, through a buffer of the
// largest range.
size_t checkpoint_snapshot_floats(const std::vector<ShardRange>& ranges, const Optimizer& opt);
size_t checkpoint_stage_floats(const std::vector<ShardRange>& ranges);

// Saves checkpoints for the training loop, synchronously or in the background.
//
// At a save point every rank copies its shard (parameters, optimizer m and v) from the device
// into reusable host buffers (one device read); with background saving a thread writes and fsyncs
// the rank file while training continues. The background thread never touches the communicator:
// each step the trainer puts status() into the step's sync record (step_sync.h) and passes the
// sums to on_status(), which commits (rank 0 writes manifest.json, renames step-N.tmp to step-N and
// applies the retention policy) once every rank's write is durable, or throws on every rank if
// any write failed. The next save point and flush() wait for a pending save first.
//
// All members but status() are collective over `world`, called in the same order on all ranks.
class CheckpointSaver {
 public:
  CheckpointSaver(fs::path root, const ParamLayout& layout, Fsdp& fsdp, Optimizer& opt,
                  Communicator& world, bool write_shard, bool background, RetentionPolicy policy,
                  bool log = true);
  ~CheckpointSaver();  // waits for a background write (without committing it)
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Waits for and commits a pending save, then saves `state` (the current parameters and
  // optimizer state): in the background, or synchronously (committed before returning) when the
  // saver is synchronous or `sync` is set.
  void save(const CheckpointState& state, bool sync = false);
  // This rank's pending write: {still running, failed}, each 0 or 1 (both 0 when done or idle).
  std::array<double, 2> status() const;
  // With the sums of status() over all ranks: commits once every write is done; throws (on every
  // rank, naming the failed rank) if one failed. Does nothing while writes are still running.
  void on_status(double running, double failed);
  // Waits for the pending save (if any) and commits it.
  void flush();
  bool pending() const { return pending_ != nullptr; }
  // The newest checkpoint this saver committed (empty before the first).
  const fs::path& last_committed() const { return last_committed_; }

  struct Stats {
    int64_t step = 0;
    double blocked_s = 0;  // training blocked: snapshot copy, waits and the commit
    double commit_s = 0;   // of which the commit (manifest, rename, retention)
    double write_s = 0;    // this rank's write + fsync of its shard file
    uint64_t bytes = 0;    // this rank's shard file
  };
  // Figures of the last committed save.
  const Stats& last_stats() const { return last_stats_; }

 private:
  struct Pending;
  void finalize();
  fs::path root_;
  const ParamLayout& layout_;
  Fsdp& fsdp_;
  Optimizer& opt_;
  Communicator& world_;
  bool write_shard_ = true, background_ = true, log_ = true;
  RetentionPolicy policy_;
  // The snapshot of this rank's shard (background saves), allocated once, never zero-filled.
  std::unique_ptr<float[]> arena_;
  size_t arena_size_ = 0;
  std::unique_ptr<Pending> pending_;
  fs::path last_committed_;
  Stats last_stats_;
};

// Loads `dir` into this rank's shards (resharding as needed). Returns the manifest's state.
// Collective over `world` (every rank that loads): the checkpoint is verified first
// (check_checkpoint, checkpoint_verify.h), and a damaged one is an error on every rank naming each
// damaged file and why (for a checksum, the recorded and the actual value).
CheckpointState load_checkpoint(const fs::path& dir, const ParamLayout& layout, Fsdp& fsdp,
                                Optimizer& opt, Communicator& world);
// The same from a checkpoint already verified; throws unless `checked` is intact.
CheckpointState load_checkpoint(const CheckpointCheck& checked, const ParamLayout& layout,
                                Fsdp& fsdp, Optimizer& opt);

// Reads a checkpoint's parameters unit by unit (memory bounded by one unit): for export. The
// checkpoint is verified first (every file's checksum, on this process); damage is an error.
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

}  // namespace kiln
