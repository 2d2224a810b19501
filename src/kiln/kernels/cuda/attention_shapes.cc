// Host-side shape logic of the CUDA attention kernels: the checks of their shapes, which shapes
// the flash kernels take and the layout of backward's scratch (kernels/cuda/attention_internal.h).
// Plain C++ (fmt's compile-time format checks do not pass nvcc).
#include <cstdint>

#include "kiln/base/error.h"
#include "kiln/kernels/cuda/attention_internal.h"
#include "kiln/kernels/cuda/attention_ops.h"
#include "kiln/kernels/cuda/attention_tiling.h"
#include "kiln/kernels/cuda/scratch_sizes.h"

namespace kiln::cuda {

void check_attention_shape(const AttnShape& s, int max_head_dim, const char* kernels) {
  KILN_CHECK(s.D > 0 && s.D <= max_head_dim, "{} attention: head_dim {} not in [1, {}]", kernels,
             s.D, max_head_dim);
  KILN_CHECK(s.KV > 0 && s.H % s.KV == 0, "{} attention: {} heads not a multiple of {} kv heads",
             kernels, s.H, s.KV);
  KILN_CHECK(s.B >= 0 && s.T >= 0, "{} attention: negative shape B={} T={}", kernels, s.B, s.T);
}

void check_flash_shape(const AttnShape& s, std::initializer_list<const void*> pointers) {
  KILN_CHECK(flash_attention_supports(s),
             "flash attention: head_dim {} (64 or 128) or {} heads "
             "over {} kv heads not supported",
             s.D, s.H, s.KV);
  check_attention_shape(s, 128, "flash");
  for (const void* p : pointers) {
    KILN_CHECK(reinterpret_cast<uintptr_t>(p) % 16 == 0,
               "flash attention: a tensor at {} is not 16-byte aligned", p);
  }
}

bool flash_attention_supports(const AttnShape& s) {
  return (s.D == 64 || s.D == 128) && s.KV > 0 && s.H % s.KV == 0;
}

BackwardScratch backward_scratch(void* scratch, const AttnShape& s) {
  char* p = static_cast<char*>(scratch);
  BackwardScratch out{reinterpret_cast<float*>(p), nullptr, nullptr};
  const size_t di = attention_backward_di_bytes(s), part = attention_backward_part_bytes(s);
  if (part > 0) {
    out.dk_part = reinterpret_cast<float*>(p + di);
    out.dv_part = reinterpret_cast<float*>(p + di + part);
  }
  return out;
}

}  // namespace kiln::cuda
