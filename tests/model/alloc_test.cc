// A steady-state training step allocates nothing: Decoder::forward_backward plus the AdamW
// step, after two warm-up steps of the same shape, with activation recomputation off and on.
//
// What is counted: every call, from any thread (kiln's OpenMP workers included), of the global
// operator new (all forms) and of malloc, calloc, realloc, aligned_alloc, posix_memalign and
// memalign, which this test binary replaces with counting wrappers around glibc's own allocator
// (__libc_malloc and friends; glibc documents replacing malloc this way). So kiln's Buffers
// (aligned_alloc), std::vector and std::string growth, and libgomp's own allocations are all seen
// and must be zero. Calls made directly from inside the BLAS libraries (libopenblas, libdnnl:
// the caller's return address resolves there via dladdr) are counted apart and only printed:
// OpenBLAS 0.3.21's threaded sgemm driver mallocs its job queue on every call, and oneDNN 2.6's
// primitive execution news its argument map on every call, which kiln cannot change. Not seen at
// all: memory mapped with mmap directly (OpenBLAS's GEMM buffer pool, set up on first use) and
// thread stacks. The step runs on the fp32 CPU backend.
#include <dlfcn.h>
#include <execinfo.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "common/small_model.h"
#include "common/test_backend.h"
#include "kiln/data/batch.h"
#include "kiln/model/decoder.h"
#include "kiln/tensor/buffer.h"
#include "kiln/train/optimizer.h"

extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}

