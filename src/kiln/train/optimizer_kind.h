// optimizer.name and schedule.name: the optimizers and learning-rate schedules kiln has, each
// with its names listed once (base/named_values.h). The recipe holds these values; the optimizer
// and the schedule (optimizer.h) act on them.
#pragma once

#include <array>

#include "kiln/base/named_values.h"

namespace kiln {

// adamw: decoupled weight decay; sgd: with optional momentum.
enum class OptimizerKind { kAdamW, kSgd };
inline constexpr std::array<Named<OptimizerKind>, 2> kOptimizerNames = {{
    {OptimizerKind::kAdamW, "adamw"},
    {OptimizerKind::kSgd, "sgd"},
}};

// After the linear warmup: constant, linear or cosine decay to lr x min_lr_ratio.
enum class ScheduleKind { kConstant, kLinear, kCosine };
inline constexpr std::array<Named<ScheduleKind>, 3> kScheduleNames = {{
    {ScheduleKind::kConstant, "constant"},
    {ScheduleKind::kLinear, "linear"},
    {ScheduleKind::kCosine, "cosine"},
}};

}  // namespace kiln
