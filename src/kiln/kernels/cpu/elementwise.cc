// Elementwise and row-wise CPU ops: embedding, RMSNorm, RoPE, SwiGLU, add, reductions.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kiln/base/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"

namespace kiln {

namespace {
// Splits [0, n) into omp_get_num_threads() contiguous ranges; returns this thread's.
inline void thread_range(size_t n, size_t* begin, size_t* end) {
  size_t nt = static_cast<size_t>(omp_get_num_threads());
  size_t t = static_cast<size_t>(omp_get_thread_num());
  size_t chunk = (n + nt - 1) / nt;
  *begin = std::min(n, t * chunk);
  *end = std::min(n, *begin + chunk);
}
}  // namespace

void CpuBackend::embedding_forward(float* out, const int32_t* ids, const float* wte, int N,
                                   int C) const {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    std::memcpy(out + static_cast<size_t>(n) * C, wte + static_cast<size_t>(ids[n]) * C,
                sizeof(float) * C);
  }
}

void CpuBackend::embedding_backward(float* dwte, const float* dout, const int32_t* ids, int N,
                                    int C) const {
  // Threads own disjoint column ranges, so repeated ids never race and the sum order is fixed.
#pragma omp parallel
  {
    size_t c0, c1;
    thread_range(static_cast<size_t>(C), &c0, &c1);
    for (int n = 0; n < N; ++n) {
      float* dst = dwte + static_cast<size_t>(ids[n]) * C;
      const float* src = dout + static_cast<size_t>(n) * C;
      for (size_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

void CpuBackend::rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N,
                                 int C, float eps) const {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* xr = x + static_cast<size_t>(n) * C;
    float* o = out + static_cast<size_t>(n) * C;
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    float r = static_cast<float>(1.0 / std::sqrt(ss / C + eps));
    rstd[n] = r;
    for (int c = 0; c < C; ++c) o[c] = xr[c] * r * w[c];
  }
}

void CpuBackend::rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                                  const float* w, const float* rstd, int N, int C,
                                  bool accumulate) const {
  // y = x * r * w with r = (mean(x^2) + eps)^-1/2:
  // dx = r * (dy * w) - x * r^3 * mean(dy * w * x);  dw += sum_n dy * x * r
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* xr = x + static_cast<size_t>(n) * C;
    const float* g = dout + static_cast<size_t>(n) * C;
    float* d = dx + static_cast<size_t>(n) * C;
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
#pragma omp parallel
  {
    size_t c0, c1;
    thread_range(static_cast<size_t>(C), &c0, &c1);
    for (int n = 0; n < N; ++n) {
      const float* xr = x + static_cast<size_t>(n) * C;
      const float* g = dout + static_cast<size_t>(n) * C;
      float r = rstd[n];
      for (size_t c = c0; c < c1; ++c) dw[c] += g[c] * xr[c] * r;
    }
  }
}

void CpuBackend::rope_forward(float* x, const int32_t* pos, const float* cos_table,
                              const float* sin_table, int N, int heads, int D) const {
  const int half = D / 2;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* cs = cos_table + static_cast<size_t>(pos[n]) * half;
    const float* sn = sin_table + static_cast<size_t>(pos[n]) * half;
    for (int h = 0; h < heads; ++h) {
      float* v = x + (static_cast<size_t>(n) * heads + h) * D;
      for (int d = 0; d < half; ++d) {
        float a = v[d], b = v[d + half];
        v[d] = a * cs[d] - b * sn[d];
        v[d + half] = b * cs[d] + a * sn[d];
      }
    }
  }
}

void CpuBackend::rope_backward(float* dx, const int32_t* pos, const float* cos_table,
                               const float* sin_table, int N, int heads, int D) const {
  const int half = D / 2;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* cs = cos_table + static_cast<size_t>(pos[n]) * half;
    const float* sn = sin_table + static_cast<size_t>(pos[n]) * half;
    for (int h = 0; h < heads; ++h) {
      float* v = dx + (static_cast<size_t>(n) * heads + h) * D;
      for (int d = 0; d < half; ++d) {
        float a = v[d], b = v[d + half];
        v[d] = a * cs[d] + b * sn[d];
        v[d + half] = b * cs[d] - a * sn[d];
      }
    }
  }
}

void CpuBackend::swiglu_forward(float* h, const float* gate, const float* up, size_t n) const {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    float g = gate[i];
    h[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void CpuBackend::swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate,
                                 const float* up, size_t n) const {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    float g = gate[i];
    float s = 1.0f / (1.0f + std::exp(-g));
    dup[i] = dh[i] * g * s;
    dgate[i] = dh[i] * up[i] * s * (1.0f + g * (1.0f - s));
  }
}

void CpuBackend::add(float* out, const float* a, const float* b, size_t n) const {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

double CpuBackend::sum_squares(const float* x, size_t n) const {
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
  return total;
}

void CpuBackend::scale(float* x, float a, size_t n) const {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) x[i] *= a;
}

const Backend& cpu_backend() {
  static const CpuBackend backend;  // stateless
  return backend;
}

const Backend& cpu_backend_for(std::string_view dtype) {
  if (dtype == "fp32") return cpu_backend();
  fail("compute dtype '{}' is not supported by the CPU backend (supported: fp32)", dtype);
}

}  // namespace kiln
