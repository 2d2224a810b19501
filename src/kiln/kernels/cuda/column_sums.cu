#include "kiln/kernels/cuda/column_sums.h"
#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/launch.cuh"

namespace kiln::cuda {

namespace {
constexpr int kCols = 32;   // columns per block: one warp reads 32 consecutive floats of a row
constexpr int kLanes = 32;  // row lanes per block: lane y sums rows y, y + 32, ...

// Block (kCols, kLanes), grid ceil(OC / kCols). Each thread sums its rows in row order, then the
// kLanes partial sums of a column are added in lane order: the order depends only on N.
__global__ void __launch_bounds__(kCols* kLanes)
    add_column_sums_kernel(float* db, const float* dout, int N, int OC) {
  __shared__ float part[kLanes][kCols + 1];
  const int col = blockIdx.x * kCols + threadIdx.x;
  float s = 0.0f;
  if (col < OC) {
    for (int n = threadIdx.y; n < N; n += kLanes) s += dout[static_cast<size_t>(n) * OC + col];
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < OC) {
    float total = 0.0f;
    for (int y = 0; y < kLanes; ++y) total += part[y][threadIdx.x];
    db[col] += total;
  }
}
}  // namespace

void add_column_sums(float* db, const float* dout, int N, int OC, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  KILN_LAUNCH((OC + kCols - 1) / kCols, dim3(kCols, kLanes), 0, stream, add_column_sums_kernel)
  (db, dout, N, OC);
  KILN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kiln::cuda
