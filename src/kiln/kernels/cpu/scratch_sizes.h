// How much memory the CPU backend's ops take beyond their arguments: the rules its kernels size
// their scratch with, and the measured allowance for what the GEMM libraries keep. The counting
// backend (kernels/device/counting_backend.h) plans a CPU run with these same functions.
#pragma once

#include <cstddef>

#include "kiln/tensor/dtype.h"

namespace kiln {

// The storage of activations that only feed products on the CPU backend (activation_dtype()):
// BF16 under bf16 where the CPU has AVX512_BF16, else F32.
DType cpu_activation_dtype(bool bf16);

// The fused cross-entropy's scratch for one call (cross_entropy.cc), in bytes; 0 where the call
// takes none. R of the N rows have a target; rows of logits per chunk: ce_chunk_rows(R, V).
struct CpuCeScratchBytes {
  size_t rows = 0;                          // (N) ids of the rows with a target
  size_t row_loss = 0;                      // (chunk) double
  size_t xc = 0, logits = 0, dxc = 0;       // (chunk, C), (chunk, V), (chunk, C) fp32
  size_t xc16 = 0, dlogits16 = 0, w16 = 0;  // bf16 products: rows, logit gradients, the weight
  size_t w32 = 0;                           // a bf16 weight widened for fp32 products
  size_t total() const {
    return rows + row_loss + xc + logits + dxc + xc16 + dlogits16 + w16 + w32;
  }
};
// bf16_products: the products run in bf16 (the bf16 backend where the CPU has AVX512_BF16);
// grad: dx is asked for; w: the weight's storage dtype.
CpuCeScratchBytes cpu_ce_scratch_bytes(size_t N, size_t R, size_t C, size_t V, bool bf16_products,
                                       bool grad, DType w);

// The attention kernels' scratch (attention.cc), in bytes: each thread of the team keeps one
// head's K^T and V^T, (D, T padded to a whole 64-key block) each, and the backward's row sums
// (T); the backward also keeps per-query-head dK and dV, (B, H, T, D) each, summed over each kv
// group afterwards so that no two tasks write the same memory.
struct CpuAttentionScratchBytes {
  size_t team = 0;   // threads x (K^T, V^T, row sums)
  size_t heads = 0;  // backward: dK and dV per query head
};
CpuAttentionScratchBytes cpu_attention_scratch_bytes(int B, int T, int H, int D, int threads,
                                                     bool backward);

// What the GEMM libraries (OpenBLAS, oneDNN) keep beyond kiln's buffers, measured on the benchmark
// shapes (bench/memory_plan_bench.sh): a weight-gradient product dw += dout^T x packs its
// (rows, cols) dout as large again, and the first step touches thread stacks and library pages.
size_t cpu_gemm_pack_bytes(size_t rows, size_t cols);
inline constexpr size_t kCpuLibraryPagesBytes = size_t{8} << 20;

}  // namespace kiln
