// Every matrix product of the CPU backend goes through gemm(). fp32: OpenBLAS's sgemm (chosen by
// measurement over oneDNN and BLIS, see docs/performance.md "GEMM library"; KILN_FP32_GEMM=onednn
// selects oneDNN's matmul instead). bf16 mixed precision: oneDNN's matmul primitive with bf16
// inputs, fp32 accumulation and fp32 output (AVX512_BF16 dot products where the CPU has them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

enum class GemmPrecision {
  kFp32,  // fp32 inputs and accumulation
  kBf16,  // inputs rounded to bf16 (nearest even), fp32 accumulation and output
};

// C (M, N) = op(A) @ op(B) + beta * C, all row-major fp32. op(A) is (M, K): A is stored (M, K)
// with row stride lda, or (K, M) when trans_a. op(B) is (K, N): B is stored (K, N) with row
// stride ldb, or (N, K) when trans_b. beta is 0 (C written) or 1 (C accumulated).
// oneDNN primitives are created once per shape and cached per thread; bf16 inputs are converted
// on each call into per-thread buffers that are reused.
void gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc, GemmPrecision precision);

// An operand of gemm_mixed: row-major storage with row stride ld, f32 or bf16 (uint16_t bit
// patterns, rounded to nearest even).
struct GemmOperand {
  const void* data;
  bool bf16;
  int ld;
};
// gemm() over operands of either storage: a bf16 operand is used as it is (its values are those
// gemm() would have rounded to), an f32 one is rounded when the product runs in bf16. A bf16
// operand needs GemmPrecision::kBf16; where bf16 products fall back to fp32 it is widened.
void gemm_mixed(bool trans_a, bool trans_b, int M, int N, int K, GemmOperand A, GemmOperand B,
                float beta, float* C, int ldc, GemmPrecision precision);

// Same as gemm() with inputs already in bf16 (uint16_t bit patterns), stored contiguously
// (lda = K or M, ldb = N or K as for a dense matrix): lets a caller convert an operand used
// several times (the LM head's weight) once.
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const uint16_t* A,
               const uint16_t* B, float beta, float* C, int ldc);

// dst[i] = bf16(src[i]) rounded to nearest even (NaN stays NaN, denormals flush to signed zero,
// as vcvtneps2bf16 does). AVX512_BF16 where available, the same results without.
void to_bf16(uint16_t* dst, const float* src, size_t n);
// dst (rows, cols) contiguous = bf16(src (rows, cols) with row stride ld)
void to_bf16_rows(uint16_t* dst, const float* src, size_t rows, size_t cols, size_t ld);
inline float bf16_to_float(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

// Whether kBf16 GEMMs run in bf16: true with AVX512_BF16; otherwise they run in fp32 (decided
// once, with a one-line warning; oneDNN's emulation on older CPUs is slower than fp32).
bool gemm_bf16_native();
// Number of oneDNN primitives the calling thread has created (one per distinct GEMM shape, never
// per call): lets tests check the cache.
size_t gemm_cached_primitives();

// One line for logs: oneDNN version, the ISA it dispatches to, and how bf16 GEMMs run.
std::string gemm_info();

}  // namespace kiln
