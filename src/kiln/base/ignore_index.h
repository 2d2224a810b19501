// The target id meaning "no loss at this position" (HF's ignore_index), shared by the data
// (labels, batch targets) and the kernels (cross-entropy skips such rows).
#pragma once

#include <cstdint>

namespace kiln {

inline constexpr int32_t kIgnoreIndex = -100;

}  // namespace kiln
