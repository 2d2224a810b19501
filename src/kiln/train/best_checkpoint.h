// checkpoint.best_metric and checkpoint.best_mode: which checkpoints checkpoint.keep_best keeps,
// each with its names listed once (base/named_values.h). A metric's name is also its key in the
// checkpoint manifests' metrics.
#pragma once

#include <array>

#include "kiln/base/named_values.h"

namespace kiln {

enum class BestMetric { kEvalLoss, kLoss };
inline constexpr std::array<Named<BestMetric>, 2> kBestMetricNames = {{
    {BestMetric::kEvalLoss, "eval_loss"},
    {BestMetric::kLoss, "loss"},
}};

// min: the lowest values are the best; max: the highest.
enum class BestMode { kMin, kMax };
inline constexpr std::array<Named<BestMode>, 2> kBestModeNames = {{
    {BestMode::kMin, "min"},
    {BestMode::kMax, "max"},
}};

}  // namespace kiln
