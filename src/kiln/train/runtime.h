// The runtime API: what a training function gets on every worker. The trainer (train()) is one
// client; a user's own C++ training function can be another (see examples/custom_train.cc).
//
// A WorkerContext is the worker's identity (WorkerIdentity: ranks, node, who started it; a plain
// value) and the services the function uses: the group's communicators, the stop request, step
// signals for the hang watchdog, metrics.jsonl and checkpoint commits.
//
// Like Ray Train's train.report(metrics, checkpoint=...) / train.get_checkpoint(): a function
// writes its state into a directory of its own (per rank), calls report(metrics, dir) on every
// rank, and kiln commits the parts atomically as <run_dir>/checkpoints/step-N (temporary name,
// fsync, rename once every rank's part is in), applies keep_last and appends the metrics to
// <run_dir>/metrics.jsonl. After a restart, latest_checkpoint() returns the newest committed one.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/comm/communicator.h"
#include "kiln/train/worker_identity.h"

namespace kiln {

class MetricsLog;

class WorkerContext {
 public:
  // `world`: the whole group's communicator (it outlives the context). `run_dir`: where
  // report(metrics, dir) commits checkpoints (run_dir/checkpoints, keeping the newest
  // `keep_last`; <= 0 keeps all) and every report writes metrics (run_dir/metrics.jsonl); "" :
  // report() only calls `reporter`. Shared by every rank (a shared filesystem across nodes).
  // LaunchOptions::run_dir sets it; kiln train: output.dir.
  WorkerContext(WorkerIdentity identity, Communicator& world, fs::path run_dir = {},
                int keep_last = 0);
  ~WorkerContext();
  WorkerContext(const WorkerContext&) = delete;
  WorkerContext& operator=(const WorkerContext&) = delete;

  const WorkerIdentity& identity() const { return identity_; }
  Communicator& comm() { return world_; }  // the world group
  const fs::path& run_dir() const { return run_dir_; }

  // Sub-groups for hybrid sharding, created on first use (collective: every rank calls both in
  // the same order). intra: this node's ranks; inter: ranks with this local_rank on every node.
  Communicator& intra_node();
  Communicator& inter_node();

  // Step signals, on every rank: begin_step at the start of optimizer step `step` (1-based; hang
  // reports and the agent's failure history name it, and KILN_FAULT's step faults fire here),
  // end_step once the step is done (hang reports name the last completed step). Each tells
  // `step_listener` (the launcher's hang watchdog).
  void begin_step(int64_t step);
  void end_step(int64_t step);

  // True once this worker was asked to stop: its process got SIGTERM/SIGINT (with
  // LaunchOptions::graceful_stop; base/stop_request.h) or request_stop() ran. Per rank: a
  // function agrees across ranks before acting on it (the trainer adds it to each step's sync
  // record, step_sync.h, and every rank stops after that step), commits a checkpoint and returns
  // kExitStopped.
  bool stop_requested() const;
  // Asks this worker to stop, as a signal would (e.g. from train()'s on_step: early stopping).
  void request_stop() { stop_ = true; }

  // Reports a metrics object on this rank (not collective): on rank 0 with a run_dir, appends it
  // to metrics.jsonl (this context is the run's one writer of it); then calls `reporter`.
  void report(const Json& metrics);
  // The run continues after step `step` (0: from the start): on rank 0, rows of later steps are
  // dropped from metrics.jsonl before the next row is written (they will be reported again). The
  // trainer calls it once it knows where it resumed; otherwise the first report() drops the rows
  // past the newest committed checkpoint.
  void restart_metrics_after(int64_t step);

  // Collective: every rank calls it with its own checkpoint directory (or nullopt when it has
  // nothing to save). Copies each part into <run_dir>/checkpoints/step-N.tmp/rank-RRRRR, fsyncs,
  // and once every part is in, rank 0 writes manifest.json and renames the directory to step-N:
  // all or nothing. N is metrics["step"] when present (the same on every rank), else the newest
  // committed step + 1. Applies keep_last, then report(metrics) with "checkpoint" added.
  // Returns the committed directory; on any rank's failure every rank throws naming it.
  // (runtime_checkpoint.cc)
  fs::path report(const Json& metrics, const std::optional<fs::path>& checkpoint_dir);
  // The newest committed checkpoint under run_dir/checkpoints (nullopt: none, or no run_dir).
  std::optional<fs::path> latest_checkpoint() const;
  // This rank's part of a committed checkpoint: `checkpoint`/rank-RRRRR.
  fs::path checkpoint_part(const fs::path& checkpoint) const;

  // Listeners. `reporter` sees every report(metrics) on this rank. `step_listener` (set by the
  // launcher: the hang watchdog and the agent's step board) is told of every begin_step()
  // (began = true) and end_step() (began = false).
  std::function<void(const Json&)> reporter;
  std::function<void(int64_t step, bool began)> step_listener;

 private:
  void make_groups();
  MetricsLog& metrics_log();

  const WorkerIdentity identity_;
  Communicator& world_;
  const fs::path run_dir_;
  const int keep_last_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<Communicator> intra_, inter_;
  std::unique_ptr<MetricsLog> metrics_;  // rank 0 with a run_dir, opened (and trimmed) on first use
};

using TrainFn = std::function<int(WorkerContext&)>;

}  // namespace kiln
