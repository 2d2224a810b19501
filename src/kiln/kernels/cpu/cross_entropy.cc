// Fused LM head + cross-entropy: logits exist only for one chunk of rows at a time, and only for
// rows that have a target, so (tokens x vocab) is never materialised. The three LM-head GEMMs
// go through gemm(); in bf16 the weight is rounded to bf16 once per call, each chunk's rows and
// logit gradients once per chunk.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/base/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/scratch_sizes.h"
#include "kiln/kernels/cpu/softmax_row.h"
#include "kiln/kernels/cpu/vec_math.h"

namespace kiln {

namespace {
// Rows per chunk: as many as fit 8 Mi logits (32 MiB), but at least 256. Each chunk's
// dW += dlogits^T x reads and writes the whole (V, C) head gradient, so a large vocabulary with
// few rows per chunk is bound by that traffic (55-row chunks at V = 151936 moved ~23 GB per
// step of 2048 tokens); 256 rows cost at most 256 x V floats (155 MB at V = 151936).
constexpr size_t kChunkLogits = size_t{8} << 20;
constexpr size_t kMinChunkRows = 256;

// One row's loss, -log softmax(lg)[t]; with `grad`, lg becomes scale * (softmax - onehot(t)).
// A function of its own (not the body of the parallel loop) so that GCC vectorises the loops:
// inside the outlined OpenMP body it reloads the shared `scale` and gives up.
double softmax_row(float* lg, int V, int t, float scale, bool grad) {
  const float m = row_max(lg, V);
  const double lt = lg[t];
  // One exp per element: e^(x - m) is summed and, with `grad`, kept in lg and scaled once the
  // sum is known. Sums of 1024 floats (vectorised, each term <= 1) accumulate in double, in the
  // blocks of row_sum_exp.
  double sum = 0;
  if (!grad) {
    sum = row_sum_exp(lg, V, m);
  } else {
    for (int j0 = 0; j0 < V; j0 += 1024) {
      const int j1 = std::min(V, j0 + 1024);
      float part = 0;
#pragma omp simd reduction(+ : part)
      for (int j = j0; j < j1; ++j) {
        const float e = vec::exp(lg[j] - m);
        lg[j] = e;
        part += e;
      }
      sum += part;
    }
  }
  const double loss = m + std::log(sum) - lt;
  if (grad) {
    const float k = static_cast<float>(scale / sum);
#pragma omp simd
    for (int j = 0; j < V; ++j) lg[j] *= k;
    lg[t] -= scale;
  }
  return loss;
}
}  // namespace

size_t ce_chunk_rows(size_t rows, size_t vocab) {
  return std::clamp<size_t>(std::max(kChunkLogits / vocab, kMinChunkRows), 1,
                            std::max<size_t>(rows, 1));
}

CpuCeScratchBytes cpu_ce_scratch_bytes(size_t N, size_t R, size_t C, size_t V, bool bf16_products,
                                       bool grad, DType w) {
  CpuCeScratchBytes b;
  b.rows = sizeof(int) * N;
  if (R == 0) return b;
  const size_t chunk = ce_chunk_rows(R, V);
  b.row_loss = sizeof(double) * chunk;
  b.xc = sizeof(float) * chunk * C;
  b.logits = sizeof(float) * chunk * V;
  if (grad) b.dxc = sizeof(float) * chunk * C;
  if (bf16_products) {
    b.xc16 = sizeof(uint16_t) * chunk * C;
    if (grad) b.dlogits16 = sizeof(uint16_t) * chunk * V;
    if (w == DType::F32) b.w16 = sizeof(uint16_t) * V * C;
  } else if (w == DType::BF16) {
    b.w32 = sizeof(float) * V * C;
  }
  return b;
}

void CpuBackend::cross_entropy(double* loss_sum, float* dx, float* dw, const float* x,
                               ConstDevPtr wp, const int32_t* targets, int N, int targeted, int C,
                               int V, float scale) const {
  check_matmul_inputs(x, wp, "cross_entropy");
  // The scratch is this backend's (ranks as threads in tests may share one backend).
  KILN_CHECK(targeted >= 0 && targeted <= N, "cross_entropy: {} targeted rows of {}", targeted, N);
  std::lock_guard lock(ce_mu_);
  CeScratch& sc = ce_scratch_;
  const bool bf16 = bf16_ && gemm_bf16_native();
  const CpuCeScratchBytes n =
      cpu_ce_scratch_bytes(N, targeted, C, V, bf16, dx != nullptr, wp.dtype);
  int* rows = sc.rows.as<int>(n.rows);
  int R = 0;
  for (int i = 0; i < N; ++i) {
    if (targets[i] != kIgnoreIndex) rows[R++] = i;
  }
  KILN_CHECK(R == targeted, "cross_entropy: told {} rows have a target, {} have", targeted, R);
  if (dx != nullptr) std::memset(dx, 0, sizeof(float) * N * C);
  if (R == 0) return;
  const int chunk = static_cast<int>(ce_chunk_rows(R, V));
  float* xc = sc.xc.as<float>(n.xc);
  float* logits = sc.logits.as<float>(n.logits);
  float* dxc = sc.dxc.as<float>(n.dxc);
  double* row_loss = sc.row_loss.as<double>(n.row_loss);
  uint16_t* xc16 = sc.xc16.as<uint16_t>(n.xc16);
  uint16_t* dlogits16 = sc.dlogits16.as<uint16_t>(n.dlogits16);
  // The weight in the product's dtype: as gathered (bf16 from FSDP, used as it is), rounded once
  // per call when it comes in fp32 to a bf16 product, widened when bf16 products run in fp32.
  const uint16_t* w16 = nullptr;
  const float* w = nullptr;
  if (bf16) {
    if (wp.dtype == DType::BF16) {
      w16 = static_cast<const uint16_t*>(wp.data);
    } else {
      uint16_t* w16s = sc.w16.as<uint16_t>(n.w16);
      to_bf16(w16s, wp.f32(), static_cast<size_t>(V) * C);
      w16 = w16s;
    }
  } else if (wp.dtype == DType::BF16) {
    float* w32 = sc.w32.as<float>(n.w32);
    const auto* h = static_cast<const uint16_t*>(wp.data);
    for (size_t i = 0; i < static_cast<size_t>(V) * C; ++i) w32[i] = bf16_to_float(h[i]);
    w = w32;
  } else {
    w = wp.f32();
  }
  double total = 0;
  for (int r0 = 0; r0 < R; r0 += chunk) {
    const int r = std::min(chunk, R - r0);
    for (int i = 0; i < r; ++i) {
      std::memcpy(xc + static_cast<size_t>(i) * C, x + static_cast<size_t>(rows[r0 + i]) * C,
                  sizeof(float) * C);
    }
    // logits (r, V) = xc (r, C) @ w^T
    if (bf16) {
      to_bf16(xc16, xc, static_cast<size_t>(r) * C);
      gemm_bf16(false, true, r, V, C, xc16, w16, 0.0f, logits, V);
    } else {
      gemm(false, true, r, V, C, xc, C, w, C, 0.0f, logits, V, GemmPrecision::kFp32);
    }
#pragma omp parallel for schedule(static)
    for (int i = 0; i < r; ++i) {
      row_loss[i] = softmax_row(logits + static_cast<size_t>(i) * V, V, targets[rows[r0 + i]],
                                scale, dx != nullptr);
    }
    for (int i = 0; i < r; ++i) total += row_loss[i];
    if (dx != nullptr) {
      // dxc (r, C) = dlogits (r, V) @ w (V, C);  dw (V, C) += dlogits^T @ xc
      if (bf16) {
        to_bf16(dlogits16, logits, static_cast<size_t>(r) * V);
        gemm_bf16(false, false, r, C, V, dlogits16, w16, 0.0f, dxc, C);
        if (dw != nullptr) gemm_bf16(true, false, V, C, r, dlogits16, xc16, 1.0f, dw, C);
      } else {
        gemm(false, false, r, C, V, logits, V, w, C, 0.0f, dxc, C, GemmPrecision::kFp32);
        if (dw != nullptr)
          gemm(true, false, V, C, r, logits, V, xc, C, 1.0f, dw, C, GemmPrecision::kFp32);
      }
      for (int i = 0; i < r; ++i) {
        std::memcpy(dx + static_cast<size_t>(rows[r0 + i]) * C, dxc + static_cast<size_t>(i) * C,
                    sizeof(float) * C);
      }
    }
  }
  *loss_sum += total;
}

}  // namespace kiln
