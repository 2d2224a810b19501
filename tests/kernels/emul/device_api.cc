// The device-side functions of device_builtins.h, for the calling emulated thread.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "kernels/emul/access_check.h"
#include "kernels/emul/block_run.h"
#include "kernels/emul/device_builtins.h"
#include "kernels/emul/device_state.h"

namespace kiln::emul {

namespace {
BlockRun& block(const char* what) {
  BlockRun* b = BlockRun::current();
  if (b == nullptr) {
    throw std::logic_error(fmt::format("emulator: {} called outside an emulated kernel", what));
  }
  return *b;
}
}  // namespace

uint3 thread_idx() {
  BlockRun& b = block("threadIdx");
  return b.thread_index(b.current_thread());
}
uint3 block_idx() { return block("blockIdx").index(); }
dim3 block_dim() { return block("blockDim").launch().block; }
dim3 grid_dim() { return block("gridDim").launch().grid; }

unsigned char* dynamic_shared_memory() {
  block("extern __shared__");
  return Device::get().dynamic_shared();
}

void sync_threads(const Site& site) { block("__syncthreads").barrier(site); }

void sync_warp(unsigned mask, const Site& site) {
  unsigned char none = 0;
  block("__syncwarp").warp_op(WarpOpKind::kSyncWarp, 0, mask, &none, 1, 0, &none, 1, site);
}

void shuffle(ShuffleKind kind, unsigned mask, const void* var, void* out, size_t bytes, int arg,
             int width, const Site& site) {
  const int variant = static_cast<int>(kind) << 16 | (width & 0xff) << 8 | static_cast<int>(bytes);
  block("__shfl_sync")
      .warp_op(WarpOpKind::kShuffle, variant, mask, var, bytes, arg, out, bytes, site);
}

unsigned vote(VoteKind kind, unsigned mask, bool predicate, const Site& site) {
  const unsigned char p = predicate ? 1 : 0;
  unsigned r = 0;
  block("a warp vote")
      .warp_op(WarpOpKind::kVote, static_cast<int>(kind), mask, &p, 1, 0, &r, sizeof r, site);
  return r;
}

void ldmatrix_x4(uint32_t (&r)[4], const void* row, bool trans, const char* file, int line) {
  const Site site{file, line};
  block("ldmatrix")
      .warp_op(WarpOpKind::kLdmatrix, trans ? 1 : 0, 0xffffffffu, &row, sizeof row, 0, r, sizeof r,
               site);
}

void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                       const char* file, int line) {
  const Site site{file, line};
  unsigned char in[40];
  std::memcpy(in, a, 16);
  std::memcpy(in + 16, &b0, 4);
  std::memcpy(in + 20, &b1, 4);
  std::memcpy(in + 24, d, 16);
  block("mma.sync").warp_op(WarpOpKind::kMma, 0, 0xffffffffu, in, sizeof in, 0, d, sizeof d, site);
}

namespace {
// An atomic read-modify-write of *p, checked as an atomic access.
template <typename T, typename Op>
T atomic_rmw(T* p, T v, Op op) {
  BlockRun& b = block("an atomic");
  if (!b.on_own_stack(reinterpret_cast<uintptr_t>(p))) {
    check_access(b, b.current_thread(), reinterpret_cast<uintptr_t>(p), sizeof(T), Access::kAtomic);
  }
  const T old = *p;
  *p = op(old, v);
  return old;
}
}  // namespace

int atomic_min(int* a, int v) {
  return atomic_rmw(a, v, [](int x, int y) { return std::min(x, y); });
}
int atomic_max(int* a, int v) {
  return atomic_rmw(a, v, [](int x, int y) { return std::max(x, y); });
}
int atomic_add(int* a, int v) {
  return atomic_rmw(a, v, [](int x, int y) { return x + y; });
}
unsigned atomic_add(unsigned* a, unsigned v) {
  return atomic_rmw(a, v, [](unsigned x, unsigned y) { return x + y; });
}
float atomic_add(float* a, float v) {
  return atomic_rmw(a, v, [](float x, float y) { return x + y; });
}
double atomic_add(double* a, double v) {
  return atomic_rmw(a, v, [](double x, double y) { return x + y; });
}

}  // namespace kiln::emul
