// The training loop: data -> micro-batches -> forward/backward -> clip -> optimizer step, with a
// live progress line and metrics.jsonl, then the final model saved in the run directory.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "kiln/train/recipe.h"
#include "kiln/train/runtime.h"

namespace kiln {

struct StepMetrics {
  int64_t step = 0;  // 1-based optimizer step
  double loss = 0;   // mean over the step's predicted tokens
  double lr = 0;
  double grad_norm = 0;  // before clipping
  int64_t tokens = 0;    // tokens processed in the step (all ranks)
  int64_t targets = 0;   // predicted tokens (loss denominator)
  double step_seconds = 0;
  double tokens_per_s = 0;
  // A preference run's (dpo section): loss is the mean over the step's pairs, `pairs` of them,
  // and preference[i] the mean of kPreferenceMetrics[i] (preference_config.h).
  int64_t pairs = 0;
  std::array<double, kPreferenceMetrics.size()> preference{};
};

struct TrainResult {
  int64_t steps = 0;
  // The step this invocation started after: 0 for a fresh start, the checkpoint's step on a
  // resume (steps start_step + 1 .. steps were trained here).
  int64_t start_step = 0;
  double first_loss = 0, last_loss = 0;
  fs::path model_dir;  // the saved final model (HF layout)
  // Stopped on request (WorkerContext::stop_requested on any rank, seen by every rank in a step's
  // sync record) after `steps`, with a checkpoint of that step committed and no final model
  // written.
  bool stopped = false;
  // Resumed from a checkpoint at train.max_steps (or beyond): nothing was trained and no
  // checkpoint written; `steps` is the checkpoint's step.
  bool nothing_to_do = false;
};

// Runs the recipe on this worker of the group in `ctx` (a single process: world size 1), whose
// run directory must be the recipe's output.dir. `on_step` (optional) sees every step's metrics.
// Rank 0 prints progress, reports each step's metrics through ctx.report (metrics.jsonl) and
// saves the final model; every rank takes part in every collective and tells ctx each step's
// begin and end.
TrainResult train(const Recipe& recipe, WorkerContext& ctx,
                  const std::function<void(const StepMetrics&)>& on_step = nullptr);
// Single-process convenience.
TrainResult train(const Recipe& recipe,
                  const std::function<void(const StepMetrics&)>& on_step = nullptr);

// Where a run directory keeps its final model.
fs::path final_model_dir(const fs::path& run_dir);

}  // namespace kiln
