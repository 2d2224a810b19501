#include "kiln/kernels/device/cast_copy.h"

#include <algorithm>

namespace kiln {

namespace {

void check_dtype(DType dtype) {
  KILN_CHECK(dtype == DType::F32 || dtype == DType::BF16, "cast copy of {}: F32 or BF16 only",
             dtype_name(dtype));
}

}  // namespace

float* CastCopy::staging(size_t n) {
  const size_t want = std::min(n, kCastCopyPieceFloats);
  if (staging_.size() < want) staging_ = DeviceBuffer<float>(be_, want);
  return staging_.data();
}

// Pieces reuse the staging buffer in stream order: each piece's copy is enqueued after the
// previous piece's cast has read it.
void CastCopy::to_device(void* dst, DType dtype, const float* src, size_t n) {
  check_dtype(dtype);
  if (dtype == DType::F32) {
    be_.copy_to_device(dst, src, n * sizeof(float));
    return;
  }
  float* s = staging(n);
  auto* out = static_cast<char*>(dst);
  for (size_t i = 0; i < n; i += kCastCopyPieceFloats) {
    const size_t k = std::min(kCastCopyPieceFloats, n - i);
    be_.copy_to_device(s, src + i, k * sizeof(float));
    be_.cast_to_bf16(out + i * dtype_size(DType::BF16), s, k);
  }
}

void CastCopy::to_host(float* host, const void* src, DType dtype, size_t n) {
  check_dtype(dtype);
  if (dtype == DType::F32) {
    be_.copy_to_host(host, src, n * sizeof(float));
    return;
  }
  float* s = staging(n);
  const auto* in = static_cast<const char*>(src);
  for (size_t i = 0; i < n; i += kCastCopyPieceFloats) {
    const size_t k = std::min(kCastCopyPieceFloats, n - i);
    be_.cast_from_bf16(s, in + i * dtype_size(DType::BF16), k);
    be_.copy_to_host(host + i, s, k * sizeof(float));
  }
}

}  // namespace kiln
