// gemm(): fp32 through OpenBLAS's sgemm (or oneDNN with KILN_FP32_GEMM=onednn), bf16 through
// oneDNN's matmul primitive. Each thread keeps its own cache of oneDNN primitives (one per shape,
// transposition, beta and precision) with their memory objects and scratchpad, so a steady-state
// call only converts the inputs into reused buffers, sets data handles and executes: no primitive
// creation, no allocation by kiln. oneDNN is the OpenMP build and shares kiln's thread pool.
#include "kiln/kernels/cpu/gemm.h"

#include <cblas.h>
#include <fmt/format.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/base/log.h"
#include "kiln/kernels/cpu/scratch_sizes.h"
#include "kiln/kernels/device/cpu_features.h"
#include "kiln/kernels/device/host_cpu.h"

namespace kiln {

namespace {

using dnnl::memory;

// oneDNN's ISA held to kiln's (cpu_features: KILN_CPU_ISA), before oneDNN first reads its own.
// A user's ONEDNN_MAX_CPU_ISA is oneDNN's own setting and left to it (the bf16 decision below
// reads the ISA oneDNN then has).
void cap_onednn_isa() {
  static const bool done = [] {
    const CpuFeatures& f = cpu_features();
    const char* own = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (!f.capped() || (own != nullptr && *own != '\0')) return true;
    const dnnl_cpu_isa_t cap = f.avx512_bf16() ? dnnl_cpu_isa_avx512_core_bf16
                               : f.avx512()    ? dnnl_cpu_isa_avx512_core
                               : f.avx2()      ? dnnl_cpu_isa_avx2
                                               : dnnl_cpu_isa_sse41;
    if (dnnl_set_max_cpu_isa(cap) != dnnl_success) {
      KILN_LOG_WARN("oneDNN refused KILN_CPU_ISA's cap ({}); it keeps its own ISA",
                    cpu_isa_name(f.isa));
    }
    return true;
  }();
  (void)done;
}

dnnl::engine& cpu_engine() {
  cap_onednn_isa();
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

const char* isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
#if DNNL_VERSION_MAJOR < 3
    case dnnl_cpu_isa_avx512_mic:
      return "avx512_mic";
    case dnnl_cpu_isa_avx512_mic_4ops:
      return "avx512_mic_4ops";
#endif
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    default:
      return "all";
  }
}

// Whether oneDNN may use AVX512_BF16: ONEDNN_MAX_CPU_ISA (or dnnl_set_max_cpu_isa) can cap it
// below what the CPU has, and then its bf16 matmul would run on an emulated slow path. ISAs are
// bit masks, each containing the ones below it.
bool onednn_allows_avx512_bf16() {
  cap_onednn_isa();
  const auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  const auto need = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
  return (isa & need) == need;
}

// Whether bf16 GEMMs run natively: kiln may use AVX512_BF16 (cpu_features) and oneDNN may too.
// Otherwise the
// bf16 backend's matrix products run in fp32 (more accurate, never an emulated slow path), its
// activations stay fp32 (cpu_memory.cc), and a warning says so once.
bool bf16_native_impl() {
  static const bool native = [] {
    const CpuFeatures& f = cpu_features();
    const bool cpu = f.avx512_bf16();
    const bool has = cpu && onednn_allows_avx512_bf16();
    if (!has) {
      KILN_LOG_WARN("bf16: {}; matrix products run in fp32 instead",
                    cpu ? fmt::format("oneDNN's ISA is capped at {} (ONEDNN_MAX_CPU_ISA), below "
                                      "AVX512_BF16",
                                      isa_name(dnnl_get_effective_cpu_isa()))
                    : f.capped() ? fmt::format("KILN_CPU_ISA={} caps this CPU below AVX512_BF16",
                                               cpu_isa_name(f.isa))
                                 : std::string("this CPU lacks AVX512_BF16"));
    }
    return has;
  }();
  return native;
}

// The fp32 GEMM library: OpenBLAS by default (measured against oneDNN and BLIS, see
// docs/performance.md "GEMM library": a tie with oneDNN on these shapes, and oneDNN's execute
// allocates on every call where a steady-state step must not); KILN_FP32_GEMM=onednn switches,
// to compare whole training steps.
bool fp32_openblas() {
  static const bool openblas = [] {
    const char* v = std::getenv("KILN_FP32_GEMM");
    if (v == nullptr || std::string_view(v).empty() || std::string_view(v) == "openblas") {
      return true;
    }
    if (std::string_view(v) == "onednn") return false;
    fail("KILN_FP32_GEMM='{}' is not a GEMM library (openblas or onednn)", v);
  }();
  return openblas;
}

void log_isa_once() {
  static std::once_flag once;
  std::call_once(once, [] { KILN_LOG_INFO("gemm: {}", gemm_info()); });
}

struct Key {
  bool ta, tb, accumulate, bf16;
  int M, N, K, lda, ldb, ldc;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    size_t h = (k.ta ? 1u : 0u) | (k.tb ? 2u : 0u) | (k.accumulate ? 4u : 0u) | (k.bf16 ? 8u : 0u);
    for (int v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc}) {
      h ^= std::hash<int>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    }
    return h;
  }
};

