// An fp32 view of a small parameter (a norm weight, a bias) that may be stored in bf16: the
// pointer itself when it is F32, else a widened copy the view owns. Matrices never go through
// here: gemm_mixed() takes bf16 operands as they are.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/ops.h"

namespace kiln {

class F32View {
 public:
  F32View(ConstDevPtr p, size_t n) {
    if (p.dtype != DType::BF16) {
      ptr_ = p.f32();
      return;
    }
    copy_.resize(n);
    const auto* h = static_cast<const uint16_t*>(p.data);
    for (size_t i = 0; i < n; ++i) copy_[i] = bf16_to_float(h[i]);
    ptr_ = copy_.data();
  }
  const float* get() const { return ptr_; }

 private:
  std::vector<float> copy_;
  const float* ptr_ = nullptr;
};

}  // namespace kiln
