// A kiln GEMM (row-major, as cpu/gemm.h states it) and what its operands' addresses must be,
// without cuBLASLt: the CUDA backend builds GemmSpecs (linear_gemms.h) and hands them to LtGemm
// (gemm_lt.h), which describes them to cuBLASLt (gemm_lt_desc.h); host-side gates check them in CI
// (tests/kernels/emul/gpu_gate_gemm_test.cc).
#pragma once

#include <cstdint>
#include <string>

#include "kiln/tensor/dtype.h"

namespace kiln::cuda {

// C (M, N) = op(A) @ op(B) (+ bias) (+ C when accumulate), row-major. A is stored (M, K) with row
// stride lda, or (K, M) when trans_a; B is stored (K, N) with row stride ldb, or (N, K) when
// trans_b. A and B are both `inputs` (F32, or BF16 with fp32 accumulation); C and the bias are
// always F32. The bias (N) is added to every row (cuBLASLt's bias epilogue).
struct GemmSpec {
  bool trans_a = false, trans_b = false;
  int M = 0, N = 0, K = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  DType inputs = DType::F32;
  bool bias = false;
  bool accumulate = false;  // beta = 1 (C +=), else beta = 0 (C written)
  bool operator==(const GemmSpec&) const = default;
};

// One line naming the shape, for errors.
std::string describe(const GemmSpec& s);
// KILN_CHECKs sizes, leading dimensions and the input dtype.
void validate(const GemmSpec& s);

// The largest power of two (<= 256) that divides the address; 256 for null.
uint16_t pointer_alignment(const void* p);
// The alignment an epilogue bias must have. cuBLASLt's alignment preferences cover A, B, C and D
// but not the bias: the heuristic may pick a kernel that loads the bias in 16-byte vectors, which
// faults ("misaligned address") on a bias sliced from a flat parameter buffer.
inline constexpr uint16_t kLtBiasAlignment = 16;

}  // namespace kiln::cuda