struct Entry {
  dnnl::matmul prim;
  memory src, wei, dst, scratch;
  std::vector<uint8_t> scratch_buf;
};

// The primitives of the calling thread (ranks run as threads in some tests; each gets its own
// stream and cache, so no lock on the hot path).
struct ThreadCache {
  dnnl::stream stream{cpu_engine()};
  std::unordered_map<Key, std::unique_ptr<Entry>, KeyHash> entries;
  std::vector<uint16_t> a16, b16;  // bf16 copies of the inputs, grown as needed
  std::vector<float> a32, b32;     // f32 copies of bf16 inputs where bf16 products run in fp32
};

ThreadCache& thread_cache() {
  thread_local ThreadCache cache;
  return cache;
}

Entry& entry_for(ThreadCache& tc, const Key& k) {
  auto it = tc.entries.find(k);
  if (it != tc.entries.end()) return *it->second;
  log_isa_once();
  const auto dt = k.bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  // op(A) (M, K): row-major (M, K) with stride lda, or the transpose of a (K, M) matrix.
  memory::desc src_md({k.M, k.K}, dt, k.ta ? memory::dims{1, k.lda} : memory::dims{k.lda, 1});
  memory::desc wei_md({k.K, k.N}, dt, k.tb ? memory::dims{1, k.ldb} : memory::dims{k.ldb, 1});
  memory::desc dst_md({k.M, k.N}, memory::data_type::f32, memory::dims{k.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (k.accumulate) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  dnnl::matmul::primitive_desc pd;
  try {
#if DNNL_VERSION_MAJOR >= 3
    pd = dnnl::matmul::primitive_desc(cpu_engine(), src_md, wei_md, dst_md, attr);
#else  // oneDNN 2.x (Debian 12)
    pd = dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wei_md, dst_md), attr,
                                      cpu_engine());
#endif
  } catch (const dnnl::error& e) {
    fail("oneDNN matmul ({} x {} x {}, {}) unavailable: {}", k.M, k.N, k.K,
         k.bf16 ? "bf16" : "fp32", e.what());
  }
  auto e = std::make_unique<Entry>();
  e->prim = dnnl::matmul(pd);
  e->src = memory(src_md, cpu_engine(), DNNL_MEMORY_NONE);
  e->wei = memory(wei_md, cpu_engine(), DNNL_MEMORY_NONE);
  e->dst = memory(dst_md, cpu_engine(), DNNL_MEMORY_NONE);
  e->scratch_buf.resize(pd.scratchpad_desc().get_size());
  e->scratch = memory(pd.scratchpad_desc(), cpu_engine(),
                      e->scratch_buf.empty() ? DNNL_MEMORY_NONE : e->scratch_buf.data());
  return *tc.entries.emplace(k, std::move(e)).first->second;
}

