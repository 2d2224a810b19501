// The kernels of the fused LM head + cross-entropy (cross_entropy.h drives them around the
// GEMMs). Rows are "compacted": rows[i] is the i-th row of x with a target, in order, and -1 past
// the last one (padding to a whole number of chunks). Fixed orders throughout: no float atomics.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kiln/kernels/preference_terms.h"

namespace kiln::cuda {

// rows (padded): the indices n < N with targets[n] != kIgnoreIndex in increasing order (a prefix
// sum over the flags in one block), then -1 up to `padded`.
void ce_compact_rows(int32_t* rows, const int32_t* targets, int N, int padded, cudaStream_t stream);

// xr (r, C) = x[rows[i]] (zero where rows[i] < 0), as fp32 or rounded to bf16 (bit patterns).
void ce_gather_rows_f32(float* xr, const float* x, const int32_t* rows, int r, int C,
                        cudaStream_t stream);
void ce_gather_rows_bf16(uint16_t* xr, const float* x, const int32_t* rows, int r, int C,
                         cudaStream_t stream);

// Per row i < r of logits (r, V): row_loss[i] = -log softmax(logits[i])[targets[rows[i]]] (0 on
// padding rows, NaN for a target outside [0, V)). With a gradient, dlogits (r, V) =
// scale * (softmax - onehot), zero on padding rows; fp32 dlogits may alias logits.
void ce_softmax_rows(double* row_loss, const float* logits, const int32_t* targets,
                     const int32_t* rows, int r, int V, cudaStream_t stream);
void ce_softmax_grad_rows_f32(double* row_loss, float* dlogits, const float* logits,
                              const int32_t* targets, const int32_t* rows, int r, int V,
                              float scale, cudaStream_t stream);
void ce_softmax_grad_rows_bf16(double* row_loss, uint16_t* dlogits, const float* logits,
                               const int32_t* targets, const int32_t* rows, int r, int V,
                               float scale, cudaStream_t stream);

// dx[rows[i]] = dxr[i] for the rows i < r with rows[i] >= 0; dx: (N, C), dxr: (r, C).
void ce_scatter_rows(float* dx, const float* dxr, const int32_t* rows, int r, int C,
                     cudaStream_t stream);

// *loss_sum += sum of row_loss (n), in double, in a fixed order (one block).
void ce_add_loss_sum(double* loss_sum, const double* row_loss, int n, cudaStream_t stream);

// Backend::ce_part_max, ce_part_sumexp, ce_part_grad and ce_part_row_loss
// (cross_entropy_part.cu).
void ce_part_max(float* row_max, const float* logits, int n, int m, int ld, bool accumulate,
                 cudaStream_t stream);
void ce_part_sumexp(float* sums, const float* logits, const float* row_max, const int32_t* targets,
                    int v0, int n, int m, int ld, cudaStream_t stream);
void ce_part_grad(float* logits, double* loss_sum, const float* row_max, const float* sums,
                  const int32_t* targets, int v0, int n, int m, int ld, float scale,
                  const float* row_weight, int loss_begin, int loss_end, cudaStream_t stream);
void ce_part_row_loss(float* row_loss, const float* row_max, const float* sums,
                      const int32_t* targets, int n, cudaStream_t stream);

// Backend::sequence_logps and preference_loss (preference_loss.cu).
void sequence_logps(double* seq, const float* row_loss, const int32_t* targets,
                    const int32_t* bounds, int S, cudaStream_t stream);
void preference_loss(float* row_weight, double* sums, const double* seq, const double* ref_seq,
                     const int32_t* bounds, int S, const PreferenceTerms& terms, int sum_begin,
                     int sum_end, cudaStream_t stream);

}  // namespace kiln::cuda
