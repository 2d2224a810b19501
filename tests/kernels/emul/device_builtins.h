// CUDA's device-side language as the CPU emulator provides it to kernel sources compiled by the
// host compiler: the qualifiers, the built-in index variables, __syncthreads, warp shuffles and
// votes, atomics, and the math intrinsics kiln's kernels call. Every synchronising call records
// its call site (site.h), so a fault names the line of kernel source it concerns.
// Reached through the emulator's <cuda_runtime.h> (shim/).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/emul/runtime_api.h"
#include "kernels/emul/site.h"

// Qualifiers. A __shared__ variable is a static of the function: the emulator runs one block at a
// time on one OS thread, clears its memory tracking at every block start, and knows its bounds
// from the instrumentation's registration of globals (memory_check.h). A __shared__ variable in a
// function with external linkage (an inline function of a header) is not registered: the emulator
// reports any access to it.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __restrict__ __restrict
// Kernel sources take their emulated paths (inline PTX, launches) under this.
#define KILN_EMULATED_DEVICE 1

namespace kiln::emul {

// The emulated thread's coordinates (only valid on an emulated thread).
uint3 thread_idx();
uint3 block_idx();
dim3 block_dim();
dim3 grid_dim();

// The launch's dynamic shared memory (KILN_EXTERN_SHARED of kiln/kernels/cuda/launch.cuh).
unsigned char* dynamic_shared_memory();

void sync_threads(const Site& site);
void sync_warp(unsigned mask, const Site& site);

enum class ShuffleKind { kIndex, kUp, kDown, kXor };
// out = var of the lane chosen by kind and arg among the lanes of the warp (width lanes per
// segment), exchanged at a warp-collective point.
void shuffle(ShuffleKind kind, unsigned mask, const void* var, void* out, size_t bytes, int arg,
             int width, const Site& site);
enum class VoteKind { kBallot, kAny, kAll };
unsigned vote(VoteKind kind, unsigned mask, bool predicate, const Site& site);

// The tensor-core instructions kernels reach through inline PTX (attention_mma.cuh), as warp
// operations by the PTX ISA's fragment layouts (tensor_core.h): ldmatrix.sync.aligned.m8n8.x4
// (.trans) from the shared memory row `row` this lane addresses, and
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (d += a b).
void ldmatrix_x4(uint32_t (&r)[4], const void* row, bool trans, const char* file = __builtin_FILE(),
                 int line = __builtin_LINE());
void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                       const char* file = __builtin_FILE(), int line = __builtin_LINE());

// Atomics on device memory: checked as atomic accesses (they never race with each other).
int atomic_min(int* address, int value);
int atomic_max(int* address, int value);
int atomic_add(int* address, int value);
unsigned atomic_add(unsigned* address, unsigned value);
float atomic_add(float* address, float value);
double atomic_add(double* address, double value);

}  // namespace kiln::emul

#define threadIdx (::kiln::emul::thread_idx())
#define blockIdx (::kiln::emul::block_idx())
#define blockDim (::kiln::emul::block_dim())
#define gridDim (::kiln::emul::grid_dim())
#define warpSize 32

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  kiln::emul::sync_threads(kiln::emul::Site{file, line});
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  kiln::emul::sync_warp(mask, kiln::emul::Site{file, line});
}

template <typename T>
T kiln_emul_shuffle(kiln::emul::ShuffleKind kind, unsigned mask, T var, int arg, int width,
                    const kiln::emul::Site& site) {
  static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
  T out;
  kiln::emul::shuffle(kind, mask, &var, &out, sizeof(T), arg, width, site);
  return out;
}
template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32,
              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return kiln_emul_shuffle(kiln::emul::ShuffleKind::kIndex, mask, var, src_lane, width,
                           kiln::emul::Site{file, line});
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,
                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return kiln_emul_shuffle(kiln::emul::ShuffleKind::kUp, mask, var, static_cast<int>(delta), width,
                           kiln::emul::Site{file, line});
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,
                   const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return kiln_emul_shuffle(kiln::emul::ShuffleKind::kDown, mask, var, static_cast<int>(delta),
                           width, kiln::emul::Site{file, line});
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32,
                  const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return kiln_emul_shuffle(kiln::emul::ShuffleKind::kXor, mask, var, lane_mask, width,
                           kiln::emul::Site{file, line});
}

inline unsigned __ballot_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  return kiln::emul::vote(kiln::emul::VoteKind::kBallot, mask, predicate != 0,
                          kiln::emul::Site{file, line});
}
inline int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  return static_cast<int>(kiln::emul::vote(kiln::emul::VoteKind::kAny, mask, predicate != 0,
                                           kiln::emul::Site{file, line}));
}
inline int __all_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  return static_cast<int>(kiln::emul::vote(kiln::emul::VoteKind::kAll, mask, predicate != 0,
                                           kiln::emul::Site{file, line}));
}

inline int atomicMin(int* a, int v) { return kiln::emul::atomic_min(a, v); }
inline int atomicMax(int* a, int v) { return kiln::emul::atomic_max(a, v); }
inline int atomicAdd(int* a, int v) { return kiln::emul::atomic_add(a, v); }
inline unsigned atomicAdd(unsigned* a, unsigned v) { return kiln::emul::atomic_add(a, v); }
inline float atomicAdd(float* a, float v) { return kiln::emul::atomic_add(a, v); }
inline double atomicAdd(double* a, double v) { return kiln::emul::atomic_add(a, v); }

// Loads through the read-only cache: a plain (checked) load here.
template <typename T>
T __ldg(const T* p) {
  return *p;
}

// Integer min and max of device code (the C library has only fminf and fmaxf).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a < b ? b : a; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a < b ? b : a; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a < b ? b : a; }

inline unsigned __float_as_uint(float f) { return std::bit_cast<unsigned>(f); }
inline float __uint_as_float(unsigned u) { return std::bit_cast<float>(u); }
inline int __float_as_int(float f) { return std::bit_cast<int>(f); }
inline float __int_as_float(int i) { return std::bit_cast<float>(i); }

// The fast intrinsics, at full precision (the GPU's are within a few ulp).
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