void execute(ThreadCache& tc, Entry& e, const void* a, const void* b, float* c) {
  // The C API takes the arguments as an array: no map built per call.
  e.src.set_data_handle(const_cast<void*>(a));
  e.wei.set_data_handle(const_cast<void*>(b));
  e.dst.set_data_handle(c);
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, e.src.get()},
                             {DNNL_ARG_WEIGHTS, e.wei.get()},
                             {DNNL_ARG_DST, e.dst.get()},
                             {DNNL_ARG_SCRATCHPAD, e.scratch.get()}};
  const dnnl_status_t st = dnnl_primitive_execute(e.prim.get(), tc.stream.get(), 4, args);
  if (st != dnnl_success) fail("oneDNN matmul failed to execute (status {})", static_cast<int>(st));
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void to_bf16_avx512(
    uint16_t* dst, const float* src, size_t n) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
    _mm512_storeu_si512(dst + i, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo)));
  }
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i))));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256i v =
        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i)));
    _mm256_mask_storeu_epi16(dst + i, m, v);
  }
}

// Round to nearest even in integer arithmetic, exactly as vcvtneps2bf16: NaN kept quiet,
// denormal inputs flushed to signed zero.
void to_bf16_portable(uint16_t* dst, const float* src, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &src[i], sizeof u);
    if ((u & 0x7f800000u) == 0) {
      dst[i] = static_cast<uint16_t>((u >> 16) & 0x8000u);
    } else if ((u & 0x7fffffffu) > 0x7f800000u) {
      dst[i] = static_cast<uint16_t>((u >> 16) | 0x40u);
    } else {
      dst[i] = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
  }
}

void to_bf16_serial(uint16_t* dst, const float* src, size_t n) {
  static const bool avx = cpu_features().avx512_bf16();
  if (avx) {
    to_bf16_avx512(dst, src, n);
  } else {
    to_bf16_portable(dst, src, n);
  }
}

// Converts op(X)'s storage (rows, cols with row stride ld) into a contiguous bf16 buffer.
const uint16_t* convert(std::vector<uint16_t>& buf, const float* x, int rows, int cols, int ld) {
  const size_t n = static_cast<size_t>(rows) * cols;
  if (buf.size() < n) buf.resize(n);
  to_bf16_rows(buf.data(), x, rows, cols, ld);
  return buf.data();
}

void zero_rows(float* C, int M, int N, int ldc) {
  for (int m = 0; m < M; ++m) {
    std::fill(C + static_cast<size_t>(m) * ldc, C + static_cast<size_t>(m) * ldc + N, 0.0f);
  }
}

}  // namespace

bool gemm_bf16_native() { return bf16_native_impl(); }

void to_bf16(uint16_t* dst, const float* src, size_t n) {
  constexpr size_t kBlock = size_t{1} << 16;
  if (n < 2 * kBlock || omp_in_parallel()) {
    to_bf16_serial(dst, src, n);
    return;
  }
  const long blocks = static_cast<long>((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static)
  for (long b = 0; b < blocks; ++b) {
    const size_t i = static_cast<size_t>(b) * kBlock;
    to_bf16_serial(dst + i, src + i, std::min(kBlock, n - i));
  }
}

void to_bf16_rows(uint16_t* dst, const float* src, size_t rows, size_t cols, size_t ld) {
  if (ld == cols) {
    to_bf16(dst, src, rows * cols);
    return;
  }
#pragma omp parallel for schedule(static) if (rows * cols > (size_t{1} << 17))
  for (size_t r = 0; r < rows; ++r) to_bf16_serial(dst + r * cols, src + r * ld, cols);
}

void gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* A, int lda, const float* B,
          int ldb, float beta, float* C, int ldc, GemmPrecision precision) {
  KILN_CHECK(beta == 0.0f || beta == 1.0f, "gemm: beta {} (0 or 1 only)", beta);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (beta == 0.0f) zero_rows(C, M, N, ldc);  // an empty sum
    return;
  }
  if (precision == GemmPrecision::kBf16 && gemm_bf16_native()) {
    ThreadCache& tc = thread_cache();
    // Stored shapes: A is (M, K) or (K, M); B is (K, N) or (N, K).
    const uint16_t* a = trans_a ? convert(tc.a16, A, K, M, lda) : convert(tc.a16, A, M, K, lda);
    const uint16_t* b = trans_b ? convert(tc.b16, B, N, K, ldb) : convert(tc.b16, B, K, N, ldb);
    gemm_bf16(trans_a, trans_b, M, N, K, a, b, beta, C, ldc);
    return;
  }
  if (fp32_openblas()) {
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  ThreadCache& tc = thread_cache();
  const Key k{trans_a, trans_b, beta != 0.0f, false, M, N, K, lda, ldb, ldc};
  execute(tc, entry_for(tc, k), A, B, C);
}

