#include "kiln/kernels/cuda/scratch_sizes.h"

#include <cstdint>

#include "kiln/kernels/cuda/attention_tiling.h"

namespace kiln::cuda {

namespace {
constexpr size_t kAlign = 256;  // every attention scratch array starts on a 256-byte boundary
size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
}  // namespace

CeScratchBytes ce_scratch_bytes(const CePlan& p, int C, int V, bool bf16, bool grad, bool w_f32) {
  CeScratchBytes b;
  if (p.chunks == 0) return b;
  const size_t chunk = static_cast<size_t>(p.chunk_rows), padded = p.padded_rows();
  const size_t in_size = bf16 ? sizeof(uint16_t) : sizeof(float);
  b.rows = sizeof(int32_t) * padded;
  b.row_loss = sizeof(double) * padded;
  b.xr = chunk * C * in_size;
  b.logits = chunk * V * sizeof(float);
  if (grad) {
    if (bf16) b.dlogits_bf16 = chunk * V * sizeof(uint16_t);
    b.dxr = chunk * C * sizeof(float);
  }
  if (bf16 && w_f32) b.w_bf16 = static_cast<size_t>(V) * C * sizeof(uint16_t);
  return b;
}

size_t attention_backward_di_bytes(const AttnShape& s) {
  return aligned(sizeof(float) * static_cast<size_t>(s.B) * s.H * s.T);
}

size_t attention_backward_part_bytes(const AttnShape& s) {
  const int splits = dkdv_head_splits(s.B, s.T, s.H, s.KV);
  if (splits == 1) return 0;
  return aligned(sizeof(float) * static_cast<size_t>(s.B) * s.T * s.KV * splits * s.D);
}

size_t attention_backward_scratch_bytes(const AttnShape& s) {
  return attention_backward_di_bytes(s) + 2 * attention_backward_part_bytes(s);
}

}  // namespace kiln::cuda
