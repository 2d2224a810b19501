// Backends for tests above kernels/, from make_backend like every other caller: the
// synchronous CPU backend in fp32 and in bf16 mixed precision (one each per test process).
#pragma once

#include <memory>

#include "kiln/kernels/device/backend.h"

namespace kiln::testing {

inline const Backend& cpu_fp32() {
  static const std::unique_ptr<Backend> b = make_backend(DeviceRequest::kCpu, ComputeDType::kFp32);
  return *b;
}

inline const Backend& cpu_bf16() {
  static const std::unique_ptr<Backend> b = make_backend(DeviceRequest::kCpu, ComputeDType::kBf16);
  return *b;
}

}  // namespace kiln::testing
