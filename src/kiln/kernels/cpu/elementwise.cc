// Elementwise and row-wise CPU ops: embedding, RMSNorm (alone and fused with the residual add),
// RoPE, SwiGLU, add, reductions.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/f32_view.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/cpu/vec_math.h"
#include "kiln/kernels/dropout_mask.h"

namespace kiln {

namespace {
// Elements below which a pass runs on the calling thread: a parallel region's fork and join cost
// more than the work (a hidden-64 model's (tokens, hidden) pass is 16K floats, a few µs).
constexpr size_t kMinParallel = size_t{1} << 15;

// Splits [0, n) into omp_get_num_threads() contiguous ranges; returns this thread's.
inline void thread_range(size_t n, size_t* begin, size_t* end) {
  size_t nt = static_cast<size_t>(omp_get_num_threads());
  size_t t = static_cast<size_t>(omp_get_thread_num());
  size_t chunk = (n + nt - 1) / nt;
  *begin = std::min(n, t * chunk);
  *end = std::min(n, *begin + chunk);
}

// Runs body(begin, end) over [0, n) split into one contiguous range per OpenMP thread, or over
// all of it on the calling thread when `work` (elements touched) is below kMinParallel. The small
// case enters no parallel region at all: an `if(false)` region still makes a one-thread team,
// which libgomp mallocs and frees every time (its cached team only serves the same thread count).
template <typename F>
inline void for_ranges(size_t n, size_t work, F&& body) {
  if (work < kMinParallel) {
    body(size_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    size_t b, e;
    thread_range(n, &b, &e);
    body(b, e);
  }
}
}  // namespace

void CpuBackend::embedding_forward(float* out, const int32_t* ids, ConstDevPtr wte, int N,
                                   int C) const {
  const bool bf16 = wte.dtype == DType::BF16;
  for_ranges(N, static_cast<size_t>(N) * C, [&](size_t n0, size_t n1) {
    for (size_t n = n0; n < n1; ++n) {
      const size_t row = static_cast<size_t>(ids[n]) * C;
      if (bf16) {
        const auto* src = static_cast<const uint16_t*>(wte.data) + row;
        for (int c = 0; c < C; ++c) out[n * C + c] = bf16_to_float(src[c]);
      } else {
        std::memcpy(out + n * C, wte.f32() + row, sizeof(float) * C);
      }
    }
  });
}

void CpuBackend::embedding_forward_part(float* out, const int32_t* ids, const float* part,
                                        size_t part_begin, size_t part_len, int N, int C,
                                        bool round_bf16) const {
  const size_t part_end = part_begin + part_len;
  for_ranges(N, static_cast<size_t>(N) * C, [&](size_t n0, size_t n1) {
    std::vector<uint16_t> rounded(round_bf16 ? C : 0);
    for (size_t n = n0; n < n1; ++n) {
      const size_t row = static_cast<size_t>(ids[n]) * C;
      float* dst = out + n * C;
      for (int c = 0; c < C; ++c) {
        const size_t e = row + c;
        dst[c] = e >= part_begin && e < part_end ? part[e - part_begin] : 0.0f;
      }
      if (!round_bf16) continue;
      // As cast_to_bf16 rounds a gathered unit, so both paths give the same activations.
      to_bf16(rounded.data(), dst, C);
      for (int c = 0; c < C; ++c) dst[c] = bf16_to_float(rounded[c]);
    }
  });
}

void CpuBackend::embedding_backward(float* dwte, const float* dout, const int32_t* ids, int N,
                                    int C) const {
  embedding_backward_part(dwte, dout, ids, 0, SIZE_MAX, N, C);
}

void CpuBackend::embedding_backward_part(float* dpart, const float* dout, const int32_t* ids,
                                         size_t part_begin, size_t part_len, int N, int C) const {
  // Threads own disjoint column ranges, so repeated ids never race and the sum order is fixed.
  for_ranges(C, static_cast<size_t>(N) * C, [&](size_t c0, size_t c1) {
    for (int n = 0; n < N; ++n) {
      const size_t row = static_cast<size_t>(ids[n]) * C;
      const float* src = dout + static_cast<size_t>(n) * C;
      for (size_t c = c0; c < c1; ++c) {
        const size_t at = row + c - part_begin;  // wraps above part_len when below part_begin
        if (at < part_len) dpart[at] += src[c];
      }
    }
  });
}

namespace {
// One row of RMSNorm: o = x * r * w, returns r. The sum of squares is in double, so the result
// does not depend on the vector width.
inline float rmsnorm_row(float* __restrict o, const float* __restrict xr, const float* __restrict w,
                         int C, float eps) {
  double ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * xr[c];
  const float r = static_cast<float>(1.0 / std::sqrt(ss / C + eps));
#pragma omp simd
  for (int c = 0; c < C; ++c) o[c] = xr[c] * r * w[c];
  return r;
}
}  // namespace

// A row of o = x * r * w stored in bf16: the same products as rmsnorm_row, rounded in chunks.
inline void rmsnorm_row_bf16(uint16_t* o, const float* xr, const float* w, int C, float r) {
  constexpr int kChunk = 256;
  float tmp[kChunk];
  for (int c0 = 0; c0 < C; c0 += kChunk) {
    const int n = std::min(kChunk, C - c0);
#pragma omp simd
    for (int c = 0; c < n; ++c) tmp[c] = xr[c0 + c] * r * w[c0 + c];
    to_bf16(o + c0, tmp, static_cast<size_t>(n));
  }
}

// The row's r = 1/sqrt(mean(x^2) + eps), exactly as rmsnorm_row computes it.
inline float rms_scale(const float* xr, int C, float eps) {
  double ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * xr[c];
  return static_cast<float>(1.0 / std::sqrt(ss / C + eps));
}

// One row into `out` (f32 or bf16) at row n.
inline float rmsnorm_row_to(DevPtr out, size_t n, const float* xr, const float* w, int C,
                            float eps) {
  if (out.dtype == DType::BF16) {
    const float r = rms_scale(xr, C, eps);
    rmsnorm_row_bf16(static_cast<uint16_t*>(out.data) + n * C, xr, w, C, r);
    return r;
  }
  return rmsnorm_row(static_cast<float*>(out.data) + n * C, xr, w, C, eps);
}

void CpuBackend::rmsnorm_forward(DevPtr out, float* rstd, const float* x, ConstDevPtr wp, int N,
                                 int C, float eps) const {
  const F32View wv(wp, C);
  const float* w = wv.get();
  for_ranges(N, static_cast<size_t>(N) * C, [&](size_t n0, size_t n1) {
    for (size_t n = n0; n < n1; ++n) rstd[n] = rmsnorm_row_to(out, n, x + n * C, w, C, eps);
  });
}

void CpuBackend::add_rmsnorm_forward(float* sum, DevPtr out, float* rstd, const float* a,
                                     const float* b, ConstDevPtr wp, int N, int C,
                                     float eps) const {
  const F32View wv(wp, C);
  const float* w = wv.get();
  for_ranges(N, static_cast<size_t>(N) * C, [&](size_t n0, size_t n1) {
    for (size_t n = n0; n < n1; ++n) {
      const size_t off = n * C;
      float* s = sum + off;
      const float* ar = a + off;
      const float* br = b + off;
#pragma omp simd
      for (int c = 0; c < C; ++c) s[c] = ar[c] + br[c];
      rstd[n] = rmsnorm_row_to(out, n, s, w, C, eps);  // the row is still in L1
    }
  });
}

void CpuBackend::rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                                  ConstDevPtr wp, const float* rstd, int N, int C,
                                  bool accumulate) const {
  const F32View wv(wp, C);
  const float* w = wv.get();
  // y = x * r * w with r = (mean(x^2) + eps)^-1/2:
  // dx = r * (dy * w) - x * r^3 * mean(dy * w * x);  dw += sum_n dy * x * r
  const size_t work = static_cast<size_t>(N) * C;
  for_ranges(N, work, [&](size_t n0, size_t n1) {
    for (size_t n = n0; n < n1; ++n) {
      const float* xr = x + n * C;
      const float* g = dout + n * C;
      float* d = dx + n * C;
      float r = rstd[n];
      double dot = 0;
      for (int c = 0; c < C; ++c) dot += static_cast<double>(g[c]) * w[c] * xr[c];
      float k = static_cast<float>(dot / C) * r * r * r;
      if (accumulate) {
        for (int c = 0; c < C; ++c) d[c] += r * g[c] * w[c] - xr[c] * k;
      } else {
        for (int c = 0; c < C; ++c) d[c] = r * g[c] * w[c] - xr[c] * k;
      }
    }
  });
  if (dw == nullptr) return;  // a frozen weight
  for_ranges(C, work, [&](size_t c0, size_t c1) {
    for (int n = 0; n < N; ++n) {
      const float* xr = x + static_cast<size_t>(n) * C;
      const float* g = dout + static_cast<size_t>(n) * C;
      float r = rstd[n];
      for (size_t c = c0; c < c1; ++c) dw[c] += g[c] * xr[c] * r;
    }
  });
}

namespace {
// Rotates each (d, d + half) pair of every head by +angle (sign 1: forward) or -angle (sign -1:
// backward, the transpose of the rotation).
void rope_rotate(float* x, const int32_t* pos, const float* cos_table, const float* sin_table,
                 int N, int heads, int D, float sign) {
  const int half = D / 2;
  for_ranges(N, static_cast<size_t>(N) * heads * D, [&](size_t n0, size_t n1) {
    for (size_t n = n0; n < n1; ++n) {
      const float* cs = cos_table + static_cast<size_t>(pos[n]) * half;
      const float* sn = sin_table + static_cast<size_t>(pos[n]) * half;
      for (int h = 0; h < heads; ++h) {
        float* v = x + (n * heads + h) * D;
        for (int d = 0; d < half; ++d) {
          const float a = v[d], b = v[d + half], s = sign * sn[d];
          v[d] = a * cs[d] - b * s;
          v[d + half] = b * cs[d] + a * s;
        }
      }
    }
  });
}
}  // namespace

void CpuBackend::rope_forward(float* x, const int32_t* pos, const float* cos_table,
                              const float* sin_table, int N, int heads, int D) const {
  rope_rotate(x, pos, cos_table, sin_table, N, heads, D, 1.0f);
}

void CpuBackend::rope_backward(float* dx, const int32_t* pos, const float* cos_table,
                               const float* sin_table, int N, int heads, int D) const {
  rope_rotate(dx, pos, cos_table, sin_table, N, heads, D, -1.0f);
}

namespace {
// The SwiGLU loops as functions of their own: inside for_ranges' lambda GCC reloads the
// captured pointers after every store (they might alias the closure) and does not vectorise.
void swiglu_forward_range(float* h, const float* gate, const float* up, size_t i0, size_t i1) {
#pragma omp simd
  for (size_t i = i0; i < i1; ++i) {
    const float g = gate[i];
    h[i] = g * vec::sigmoid(g) * up[i];
  }
}
void swiglu_backward_range(float* dgate, float* dup, const float* dh, const float* gate,
                           const float* up, size_t i0, size_t i1) {
#pragma omp simd
  for (size_t i = i0; i < i1; ++i) {
    const float g = gate[i];
    const float s = vec::sigmoid(g);
    dup[i] = dh[i] * g * s;
    dgate[i] = dh[i] * up[i] * s * (1.0f + g * (1.0f - s));
  }
}
}  // namespace

// SwiGLU with a vectorised sigmoid (vec_math.h): std::exp is a libm call per element. Rows are
// split across threads; row n's gate is gate_up[n, 0:I) and its up gate_up[n, I:2I).
void CpuBackend::swiglu_forward(DevPtr h, const float* gate_up, int N, int I) const {
  const size_t cols = static_cast<size_t>(I);
  for_ranges(N, N * cols, [&](size_t n0, size_t n1) {
    for (size_t n = n0; n < n1; ++n) {
      const float* gate = gate_up + n * 2 * cols;
      if (h.dtype != DType::BF16) {
        swiglu_forward_range(static_cast<float*>(h.data) + n * cols, gate, gate + cols, 0, cols);
        continue;
      }
      // In chunks through a float buffer, rounded as gemm() would round the f32 result.
      auto* h16 = static_cast<uint16_t*>(h.data) + n * cols;
      constexpr size_t kChunk = 1024;
      float tmp[kChunk];
      for (size_t c0 = 0; c0 < cols; c0 += kChunk) {
        const size_t m = std::min(kChunk, cols - c0);
        swiglu_forward_range(tmp, gate + c0, gate + cols + c0, 0, m);
        to_bf16(h16 + c0, tmp, m);
      }
    }
  });
}

void CpuBackend::swiglu_backward(float* dgate_up, const float* dh, const float* gate_up, int N,
                                 int I) const {
  const size_t cols = static_cast<size_t>(I);
  for_ranges(N, N * cols, [&](size_t n0, size_t n1) {
    for (size_t n = n0; n < n1; ++n) {
      const float* gate = gate_up + n * 2 * cols;
      float* dgate = dgate_up + n * 2 * cols;
      swiglu_backward_range(dgate, dgate + cols, dh + n * cols, gate, gate + cols, 0, cols);
    }
  });
}

void CpuBackend::add(float* out, const float* a, const float* b, size_t n) const {
  for_ranges(n, n, [&](size_t i0, size_t i1) {
#pragma omp simd
    for (size_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
  });
}

namespace {
// tmp[j] = dropout_value(m, first + j, x[j]), j < k: a loop the compiler vectorises (the mask by
// value, the arrays restrict), 64-bit lanes and all.
void dropout_chunk(float* __restrict tmp, const float* __restrict x, size_t k, uint64_t first,
                   const DropoutMask m) {
  for (size_t j = 0; j < k; ++j) tmp[j] = dropout_value(m, first + j, x[j]);
}
}  // namespace

// The mask is dropout_mask.h's, element by element, in chunks through a float buffer; a bf16
// output is rounded as to_bf16 rounds every bf16 activation.
void CpuBackend::dropout(DevPtr out, ConstDevPtr x, size_t n, float p, uint64_t seed,
                         uint64_t offset) const {
  for (const DType t : {x.dtype, out.dtype}) {
    KILN_CHECK(t == DType::F32 || t == DType::BF16, "dropout: {} data", dtype_name(t));
  }
  const DropoutMask m = dropout_mask_for(p, seed, offset);
  for_ranges(n, n, [&](size_t i0, size_t i1) {
    constexpr size_t kChunk = 1024;
    float tmp[kChunk], x32[kChunk];
    for (size_t c0 = i0; c0 < i1; c0 += kChunk) {
      const size_t k = std::min(kChunk, i1 - c0);
      const float* xf = static_cast<const float*>(x.data) + c0;
      if (x.dtype == DType::BF16) {
        const auto* x16 = static_cast<const uint16_t*>(x.data) + c0;
        for (size_t j = 0; j < k; ++j) x32[j] = bf16_to_float(x16[j]);
        xf = x32;
      }
      dropout_chunk(tmp, xf, k, c0, m);
      if (out.dtype == DType::F32) {
        std::memcpy(static_cast<float*>(out.data) + c0, tmp, k * sizeof(float));
      } else {
        to_bf16(static_cast<uint16_t*>(out.data) + c0, tmp, k);
      }
    }
  });
}

void CpuBackend::cast_to_bf16(void* dst, const float* src, size_t n) const {
  to_bf16(static_cast<uint16_t*>(dst), src, n);
}

void CpuBackend::cast_from_bf16(float* dst, const void* src, size_t n) const {
  const auto* h = static_cast<const uint16_t*>(src);
  for_ranges(n, n, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) dst[i] = bf16_to_float(h[i]);
  });
}

