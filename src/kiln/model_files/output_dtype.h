// output.dtype: the dtypes a run's final model (save_model_output) is written in, with their
// names listed once (base/named_values.h).
#pragma once

#include <array>

#include "kiln/base/named_values.h"
#include "kiln/tensor/dtype.h"

namespace kiln {

inline constexpr std::array<Named<DType>, 2> kOutputDTypeNames = {{
    {DType::F32, "f32"},
    {DType::BF16, "bf16"},
}};

}  // namespace kiln
