#include "kiln/kernels/cuda/gemm_lt_desc.h"

#include <fmt/format.h>

#include "kiln/base/error.h"
#include "kiln/kernels/cuda/cublas_check.h"

namespace kiln::cuda {

LtProblem lt_problem(const GemmSpec& s) {
  LtProblem p{};
  p.m = static_cast<uint64_t>(s.N);
  p.n = static_cast<uint64_t>(s.M);
  p.k = static_cast<uint64_t>(s.K);
  // cuBLASLt's A = kiln's B: row-major (K, N) -> column-major (N, K), op N; or row-major (N, K)
  // -> column-major (K, N), op T. Either way op(A) is (m, k) = (N, K).
  p.transa = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  p.a_rows = s.trans_b ? p.k : p.m;
  p.a_cols = s.trans_b ? p.m : p.k;
  p.lda = s.ldb;
  // cuBLASLt's B = kiln's A: row-major (M, K) -> column-major (K, M), op N; or row-major (K, M)
  // -> column-major (M, K), op T. op(B) is (k, n) = (K, M).
  p.transb = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  p.b_rows = s.trans_a ? p.n : p.k;
  p.b_cols = s.trans_a ? p.k : p.n;
  p.ldb = s.lda;
  // C: row-major (M, N) -> column-major (N, M) = (m, n).
  p.c_rows = p.m;
  p.c_cols = p.n;
  p.ldc = s.ldc;
  p.ab_type = s.inputs == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
  // The bias has one value per row of cuBLASLt's D (m = kiln's N), broadcast over its columns.
  p.epilogue = s.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  return p;
}

void LtMatmulDescDeleter::operator()(cublasLtMatmulDescOpaque_t* d) const {
  cublaslt().cublasLtMatmulDescDestroy(d);
}
void LtLayoutDeleter::operator()(cublasLtMatrixLayoutOpaque_t* l) const {
  cublaslt().cublasLtMatrixLayoutDestroy(l);
}

namespace {
LtLayoutPtr make_layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t l = nullptr;
  KILN_CUBLAS_CHECK(cublaslt().cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld));
  return LtLayoutPtr(l);
}

template <typename T>
void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const T& v) {
  KILN_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v));
}
}  // namespace

LtDescriptors make_lt_descriptors(const GemmSpec& s) {
  validate(s);
  const LtProblem p = lt_problem(s);
  LtDescriptors d;
  cublasLtMatmulDesc_t op = nullptr;
  // fp32 accumulation and fp32 alpha/beta; CUBLAS_COMPUTE_32F (not _FAST_TF32) keeps fp32 GEMMs
  // in full fp32, so they match the CPU to fp32 rounding.
  KILN_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  d.op.reset(op);
  set_attr(op, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(p.transa));
  set_attr(op, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(p.transb));
  set_attr(op, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(p.epilogue));
  if (s.bias) set_attr(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_32F));
  d.a = make_layout(p.ab_type, p.a_rows, p.a_cols, p.lda);
  d.b = make_layout(p.ab_type, p.b_rows, p.b_cols, p.ldb);
  d.c = make_layout(CUDA_R_32F, p.c_rows, p.c_cols, p.ldc);
  return d;
}

}  // namespace kiln::cuda
