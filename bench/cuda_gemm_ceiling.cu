// cuda_gemm_ceiling: the bf16 matrix-product rate this GPU actually reaches through cuBLASLt
// (bf16 inputs and outputs, fp32 accumulation), at large square shapes and at the Qwen2.5-1.5B
// layer shapes of one training micro-batch (M = batch x 2048 tokens). The largest rate is the
// measured ceiling kiln's MFU figures are taken against (scripts/gpu_check.sh), printed beside
// the GPU's published peak (kernels/cuda/gpu_peak_flops.h); and the device-to-device copy
// bandwidth (bytes read plus written), the memory side of the check's roofline estimates.
// Prints figures; never judges them. Without a GPU it prints one line and exits 77.
//
//   cuda_gemm_ceiling [--tokens M] [--reps R] [--trials N]
//
// Each shape: 3 warm-up products, then N trials of R back-to-back products timed with CUDA
// events; the best trial's mean is reported (best-of-N rejects clock ramp-up and interference).
// The operands hold random bf16 values in [-1, 1) (zeros run measurably faster on Hopper).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/cuda_devices.h"
#include "kiln/kernels/cuda/gpu_peak_flops.h"

namespace {

#define GEMM_LT_CHECK(call)                                             \
  do {                                                                  \
    const cublasStatus_t s_ = (call);                                   \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                  \
      std::fprintf(stderr, "cuda_gemm_ceiling: %s failed: %s\n", #call, \
                   cublasLtGetStatusString(s_));                        \
      std::exit(1);                                                     \
    }                                                                   \
  } while (0)

constexpr size_t kWorkspaceBytes = size_t{64} << 20;

// One product C[m x n] = A[m x k] * B[k x n]^T-style as kiln's linear layers do it: row-major
// activations X[m x k] times a weight W[n x k] (nn.Linear layout), i.e. Y = X W^T.
struct Shape {
  std::string name;
  int m, n, k;
};

// Qwen2.5-1.5B: hidden 1536, 12 heads, 2 KV heads of 128, intermediate 8960, vocab 151936.
std::vector<Shape> shapes(int tokens) {
  return {
      {"square-4096", 4096, 4096, 4096},          {"square-8192", 8192, 8192, 8192},
      {"1.5b-qkv", tokens, 1536 + 2 * 256, 1536}, {"1.5b-o", tokens, 1536, 1536},
      {"1.5b-gate/up", tokens, 8960, 1536},       {"1.5b-gate+up", tokens, 2 * 8960, 1536},
      {"1.5b-down", tokens, 1536, 8960},          {"1.5b-lm-head", tokens, 151936, 1536},
      {"1.5b-down-dW", 1536, 8960, tokens},  // weight gradient: reduction over the tokens
      {"1.5b-lm-head-dW", 1536, 151936, tokens},
  };
}

// x[i] = a hash of i mapped to [-1, 1), as bf16.
__global__ void fill_random(__nv_bfloat16* x, size_t n, unsigned seed) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    x[i] = __float2bfloat16(static_cast<float>(h & 0xffffff) / 8388608.0f - 1.0f);
  }
}

__nv_bfloat16* random_bf16(size_t n, unsigned seed) {
  __nv_bfloat16* p = nullptr;
  KILN_CUDA_CHECK(cudaMalloc(&p, n * sizeof(__nv_bfloat16)));
  fill_random<<<1024, 256>>>(p, n, seed);
  KILN_CUDA_CHECK(cudaGetLastError());
  return p;
}

struct Result {
  double tflops = 0, ms = 0;
  bool ok = false;
};

// Times Y[m x n] = X[m x k] W[n x k]^T. cuBLASLt is column-major: Y^T (n x m) = W (as k x n,
// transposed) times X^T (k x m), i.e. op(A) = T on W, op(B) = N on X, all leading dims k / n.
Result time_shape(cublasLtHandle_t lt, const Shape& s, void* workspace, int reps, int trials) {
  Result r;
  const size_t mk = static_cast<size_t>(s.m) * s.k, nk = static_cast<size_t>(s.n) * s.k;
  const size_t mn = static_cast<size_t>(s.m) * s.n;
  __nv_bfloat16* x = random_bf16(mk, 1);
  __nv_bfloat16* w = random_bf16(nk, 2);
  __nv_bfloat16* y = nullptr;
  KILN_CUDA_CHECK(cudaMalloc(&y, mn * sizeof(__nv_bfloat16)));

  cublasLtMatmulDesc_t op = nullptr;
  GEMM_LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  GEMM_LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  GEMM_LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  GEMM_LT_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.k, s.n, s.k));
  GEMM_LT_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.k, s.m, s.k));
  GEMM_LT_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, s.n, s.m, s.n));
  cublasLtMatmulPreference_t pref = nullptr;
  GEMM_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  GEMM_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &kWorkspaceBytes, sizeof kWorkspaceBytes));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  // NOT_SUPPORTED (no algorithm for the shape) is a row, not the end of the bench.
  if (cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 1, &heur, &found) !=
      CUBLAS_STATUS_SUCCESS) {
    found = 0;
  }

  if (found > 0) {
    const float alpha = 1.0f, beta = 0.0f;
    auto run = [&] {
      GEMM_LT_CHECK(cublasLtMatmul(lt, op, &alpha, w, la, x, lb, &beta, y, lc, y, lc, &heur.algo,
                                   workspace, kWorkspaceBytes, nullptr));
    };
    for (int i = 0; i < 3; ++i) run();
    cudaEvent_t t0, t1;
    KILN_CUDA_CHECK(cudaEventCreate(&t0));
    KILN_CUDA_CHECK(cudaEventCreate(&t1));
    double best_ms = 1e30;
    for (int t = 0; t < trials; ++t) {
      KILN_CUDA_CHECK(cudaEventRecord(t0));
      for (int i = 0; i < reps; ++i) run();
      KILN_CUDA_CHECK(cudaEventRecord(t1));
      KILN_CUDA_CHECK(cudaEventSynchronize(t1));
      float ms = 0;
      KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
      best_ms = std::min(best_ms, static_cast<double>(ms) / reps);
    }
    KILN_CUDA_CHECK(cudaEventDestroy(t0));
    KILN_CUDA_CHECK(cudaEventDestroy(t1));
    r.ok = true;
    r.ms = best_ms;
    r.tflops = 2.0 * s.m * static_cast<double>(s.n) * s.k / (best_ms * 1e-3) / 1e12;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  KILN_CUDA_CHECK(cudaFree(x));
  KILN_CUDA_CHECK(cudaFree(w));
  KILN_CUDA_CHECK(cudaFree(y));
  return r;
}

