// Tensor-core building blocks of the flash attention kernels (attention_flash_*.cu): bf16 tiles
// in shared memory, ldmatrix fragment loads and mma.sync.m16n8k16 (bf16 in, fp32 accumulate).
//
// Fragment layouts and which lane addresses what: attention_fragments.h. An accumulator pair
// c[n], c[n+1] (16 x 16) repacked to bf16 is directly the A operand of the next product (P V,
// dS K), so P and dS never pass through shared memory.
//
// Shared tiles are (rows, D) bf16 with row stride D + 8 elements: rows start 16 bytes apart
// modulo 128, so the eight row addresses of one 8x8 matrix hit distinct banks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kiln/kernels/cuda/attention_fragments.h"

namespace kiln::cuda::mma {

constexpr int kPad = frag::kSmemPad;  // bf16 elements of padding per shared-memory row

__device__ inline uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  return *reinterpret_cast<const uint32_t*>(&v);
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 and mma.sync.aligned.m16n8k16 through inline
// PTX; under the CPU emulator (tests/kernels/emul) its warp operations by the same layouts.
#if defined(KILN_EMULATED_DEVICE)

// r: lane l's four registers from the 8x8 matrices whose rows the lanes address (row: this lane's
// row, 16 bytes of shared memory).
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
  kiln::emul::ldmatrix_x4(r, row, false);
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const __nv_bfloat16* row) {
  kiln::emul::ldmatrix_x4(r, row, true);
}
// d (16 x 8) += a (16 x 16) b (16 x 8)
__device__ inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  kiln::emul::mma_m16n8k16_bf16(d, a, b0, b1);
}

#else

__device__ inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const __nv_bfloat16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

// d (16 x 8) += a (16 x 16) b (16 x 8)
__device__ inline void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif

// The A operand rows [row0, row0 + 16) x columns [col0, col0 + 16) of a row-major tile.
template <int LD>
__device__ inline void load_a(uint32_t (&a)[4], const __nv_bfloat16* tile, int row0, int col0,
                              int lane) {
  ldmatrix_x4(a, tile + (row0 + frag::a_row(lane)) * LD + col0 + frag::a_col(lane));
}

// B operands of two n-tiles from a tile stored n-major ([n][k], e.g. K in S = Q K^T, B = K^T):
// b[0], b[1] for n in [n0, n0 + 8), b[2], b[3] for [n0 + 8, n0 + 16); k in [k0, k0 + 16).
template <int LD>
__device__ inline void load_b_nk(uint32_t (&b)[4], const __nv_bfloat16* tile, int n0, int k0,
                                 int lane) {
  ldmatrix_x4(b, tile + (n0 + frag::b_nk_row(lane)) * LD + k0 + frag::b_nk_col(lane));
}

// B operands of two n-tiles from a tile stored k-major ([k][n], e.g. V in O = P V): the same
// registers as load_b_nk, through ldmatrix.trans.
template <int LD>
__device__ inline void load_b_kn(uint32_t (&b)[4], const __nv_bfloat16* tile, int k0, int n0,
                                 int lane) {
  ldmatrix_x4_trans(b, tile + (k0 + frag::b_kn_row(lane)) * LD + n0 + frag::b_kn_col(lane));
}

// The A operand (16 x 16) made of two accumulators c0 (columns 0-7) and c1 (8-15), in bf16.
__device__ inline void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  frag::acc_to_a(a, c0, c1, [](float lo, float hi) { return pack_bf16(lo, hi); });
}

__device__ inline int acc_col(int lane, int e) { return frag::acc_col(lane, e); }

// dst (ROWS, D) bf16, row stride D + kPad = rows [r0, r0 + ROWS) of an fp32 head (row stride ld
// floats, 16-byte aligned rows), rounded to nearest; rows at or past n are zero. By the whole
// block of THREADS threads, a float4 each per step.
template <int ROWS, int D, int THREADS>
__device__ inline void stage_bf16(__nv_bfloat16* dst, const float* src, long long ld, int r0,
                                  int n) {
  constexpr int kVecs = D / 4;  // float4 per row
  static_assert(ROWS * kVecs % THREADS == 0, "tile not a whole number of steps");
#pragma unroll 4
  for (int it = 0; it < ROWS * kVecs / THREADS; ++it) {
    const int e = it * THREADS + static_cast<int>(threadIdx.x);
    const int r = e / kVecs, c = e % kVecs, row = r0 + r;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row < n) x = __ldg(reinterpret_cast<const float4*>(src + row * ld) + c);
    const uint2 packed = make_uint2(pack_bf16(x.x, x.y), pack_bf16(x.z, x.w));
    *reinterpret_cast<uint2*>(dst + r * (D + kPad) + c * 4) = packed;
  }
}

// max and sum over the four lanes of an accumulator row (lanes 4 group + 0..3)
__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The smallest doc start of rows [i0, i0 + rows) below T (0 without doc starts), by the whole
// block (rows <= blockDim.x; three barriers, so it may be called again at once); slot is a
// shared int.
__device__ inline int block_min_doc_start(int* slot, const int32_t* ds, int i0, int rows, int T) {
  if (ds == nullptr) return 0;
  __syncthreads();  // every thread has read the previous call's result
  if (threadIdx.x == 0) *slot = 0x7fffffff;
  __syncthreads();
  const int i = i0 + static_cast<int>(threadIdx.x);
  if (static_cast<int>(threadIdx.x) < rows && i < T) atomicMin(slot, ds[i]);
  __syncthreads();
  return *slot;
}

}  // namespace kiln::cuda::mma
