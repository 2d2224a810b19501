// Host-side dispatch of the pointwise kernels on a DevPtr's dtype: F32 data is float, BF16 data
// uint16_t bit patterns; anything else is an error naming the op.
#pragma once

#include <cstdint>

#include "kiln/tensor/dtype.h"

namespace kiln::cuda {

// kiln::Error naming the op, for a dtype the kernels do not take (F16).
[[noreturn]] void unsupported_dtype(const char* op, DType t);

// Calls f(T{}) with T = float for F32 and uint16_t for BF16.
template <typename F>
void with_dtype(DType t, const char* op, F&& f) {
  if (t == DType::F32) {
    f(float{});
  } else if (t == DType::BF16) {
    f(uint16_t{});
  } else {
    unsupported_dtype(op, t);
  }
}

}  // namespace kiln::cuda
