// FMA loops for the machine's peak: 12 independent accumulator registers per thread hide the FMA
// latency (4 cycles x 2 ports on current x86 cores needs at least 8), and the operands never
// leave registers, so the loop measures the arithmetic units and nothing else.
#include <immintrin.h>
#include <omp.h>

#include <chrono>

#include "kiln/kernels/device/cpu_features.h"
#include "kiln/kernels/device/host_cpu.h"

namespace kiln {

namespace {

constexpr int kInner = 1 << 14;  // iterations between clock reads

// Returns FLOPs done. `sink` keeps the accumulators alive.
__attribute__((target("avx512f"))) double fma_loop_avx512(double seconds, float* sink) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  double flops = 0;
  const auto t0 = std::chrono::steady_clock::now();
  do {
    for (int it = 0; it < kInner; ++it) {
      for (int i = 0; i < 12; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    }
    flops += 2.0 * 16 * 12 * kInner;
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds);
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  *sink = out[0];
  return flops;
}

__attribute__((target("avx2,fma"))) double fma_loop_avx2(double seconds, float* sink) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(0.001f * static_cast<float>(i));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  double flops = 0;
  const auto t0 = std::chrono::steady_clock::now();
  do {
    for (int it = 0; it < kInner; ++it) {
      for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    }
    flops += 2.0 * 8 * 12 * kInner;
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds);
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  *sink = out[0];
  return flops;
}

__attribute__((target("avx512f,avx512bf16"))) double dpbf16_loop(double seconds, float* sink) {
  __m512 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_ps(0.001f * static_cast<float>(i));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(2e-3f));
  const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-4f), _mm512_set1_ps(3e-4f));
  double flops = 0;
  const auto t0 = std::chrono::steady_clock::now();
  do {
    for (int it = 0; it < kInner; ++it) {
      for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    }
    flops += 2.0 * 32 * 12 * kInner;
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds);
  __m512 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_add_ps(s, acc[i]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  *sink = out[0];
  return flops;
}

// Runs `loop` on every OpenMP thread at once; aggregate GFLOP/s over the wall time.
template <typename Loop>
double all_threads(Loop loop, double seconds) {
  double total = 0;
  float sink = 0;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel reduction(+ : total, sink)
  {
    float s = 0;
    total += loop(seconds, &s);
    sink += s;
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  volatile float keep = sink;
  (void)keep;
  return total / wall / 1e9;
}

}  // namespace

double measure_fp32_peak_gflops(double seconds) {
  const CpuFeatures& f = cpu_features();
  if (f.avx512()) {
    all_threads(fma_loop_avx512, 0.05);  // wake the cores (frequency ramp) before measuring
    return all_threads(fma_loop_avx512, seconds);
  }
  if (f.avx2()) {
    all_threads(fma_loop_avx2, 0.05);
    return all_threads(fma_loop_avx2, seconds);
  }
  return 0.0;
}

double measure_bf16_peak_gflops(double seconds) {
  if (!cpu_features().avx512_bf16()) return 0.0;
  all_threads(dpbf16_loop, 0.05);
  return all_threads(dpbf16_loop, seconds);
}

}  // namespace kiln
