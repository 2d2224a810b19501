// The host-only half of the cuBLASLt GEMMs: a kiln GEMM (row-major, as cpu/gemm.h states it)
// described as cuBLASLt's column-major matmul, and the descriptors that say so. Nothing here
// touches a GPU (cublasLtMatmulDescCreate and cublasLtMatrixLayoutCreate are host calls), so the
// mapping is tested in CI on machines without one (tests/kernels/cuda_gemm_host_test.cc).
//
// Row-major C (M, N) = op(A) (M, K) @ op(B) (K, N) is column-major C^T (N, M) = op(B)^T @ op(A)^T,
// and a row-major (r, c) matrix with row stride ld is a column-major (c, r) one with leading
// dimension ld. So cuBLASLt's A is kiln's B and its B is kiln's A, with the transposes swapped:
// m = N, n = M, k = K.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kiln/kernels/cuda/gemm_spec.h"

namespace kiln::cuda {

// cuBLASLt's view of a spec (column-major).
struct LtProblem {
  cublasOperation_t transa, transb;  // of cuBLASLt's A (kiln's B) and B (kiln's A)
  uint64_t m, n, k;
  // Stored shapes (rows x cols, column-major) and leading dimensions of cuBLASLt's A, B, C.
  uint64_t a_rows, a_cols, b_rows, b_cols, c_rows, c_cols;
  int64_t lda, ldb, ldc;
  cudaDataType_t ab_type;       // CUDA_R_32F or CUDA_R_16BF
  cublasLtEpilogue_t epilogue;  // CUBLASLT_EPILOGUE_DEFAULT or CUBLASLT_EPILOGUE_BIAS
};
LtProblem lt_problem(const GemmSpec& s);

struct LtMatmulDescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const;
};
struct LtLayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const;
};
using LtMatmulDescPtr = std::unique_ptr<cublasLtMatmulDescOpaque_t, LtMatmulDescDeleter>;
using LtLayoutPtr = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LtLayoutDeleter>;

// The descriptors of one GEMM: the operation (CUBLAS_COMPUTE_32F, fp32 scale, no TF32, the
// transposes and epilogue; the bias pointer is set per call) and the layouts of cuBLASLt's A, B
// and C (C doubles as D: the output is written where it is accumulated).
struct LtDescriptors {
  LtMatmulDescPtr op;
  LtLayoutPtr a, b, c;
};
LtDescriptors make_lt_descriptors(const GemmSpec& s);

}  // namespace kiln::cuda
