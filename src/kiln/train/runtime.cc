#include "kiln/train/runtime.h"

#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/fault.h"
#include "kiln/base/stop_request.h"
#include "kiln/train/checkpoint_dir.h"
#include "kiln/train/metrics_log.h"

namespace kiln {

WorkerContext::WorkerContext(WorkerIdentity identity, Communicator& world, fs::path run_dir,
                             int keep_last)
    : identity_(std::move(identity)),
      world_(world),
      run_dir_(std::move(run_dir)),
      keep_last_(keep_last) {}

WorkerContext::~WorkerContext() = default;

void WorkerContext::make_groups() {
  if (intra_) return;
  const WorkerIdentity& w = identity_;
  if (w.world_size != w.num_nodes * w.local_world_size) {
    fail("hybrid sharding needs the same number of workers on every node ({} workers, {} nodes)",
         w.world_size, w.num_nodes);
  }
  std::vector<int> intra, inter;
  for (int l = 0; l < w.local_world_size; ++l)
    intra.push_back(w.node_rank * w.local_world_size + l);
  for (int n = 0; n < w.num_nodes; ++n) inter.push_back(n * w.local_world_size + w.local_rank);
  intra_ = world_.split(intra, "intra");
  inter_ = world_.split(inter, "inter");
}

Communicator& WorkerContext::intra_node() {
  make_groups();
  return *intra_;
}

Communicator& WorkerContext::inter_node() {
  make_groups();
  return *inter_;
}

void WorkerContext::begin_step(int64_t step) {
  if (step_listener) step_listener(step, true);
  fault_begin_step(identity_.rank, step);
}

void WorkerContext::end_step(int64_t step) {
  if (step_listener) step_listener(step, false);
}

bool WorkerContext::stop_requested() const { return stop_ || kiln::stop_requested(); }

MetricsLog& WorkerContext::metrics_log() {
  if (!metrics_) {
    // After a restart, rows of steps past the newest checkpoint will be reported again.
    const auto latest = ::kiln::latest_checkpoint(run_dir_ / "checkpoints");
    metrics_ = std::make_unique<MetricsLog>(run_dir_ / "metrics.jsonl", latest ? latest->step : 0);
  }
  return *metrics_;
}

void WorkerContext::restart_metrics_after(int64_t step) {
  if (identity_.rank != 0 || run_dir_.empty()) return;
  if (metrics_) {
    metrics_->rewind(step);
  } else {
    metrics_ = std::make_unique<MetricsLog>(run_dir_ / "metrics.jsonl", step);
  }
}

void WorkerContext::report(const Json& metrics) {
  if (identity_.rank == 0 && !run_dir_.empty()) metrics_log().write(metrics);
  if (reporter) reporter(metrics);
}

}  // namespace kiln
