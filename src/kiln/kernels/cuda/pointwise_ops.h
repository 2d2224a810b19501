// The CUDA backend's elementwise, row-wise, reduction and optimizer kernels (kernels/cuda/
// embedding, rmsnorm, rmsnorm_backward, rope, swiglu, reduce, optimizer and cast .cu). Each has
// the semantics, parameters and shapes of the Backend method of the same name (kernels/ops.h),
// plus the stream it is enqueued on. Parameters (ConstDevPtr w, wte) are F32 or BF16;
// activations written through a DevPtr are F32 or BF16. Every reduction has a fixed order (no
// float atomics), so a run repeats bit for bit. Empty ops (n, N or C zero) launch nothing.
// rmsnorm_backward and sum_squares take their scratch from `scratch` (stream_scratch.h: the
// stream-ordered pool, or the backend's persistent scratch where the device has no pool).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kiln/kernels/cuda/stream_scratch.h"
#include "kiln/kernels/ops.h"

namespace kiln::cuda {

void embedding_forward(float* out, const int32_t* ids, ConstDevPtr wte, int N, int C,
                       cudaStream_t stream);
// Deterministic: no float atomics; repeated ids add in token order.
void embedding_forward_part(float* out, const int32_t* ids, const float* part, size_t part_begin,
                            size_t part_len, int N, int C, bool round_bf16, cudaStream_t stream);
// Into the slice [part_begin, part_begin + part_len) of the flattened dwte (0, SIZE_MAX: all).
void embedding_backward(float* dpart, const float* dout, const int32_t* ids, size_t part_begin,
                        size_t part_len, int N, int C, cudaStream_t stream);

void rmsnorm_forward(DevPtr out, float* rstd, const float* x, ConstDevPtr w, int N, int C,
                     float eps, cudaStream_t stream);
void add_rmsnorm_forward(float* sum, DevPtr out, float* rstd, const float* a, const float* b,
                         ConstDevPtr w, int N, int C, float eps, cudaStream_t stream);
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, ConstDevPtr w,
                      const float* rstd, int N, int C, bool accumulate, cudaStream_t stream,
                      StreamScratchPool& scratch);

void rope_forward(float* x, const int32_t* pos, const float* cos_table, const float* sin_table,
                  int N, int heads, int D, cudaStream_t stream);
void rope_backward(float* dx, const int32_t* pos, const float* cos_table, const float* sin_table,
                   int N, int heads, int D, cudaStream_t stream);

void swiglu_forward(DevPtr h, const float* gate_up, int N, int I, cudaStream_t stream);
void swiglu_backward(float* dgate_up, const float* dh, const float* gate_up, int N, int I,
                     cudaStream_t stream);

void add(float* out, const float* a, const float* b, size_t n, cudaStream_t stream);
void scale(float* x, float a, size_t n, cudaStream_t stream);
// Backend::scale_rows: x (n, C) row i *= row_scale[i].
void scale_rows(float* x, const float* row_scale, int n, int C, cudaStream_t stream);
// Backend::dropout: the mask of dropout_mask.h (the CPU's, bit for bit); p is checked here.
void dropout(DevPtr out, ConstDevPtr x, size_t n, float p, uint64_t seed, uint64_t offset,
             cudaStream_t stream);
// *sum += sum of squares of x, in double, over fixed blocks (independent of the launch).
void sum_squares(double* sum, const float* x, size_t n, cudaStream_t stream,
                 StreamScratchPool& scratch);
void clip_by_norm(float* x, size_t n, const double* sq_norm, double max_norm, cudaStream_t stream);

void adamw_step(float* p, float* m, float* v, const float* g, size_t n, const AdamWStep& s,
                cudaStream_t stream);
void sgd_step(float* p, float* m, const float* g, size_t n, const SgdStep& s, cudaStream_t stream);

// dst (n, bf16 bit patterns) = src rounded to nearest even; and back.
void cast_f32_to_bf16(uint16_t* dst, const float* src, size_t n, cudaStream_t stream);
void cast_bf16_to_f32(float* dst, const uint16_t* src, size_t n, cudaStream_t stream);

}  // namespace kiln::cuda
