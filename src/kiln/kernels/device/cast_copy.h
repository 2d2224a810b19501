// Copies between host fp32 and device memory kept in F32 or BF16: the parameters of a frozen unit
// (a LoRA run's base) are stored in the dtype the model reads them in, while whoever loads or
// saves them speaks fp32 (ParamStore's load_unit/read_unit, Fsdp::load_shard). BF16 goes through
// one device staging buffer of at most kCastCopyPieceFloats, reused piece after piece and call
// after call, so a load never allocates per piece.
#pragma once

#include <cstddef>

#include "kiln/kernels/device/device_buffer.h"

namespace kiln {

// Floats of staging a BF16 copy uses at most (16 MiB): a piece of a unit at a time.
inline constexpr size_t kCastCopyPieceFloats = size_t{4} << 20;

class CastCopy {
 public:
  explicit CastCopy(const Backend& be) : be_(be) {}

  // dst (n elements of `dtype`, device) = src (n, host fp32), rounded to nearest even for BF16
  // (Backend::cast_to_bf16). Enqueued on the compute stream: `src` must stay as it is until the
  // caller synchronizes.
  void to_device(void* dst, DType dtype, const float* src, size_t n);
  // host (n fp32) = src (n elements of `dtype`, device), exactly. Enqueued on the compute
  // stream: `host` is written once the caller synchronizes.
  void to_host(float* host, const void* src, DType dtype, size_t n);
  // Frees the staging buffer (the next BF16 copy makes a new one).
  void release() { staging_ = DeviceBuffer<float>(); }
  size_t staging_bytes() const { return staging_.bytes(); }

 private:
  // The staging buffer, grown to min(n, kCastCopyPieceFloats) floats.
  float* staging(size_t n);

  const Backend& be_;
  DeviceBuffer<float> staging_;
};

}  // namespace kiln
