// The three products of a linear layer, y (N, OC) = x (N, IC) @ w^T (w: (OC, IC)), as GemmSpecs:
// what CudaBackend's matmul and the LM head's cross-entropy (IC = C, OC = V, N = rows of a chunk)
// run, and what tests/kernels/cuda_gemm_host_test.cc checks against cuBLASLt's descriptors.
#pragma once

#include "kiln/kernels/cuda/gemm_spec.h"

namespace kiln::cuda {

// Whether a product reads an operand stored as `operand` where it lies: when that is the
// product's input dtype. Otherwise (an F32 operand of bf16 products) the backend rounds it into
// scratch first.
inline bool reads_in_place(DType operand, DType inputs) { return operand == inputs; }

// y (N, OC) = x (N, IC) @ w^T (+ b)
inline GemmSpec linear_forward_spec(int N, int IC, int OC, DType inputs, bool bias) {
  return {.trans_b = true,
          .M = N,
          .N = OC,
          .K = IC,
          .lda = IC,
          .ldb = IC,
          .ldc = OC,
          .inputs = inputs,
          .bias = bias};
}
// dx (N, IC) = dy (N, OC) @ w (OC, IC), written or accumulated
inline GemmSpec linear_dx_spec(int N, int IC, int OC, DType inputs, bool accumulate) {
  return {.M = N,
          .N = IC,
          .K = OC,
          .lda = OC,
          .ldb = IC,
          .ldc = IC,
          .inputs = inputs,
          .accumulate = accumulate};
}
// dw (OC, IC) += dy^T (OC, N) @ x (N, IC)
inline GemmSpec linear_dw_spec(int N, int IC, int OC, DType inputs) {
  return {.trans_a = true,
          .M = OC,
          .N = IC,
          .K = N,
          .lda = OC,
          .ldb = IC,
          .ldc = IC,
          .inputs = inputs,
          .accumulate = true};
}

}  // namespace kiln::cuda