namespace {
// op(X)'s storage (rows, cols) as bf16: as stored, or rounded into `buf`.
const uint16_t* as_bf16(std::vector<uint16_t>& buf, const GemmOperand& x, int rows, int cols) {
  if (x.bf16) return static_cast<const uint16_t*>(x.data);
  return convert(buf, static_cast<const float*>(x.data), rows, cols, x.ld);
}
// The same as f32: as stored, or widened into `buf` (contiguous).
const float* as_f32(std::vector<float>& buf, const GemmOperand& x, int rows, int cols, int* ld) {
  if (!x.bf16) return static_cast<const float*>(x.data);
  const size_t n = static_cast<size_t>(rows) * cols;
  if (buf.size() < n) buf.resize(n);
  const auto* h = static_cast<const uint16_t*>(x.data);
  for (size_t i = 0; i < n; ++i) buf[i] = bf16_to_float(h[i]);
  *ld = cols;
  return buf.data();
}
}  // namespace

void gemm_mixed(bool trans_a, bool trans_b, int M, int N, int K, GemmOperand A, GemmOperand B,
                float beta, float* C, int ldc, GemmPrecision precision) {
  KILN_CHECK(precision == GemmPrecision::kBf16 || (!A.bf16 && !B.bf16),
             "gemm_mixed: a bf16 operand in an fp32 product");
  const int ar = trans_a ? K : M, ac = trans_a ? M : K, br = trans_b ? N : K,
            bc = trans_b ? K : N;  // stored shapes
  if (M == 0 || N == 0 || K == 0 || !(precision == GemmPrecision::kBf16 && gemm_bf16_native())) {
    ThreadCache& tc = thread_cache();
    int lda = A.ld, ldb = B.ld;
    const float* a = as_f32(tc.a32, A, ar, ac, &lda);
    const float* b = as_f32(tc.b32, B, br, bc, &ldb);
    gemm(trans_a, trans_b, M, N, K, a, lda, b, ldb, beta, C, ldc, precision);
    return;
  }
  ThreadCache& tc = thread_cache();
  const uint16_t* a = as_bf16(tc.a16, A, ar, ac);
  const uint16_t* b = as_bf16(tc.b16, B, br, bc);
  gemm_bf16(trans_a, trans_b, M, N, K, a, b, beta, C, ldc);
}

void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const uint16_t* A,
               const uint16_t* B, float beta, float* C, int ldc) {
  KILN_CHECK(beta == 0.0f || beta == 1.0f, "gemm_bf16: beta {} (0 or 1 only)", beta);
  if (M == 0 || N == 0 || K == 0) {
    if (K == 0 && beta == 0.0f) zero_rows(C, M, N, ldc);
    return;
  }
  ThreadCache& tc = thread_cache();
  const Key k{trans_a, trans_b, beta != 0.0f, true, M, N, K, trans_a ? M : K, trans_b ? K : N, ldc};
  execute(tc, entry_for(tc, k), A, B, C);
}

size_t gemm_cached_primitives() { return thread_cache().entries.size(); }

std::string gemm_info() {
  cap_onednn_isa();
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("fp32 GEMMs {}; oneDNN {}.{}.{} (OpenMP, {} threads), ISA {}, bf16 GEMMs {}",
                     fp32_openblas() ? "OpenBLAS" : "oneDNN", v->major, v->minor, v->patch,
                     omp_get_max_threads(), isa_name(dnnl_get_effective_cpu_isa()),
                     bf16_native_impl() ? "native (AVX512_BF16)" : "in fp32 (no AVX512_BF16)");
}

size_t cpu_gemm_pack_bytes(size_t rows, size_t cols) { return rows * cols * sizeof(float); }

}  // namespace kiln