void CpuBackend::sum_squares(double* sum, const float* x, size_t n) const {
  // Fixed blocks summed in a fixed order: the result does not depend on the thread count.
  constexpr size_t kBlock = 1 << 14;
  const size_t nb = (n + kBlock - 1) / kBlock;
  double partial[64] = {};
  double total = 0;
  for (size_t b0 = 0; b0 < nb; b0 += 64) {
    const size_t b1 = std::min(nb, b0 + 64);
#pragma omp parallel for schedule(static)
    for (size_t b = b0; b < b1; ++b) {
      double s = 0;
      for (size_t i = b * kBlock, e = std::min(n, i + kBlock); i < e; ++i) {
        s += static_cast<double>(x[i]) * x[i];
      }
      partial[b - b0] = s;
    }
    for (size_t b = b0; b < b1; ++b) total += partial[b - b0];
  }
  *sum += total;
}

void CpuBackend::scale(float* x, float a, size_t n) const {
  for_ranges(n, n, [&](size_t i0, size_t i1) {
#pragma omp simd
    for (size_t i = i0; i < i1; ++i) x[i] *= a;
  });
}

void CpuBackend::scale_rows(float* x, const float* row_scale, int n, int C) const {
  const size_t c = static_cast<size_t>(C);
  for_ranges(static_cast<size_t>(n), static_cast<size_t>(n) * c, [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      const float a = row_scale[r];
      float* row = x + r * c;
#pragma omp simd
      for (size_t j = 0; j < c; ++j) row[j] *= a;
    }
  });
}

}  // namespace kiln
