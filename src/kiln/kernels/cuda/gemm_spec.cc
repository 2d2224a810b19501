#include "kiln/kernels/cuda/gemm_spec.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "kiln/base/error.h"

namespace kiln::cuda {

std::string describe(const GemmSpec& s) {
  return fmt::format("GEMM {}x{}x{} (M x N x K) trans_a={} trans_b={} lda={} ldb={} ldc={} {}{}{}",
                     s.M, s.N, s.K, s.trans_a, s.trans_b, s.lda, s.ldb, s.ldc, dtype_name(s.inputs),
                     s.bias ? " +bias" : "", s.accumulate ? " +=C" : "");
}

void validate(const GemmSpec& s) {
  KILN_CHECK(s.M > 0 && s.N > 0 && s.K > 0, "{}", describe(s));
  KILN_CHECK(s.inputs == DType::F32 || s.inputs == DType::BF16, "{}", describe(s));
  KILN_CHECK(s.lda >= (s.trans_a ? s.M : s.K), "lda too small: {}", describe(s));
  KILN_CHECK(s.ldb >= (s.trans_b ? s.K : s.N), "ldb too small: {}", describe(s));
  KILN_CHECK(s.ldc >= s.N, "ldc too small: {}", describe(s));
}

uint16_t pointer_alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  if (a == 0) return 256;
  return static_cast<uint16_t>(std::min<uintptr_t>(uintptr_t{1} << std::countr_zero(a), 256));
}

}  // namespace kiln::cuda