namespace {

std::atomic<bool> g_counting{false};
std::atomic<long> g_news{0}, g_mallocs{0}, g_blas{0};

// KILN_ALLOC_TRACE=1 prints the call stack of every counted allocation (to find the culprit).
bool g_trace = false;
thread_local bool t_in_trace = false;

inline void trace() {
  if (!g_trace || t_in_trace) return;
  t_in_trace = true;
  void* frames[24];
  const int n = backtrace(frames, 24);
  std::fputs("allocation during the step:\n", stderr);
  backtrace_symbols_fd(frames, n, 2);
  t_in_trace = false;
}

// Whether code at `ret` (a return address) belongs to a BLAS library.
bool in_blas_library(void* ret) {
  Dl_info info;
  if (dladdr(ret, &info) == 0 || info.dli_fname == nullptr) return false;
  return std::strstr(info.dli_fname, "libopenblas") != nullptr ||
         std::strstr(info.dli_fname, "libdnnl") != nullptr;
}

// One allocation while counting: the BLAS libraries' own apart, any other into `kiln_count`.
inline void count(std::atomic<long>& kiln_count, void* caller) {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  if (in_blas_library(caller)) {
    g_blas.fetch_add(1);
  } else {
    kiln_count.fetch_add(1);
    trace();
  }
}

inline void count_malloc(void* caller) { count(g_mallocs, caller); }

void* counted_new(size_t n, size_t align, void* caller) {
  count(g_news, caller);
  if (n == 0) n = 1;
  void* p = align > alignof(std::max_align_t) ? __libc_memalign(align, n) : __libc_malloc(n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

extern "C" {
void* malloc(size_t n) {
  count_malloc(__builtin_return_address(0));
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t m) {
  count_malloc(__builtin_return_address(0));
  return __libc_calloc(n, m);
}
void* realloc(void* p, size_t n) {
  count_malloc(__builtin_return_address(0));
  return __libc_realloc(p, n);
}
void* aligned_alloc(size_t align, size_t n) {
  count_malloc(__builtin_return_address(0));
  return __libc_memalign(align, n);
}
void* memalign(size_t align, size_t n) {
  count_malloc(__builtin_return_address(0));
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  count_malloc(__builtin_return_address(0));
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) { __libc_free(p); }
}

void* operator new(size_t n) { return counted_new(n, 0, __builtin_return_address(0)); }
void* operator new[](size_t n) { return counted_new(n, 0, __builtin_return_address(0)); }
void* operator new(size_t n, std::align_val_t a) {
  return counted_new(n, static_cast<size_t>(a), __builtin_return_address(0));
}
void* operator new[](size_t n, std::align_val_t a) {
  return counted_new(n, static_cast<size_t>(a), __builtin_return_address(0));
}
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n, 0, __builtin_return_address(0));
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n, 0, __builtin_return_address(0));
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { __libc_free(p); }
void operator delete[](void* p) noexcept { __libc_free(p); }
void operator delete(void* p, size_t) noexcept { __libc_free(p); }
void operator delete[](void* p, size_t) noexcept { __libc_free(p); }
void operator delete(void* p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { __libc_free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { __libc_free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { __libc_free(p); }

namespace kiln {
namespace {

struct Counts {
  long news, mallocs, blas;
};

// Runs `f` with counting on; returns the allocations it made.
template <typename F>
Counts count_allocations(F&& f) {
  if (const char* e = std::getenv("KILN_ALLOC_TRACE"); e != nullptr && *e == '1') {
    void* frames[4];
    backtrace(frames, 4);  // loads libgcc's unwinder now, not inside the counted step
    g_trace = true;
  }
  g_news = 0;
  g_mallocs = 0;
  g_blas = 0;
  g_counting = true;
  f();
  g_counting = false;
  return {g_news.load(), g_mallocs.load(), g_blas.load()};
}

TEST(AllocTest, CountersSeeNewAndMalloc) {
  // The wrappers are live: a vector (operator new) and a Buffer (aligned_alloc) are counted.
  const Counts c = count_allocations([] {
    std::vector<float> v(1000);
    Buffer<float> b(1000);
    v[1] = b[2];
  });
  EXPECT_GE(c.news, 1);
  EXPECT_GE(c.mallocs, 1);
}

// A packed batch (two documents per row) of random tokens, the last target of each row ignored.
Batch make_batch(int B, int T, int V) {
  Batch b;
  b.resize(B, T);
  uint64_t s = 12345;
  for (int r = 0; r < B; ++r) {
    for (int t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(r) * T + t;
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      b.input_ids[i] = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(V));
      const int doc = t < T / 3 ? 0 : T / 3;
      b.doc_start[i] = doc;
      b.positions[i] = t - doc;
      b.targets[i] = kIgnoreIndex;
    }
    for (int t = 0; t + 1 < T; ++t) {
      const size_t i = static_cast<size_t>(r) * T + t;
      b.targets[i] = b.input_ids[i + 1];
    }
  }
  return b;
}

void check_steady_state(bool recompute, bool tied) {
  ModelConfig c = testing::small_config(tied, 4, 2);
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.vocab_size = 300;
  Decoder model(c, testing::cpu_fp32());
  ParamStore store(model.layout(), testing::cpu_fp32());
  testing::randomize(store, model.layout(), 3);
  std::vector<ShardRange> shards;
  for (const auto& u : model.layout().units()) shards.push_back({0, u.numel});
  Optimizer opt(OptimizerSettings{}, model.layout(), shards, testing::cpu_fp32());
  const Batch batch = make_batch(2, 80, static_cast<int>(c.vocab_size));
  const float scale = 1.0f / static_cast<float>(batch.num_targets());
  double loss = 0;
  auto step = [&] {
    store.zero_grads();
    loss = model.forward_backward(batch, store, scale, recompute);
    opt.begin_step();
    for (int u = 0; u < store.num_units(); ++u) {
      opt.step(u, store.params(u).data(), store.grads(u).data(), 1e-3);
    }
  };
  step();
  step();
  const double warm_loss = loss;
  const Counts n = count_allocations(step);
  std::printf(
      "recompute %s, tied %s: %ld operator new, %ld malloc-family calls in the step (and %ld "
      "inside the BLAS library, not kiln's)\n",
      recompute ? "on" : "off", tied ? "yes" : "no", n.news, n.mallocs, n.blas);
  EXPECT_EQ(n.news, 0) << "operator new during a steady-state step";
  EXPECT_EQ(n.mallocs, 0) << "malloc during a steady-state step";
  // The counted step was a real step: the loss moved (AdamW updated the parameters).
  EXPECT_NE(loss, warm_loss);
}

TEST(AllocTest, SteadyStateStepAllocatesNothing) { check_steady_state(false, true); }
TEST(AllocTest, SteadyStateStepWithRecomputeAllocatesNothing) { check_steady_state(true, true); }
TEST(AllocTest, SteadyStateStepUntiedHeadAllocatesNothing) { check_steady_state(false, false); }

}  // namespace
}  // namespace kiln