// Device-to-device copies of `bytes` (best of `trials` runs of `reps`), in GB/s counting the
// bytes read and written; 0 when the buffers do not fit.
double copy_bandwidth(size_t bytes, int reps, int trials) {
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
    cudaGetLastError();
    if (a != nullptr) cudaFree(a);
    return 0;
  }
  KILN_CUDA_CHECK(cudaMemset(a, 1, bytes));
  KILN_CUDA_CHECK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));  // warm-up
  cudaEvent_t t0, t1;
  KILN_CUDA_CHECK(cudaEventCreate(&t0));
  KILN_CUDA_CHECK(cudaEventCreate(&t1));
  double best_ms = 1e30;
  for (int t = 0; t < trials; ++t) {
    KILN_CUDA_CHECK(cudaEventRecord(t0));
    for (int i = 0; i < reps; ++i) {
      KILN_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    }
    KILN_CUDA_CHECK(cudaEventRecord(t1));
    KILN_CUDA_CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    best_ms = std::min(best_ms, static_cast<double>(ms) / reps);
  }
  KILN_CUDA_CHECK(cudaEventDestroy(t0));
  KILN_CUDA_CHECK(cudaEventDestroy(t1));
  KILN_CUDA_CHECK(cudaFree(a));
  KILN_CUDA_CHECK(cudaFree(b));
  return 2.0 * static_cast<double>(bytes) / (best_ms * 1e-3) / 1e9;
}

int int_flag(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int tokens = int_flag(argc, argv, "--tokens", 4096);
  const int reps = int_flag(argc, argv, "--reps", 20);
  const int trials = int_flag(argc, argv, "--trials", 5);
  const kiln::CudaDevices devices = kiln::cuda_devices();
  if (devices.count == 0) {
    std::printf("cuda_gemm_ceiling: no GPU visible (%s)\n", devices.reason.c_str());
    return 77;
  }
  cudaDeviceProp prop{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "cuda_gemm_ceiling: %s (sm_%d%d, %d SMs), cuBLASLt %zu, bf16 in/out, fp32 "
      "accumulate, Y = X W^T, M = %d tokens, best of %d x %d products\n",
      prop.name, prop.major, prop.minor, prop.multiProcessorCount, cublasLtGetVersion(), tokens,
      trials, reps);
  cublasLtHandle_t lt = nullptr;
  GEMM_LT_CHECK(cublasLtCreate(&lt));
  void* workspace = nullptr;
  KILN_CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  std::printf("%-16s %7s %7s %7s %9s %9s\n", "shape", "M", "N", "K", "ms", "TFLOP/s");
  double ceiling = 0;
  std::string ceiling_shape;
  for (const Shape& s : shapes(tokens)) {
    const Result r = time_shape(lt, s, workspace, reps, trials);
    if (!r.ok) {
      std::printf("%-16s %7d %7d %7d  no cuBLASLt algorithm\n", s.name.c_str(), s.m, s.n, s.k);
      continue;
    }
    std::printf("%-16s %7d %7d %7d %9.3f %9.1f\n", s.name.c_str(), s.m, s.n, s.k, r.ms, r.tflops);
    if (r.tflops > ceiling) {
      ceiling = r.tflops;
      ceiling_shape = s.name;
    }
  }
  std::printf("ceiling: %.1f TFLOP/s (%s)\n", ceiling, ceiling_shape.c_str());
  int khz = 0;
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  const kiln::PeakFlops peak = kiln::gpu_peak_flops(prop.name, prop.major, prop.minor,
                                                    prop.multiProcessorCount, khz, /*bf16=*/true);
  std::printf("peak: %.0f TFLOP/s, %s; the ceiling is %.0f%% of it\n", peak.flops / 1e12,
              peak.source.c_str(), peak.flops > 0 ? 100.0 * ceiling * 1e12 / peak.flops : 0.0);
  // A quarter of the memory, at most 1 GiB per buffer: several times any L2.
  const size_t copy_bytes = std::min<size_t>(size_t{1} << 30, prop.totalGlobalMem / 8);
  std::printf("bandwidth: %.0f GB/s (device-to-device copy of %zu MiB, read + written)\n",
              copy_bandwidth(copy_bytes, reps, trials), copy_bytes >> 20);
  std::fflush(stdout);
  KILN_CUDA_CHECK(cudaFree(workspace));
  cublasLtDestroy(lt);
  return 0;
}
