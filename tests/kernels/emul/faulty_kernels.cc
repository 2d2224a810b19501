// Kernels with one planted fault each (and a correct twin where the fault is subtle), compiled
// like the kernel sources (instrumented, against the emulator's CUDA headers) for
// emul_faults_test: each class of fault the emulator claims to catch, caught.
#include "kernels/emul/faulty_kernels.h"

#include <cuda_runtime.h>

#include "kiln/kernels/cuda/launch.cuh"

namespace kiln::emul::faulty {

namespace {
constexpr int kThreads = 64;

// Threads below `split` reach a barrier the others skip.
__global__ void missed_barrier_kernel(float* out, int split) {
  __shared__ float tile[kThreads];
  tile[threadIdx.x] = static_cast<float>(threadIdx.x);
  if (static_cast<int>(threadIdx.x) < split) __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];
}

// The second half of the block leaves before the first half's barrier.
__global__ void early_exit_kernel(float* out) {
  if (threadIdx.x >= kThreads / 2) return;
  __shared__ float tile[kThreads];
  tile[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];
}

// Odd and even threads reach textually different barriers.
__global__ void divergent_barriers_kernel(float* out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}

// Each thread updates its slot, then reads its neighbour's: a race unless a barrier lies between.
__global__ void neighbour_kernel(float* out, bool sync) {
  __shared__ float tile[kThreads];
  tile[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  tile[threadIdx.x] += 1.0f;
  if (sync) __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % kThreads];
}

// Each thread reads its neighbour's slot, then overwrites its own: a write racing a read.
__global__ void overwrite_kernel(float* out) {
  __shared__ float tile[kThreads];
  tile[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  const float v = tile[(threadIdx.x + 1) % kThreads];
  tile[threadIdx.x] = v * 2.0f;
  out[threadIdx.x] = v;
}

// Thread t reads slot t + shift of a shared array of kThreads.
__global__ void shared_index_kernel(float* out, int shift) {
  __shared__ float tile[kThreads];
  tile[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = tile[static_cast<int>(threadIdx.x) + shift];
}

// Thread t writes out[t + shift].
__global__ void global_index_kernel(float* out, int shift) {
  out[static_cast<int>(threadIdx.x) + shift] = 1.0f;
}

// Reads a shared slot no thread wrote.
__global__ void uninitialized_kernel(float* out) {
  __shared__ float tile[kThreads];
  if (threadIdx.x > 0) tile[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = tile[0];
}

// A float2 store at out + offset (misaligned for an odd offset).
__global__ void float2_store_kernel(float* out, int offset) {
  *reinterpret_cast<float2*>(out + offset + 2 * static_cast<int>(threadIdx.x)) = make_float2(1, 2);
}

// Every block writes out[threadIdx.x]: blocks race.
__global__ void blocks_write_one_row_kernel(float* out) { out[threadIdx.x] = blockIdx.x; }

// Lanes 16..31 leave; the others shuffle with a full mask.
__global__ void shuffle_after_exit_kernel(float* out) {
  if (threadIdx.x % 32 >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// A full-warp butterfly sum: correct.
__global__ void warp_sum_kernel(float* out) {
  float v = static_cast<float>(threadIdx.x);
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  out[threadIdx.x] = v;
}

// Writes `bytes` of dynamic shared memory, one float per thread per step.
__global__ void dynamic_shared_kernel(float* out, int bytes) {
  KILN_EXTERN_SHARED(smem);
  float* s = reinterpret_cast<float*>(smem);
  for (int i = threadIdx.x; i < bytes / 4; i += kThreads) s[i] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

// atomicMin from every thread into one shared slot: atomics do not race with each other.
__global__ void atomic_min_kernel(int* out) {
  __shared__ int slot;
  if (threadIdx.x == 0) slot = 1 << 30;
  __syncthreads();
  atomicMin(&slot, 100 - static_cast<int>(threadIdx.x));
  __syncthreads();
  out[threadIdx.x] = slot;
}
}  // namespace

void missed_barrier(float* out, int split) {
  KILN_LAUNCH(1, kThreads, 0, nullptr, missed_barrier_kernel)(out, split);
}
void early_exit(float* out) { KILN_LAUNCH(1, kThreads, 0, nullptr, early_exit_kernel)(out); }
void divergent_barriers(float* out) {
  KILN_LAUNCH(1, kThreads, 0, nullptr, divergent_barriers_kernel)(out);
}
void neighbour(float* out, bool sync) {
  KILN_LAUNCH(1, kThreads, 0, nullptr, neighbour_kernel)(out, sync);
}
void overwrite(float* out) { KILN_LAUNCH(1, kThreads, 0, nullptr, overwrite_kernel)(out); }
void shared_index(float* out, int shift) {
  KILN_LAUNCH(1, kThreads, 0, nullptr, shared_index_kernel)(out, shift);
}
void global_index(float* out, int shift) {
  KILN_LAUNCH(1, kThreads, 0, nullptr, global_index_kernel)(out, shift);
}
void uninitialized(float* out) { KILN_LAUNCH(1, kThreads, 0, nullptr, uninitialized_kernel)(out); }
void float2_store(float* out, int offset) {
  KILN_LAUNCH(1, kThreads, 0, nullptr, float2_store_kernel)(out, offset);
}
void blocks_write_one_row(float* out, int blocks) {
  KILN_LAUNCH(blocks, kThreads, 0, nullptr, blocks_write_one_row_kernel)(out);
}
void shuffle_after_exit(float* out) {
  KILN_LAUNCH(1, kThreads, 0, nullptr, shuffle_after_exit_kernel)(out);
}
void warp_sum(float* out, int threads) {
  KILN_LAUNCH(1, threads, 0, nullptr, warp_sum_kernel)(out);
}
void dynamic_shared(float* out, int launch_bytes, int used_bytes, bool set_attribute) {
  if (set_attribute) {
    cudaFuncSetAttribute(dynamic_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         launch_bytes);
  }
  KILN_LAUNCH(1, kThreads, launch_bytes, nullptr, dynamic_shared_kernel)(out, used_bytes);
}
void atomic_min(int* out) { KILN_LAUNCH(1, kThreads, 0, nullptr, atomic_min_kernel)(out); }

}  // namespace kiln::emul::faulty
