// The runtime API: what a training function gets on every worker. The trainer (train()) is one
// client; a user's own C++ training function can be another (see examples/custom_train.cc).
//
// Like Ray Train's train.report(metrics, checkpoint=...) / train.get_checkpoint(): a function
// writes its state into a directory of its own (per rank), calls report(metrics, dir) on every
// rank, and kiln commits the parts atomically as <run_dir>/checkpoints/step-N (temporary name,
// fsync, rename once every rank's part is in), applies keep_last and appends the metrics to
// <run_dir>/metrics.jsonl. After a restart, latest_checkpoint() returns the newest committed one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/comm/communicator.h"

namespace kiln {

class MetricsLog;

struct WorkerContext {
  int rank = 0, world_size = 1;              // in the whole group
  int local_rank = 0, local_world_size = 1;  // on this node
  int node_rank = 0, num_nodes = 1;
  Communicator* comm = nullptr;  // the world group
  // Who started this worker, for run metadata: the topology convention (Topology::source,
  // "torchrun", "slurm", ...) and "single-process", "kiln-agent" or "external" (the launcher's
  // own ranks).
  std::string topology_source = "default";
  std::string launcher = "single-process";
  int restart_attempt = 0;  // 0 in the first attempt, then 1, 2, ... after each group restart
  // Where report(metrics, dir) commits checkpoints (run_dir/checkpoints) and metrics
  // (run_dir/metrics.jsonl); "" : report() only calls `reporter`. Shared by every rank (a shared
  // filesystem across nodes). LaunchOptions::run_dir sets it.
  fs::path run_dir;
  int keep_last = 0;  // committed checkpoints kept by report(); <= 0 keeps all

  // Sub-groups for hybrid sharding, created on first use (collective: every rank calls both in
  // the same order). intra: this node's ranks; inter: ranks with this local_rank on every node.
  Communicator& intra_node();
  Communicator& inter_node();

  // Marks the start of optimizer step `step` (1-based): hang reports and the agent's failure
  // history name it, and KILN_FAULT's step faults fire here.
  void begin_step(int64_t step);

  // True once this process was asked to stop (SIGTERM/SIGINT with LaunchOptions::graceful_stop;
  // base/stop_request.h). Per rank: a function agrees across ranks before acting on it (the
  // trainer adds it to a step's all-reduce), commits a checkpoint and returns kExitStopped.
  bool stop_requested() const;

  // Reports a metrics object on this rank (not collective): calls `reporter`; on rank 0 with a
  // run_dir, also appends it to metrics.jsonl.
  void report(const Json& metrics);
  // Collective: every rank calls it with its own checkpoint directory (or nullopt when it has
  // nothing to save). Copies each part into <run_dir>/checkpoints/step-N.tmp/rank-RRRRR, fsyncs,
  // and once every part is in, rank 0 writes manifest.json and renames the directory to step-N:
  // all or nothing. N is metrics["step"] when present (the same on every rank), else the newest
  // committed step + 1. Applies keep_last, then report(metrics) with "checkpoint" added.
  // Returns the committed directory; on any rank's failure every rank throws naming it.
  fs::path report(const Json& metrics, const std::optional<fs::path>& checkpoint_dir);
  // The newest committed checkpoint under run_dir/checkpoints (nullopt: none, or no run_dir).
  std::optional<fs::path> latest_checkpoint() const;
  // This rank's part of a committed checkpoint: `checkpoint`/rank-RRRRR.
  fs::path checkpoint_part(const fs::path& checkpoint) const;

  std::function<void(const Json&)> reporter;
  // Set by the launcher (the hang watchdog): told of every begin_step() (began = true) and of
  // each "step" that report() sees (began = false: completed).
  std::function<void(int64_t step, bool began)> step_listener;

 private:
  std::unique_ptr<Communicator> intra_, inter_;
  std::shared_ptr<MetricsLog> metrics_;  // opened (and trimmed) by the first report on rank 0
  void make_groups();
  void append_metrics(const Json& row);
};

using TrainFn = std::function<int(WorkerContext&)>;

}  // namespace kiln
