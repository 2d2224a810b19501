// The harness of the backend parity suite (backend_parity_test.cc, in the style of ggml's
// test-backend-ops): the backends under test, each obtained through make_backend() only; device
// memory handled through the backend's own alloc and copies (never touched by the host); and the
// comparison of one op's outputs on a backend against the CPU reference (CpuBackend, fp32).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/base/process_lifetime.h"
#include "kiln/kernels/cpu/cpu_backend.h"
#include "kiln/kernels/cpu/gemm.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/kernels/ops.h"

namespace kiln::parity {

// The backends under test: the CPU's stream emulation and CUDA, each in fp32 and bf16.
enum class Target { kAsyncFp32, kAsyncBf16, kCudaFp32, kCudaBf16 };

inline std::string target_name(Target t) {
  switch (t) {
    case Target::kAsyncFp32:
      return "AsyncCpuFp32";
    case Target::kAsyncBf16:
      return "AsyncCpuBf16";
    case Target::kCudaFp32:
      return "CudaFp32";
    case Target::kCudaBf16:
      return "CudaBf16";
  }
  return "?";
}

// Which shapes a case runs: all of them (the suite), or only the tiny ones (the Tiny/ instances:
// the CUDA cases the GPU check runs under compute-sanitizer, whose slowdown the Qwen-sized
// shapes would not fit).
enum class Sizes { kAll, kTiny };
struct ParityParam {
  Target target;
  Sizes sizes;
};
inline std::string param_name(const ::testing::TestParamInfo<ParityParam>& info) {
  return target_name(info.param.target);
}
// How gtest (and so ctest's test names) shows a case's parameter.
inline void PrintTo(const ParityParam& p, std::ostream* os) {
  *os << target_name(p.target) << (p.sizes == Sizes::kTiny ? ", tiny sizes" : ", all sizes");
}

// A backend under test, or why there is none (then its cases skip with that reason).
struct TargetBackend {
  std::unique_ptr<Backend> backend;
  std::string missing;
};

// make_backend(kCpu) with KILN_ASYNC_CPU=1 for this construction only (the variable is restored).
inline std::unique_ptr<Backend> make_async_cpu(ComputeDType dtype) {
  const char* old = std::getenv("KILN_ASYNC_CPU");
  const std::string saved = old != nullptr ? old : "";
  setenv("KILN_ASYNC_CPU", "1", 1);
  std::unique_ptr<Backend> be = make_backend(DeviceRequest::kCpu, dtype);
  if (old != nullptr) {
    setenv("KILN_ASYNC_CPU", saved.c_str(), 1);
  } else {
    unsetenv("KILN_ASYNC_CPU");
  }
  return be;
}

inline TargetBackend make_target(Target t) {
  const ComputeDType dtype =
      t == Target::kAsyncBf16 || t == Target::kCudaBf16 ? ComputeDType::kBf16 : ComputeDType::kFp32;
  TargetBackend out;
  if (t == Target::kAsyncFp32 || t == Target::kAsyncBf16) {
    out.backend = make_async_cpu(dtype);
    return out;
  }
  try {
    out.backend = make_backend(DeviceRequest::kCuda, dtype);
  } catch (const std::exception& e) {
    out.missing = std::string("no CUDA backend: ") + e.what();
  }
  return out;
}

// The backends of every target, made once per test process (a CUDA context is costly) and never
// destroyed (process_lifetime.h): a CUDA backend's destructor frees device memory and gives back
// its cuBLASLt handle, which must not happen from a static destructor, after the CUDA runtime and
// cuBLASLt may have cleaned up (a crash after "[  PASSED  ]" would read as a failure).
inline const TargetBackend& target_backend(Target t) {
  using All = std::array<TargetBackend, 4>;
  const All& all = process_lifetime<All>([] {
    return All{make_target(Target::kAsyncFp32), make_target(Target::kAsyncBf16),
               make_target(Target::kCudaFp32), make_target(Target::kCudaBf16)};
  });
  return all[static_cast<size_t>(t)];
}

// The reference: the synchronous CPU backend in fp32.
inline const Backend& reference() {
  static const CpuBackend cpu(/*bf16=*/false);
  return cpu;
}

// Device memory of one backend for one op case: uploads stage a host copy the case keeps until
// the end (the backend may copy later, on its stream), downloads wait for the stream, and
// everything is freed when the scope ends.
class DeviceScope {
 public:
  explicit DeviceScope(const Backend& be) : be_(be) {}
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  ~DeviceScope() {
    be_.synchronize();
    for (void* p : allocations_) be_.free(p);
  }

  // n zero-filled elements of T (at least one, so a pointer is never null).
  template <typename T>
  T* zeros(size_t n) {
    const size_t bytes = std::max<size_t>(n, 1) * sizeof(T);
    void* p = be_.alloc(bytes);
    allocations_.push_back(p);
    be_.fill_zero(p, bytes);
    return static_cast<T*>(p);
  }
  template <typename T>
  T* upload(const std::vector<T>& host) {
    T* d = zeros<T>(host.size());
    staged_.emplace_back(reinterpret_cast<const unsigned char*>(host.data()),
                         reinterpret_cast<const unsigned char*>(host.data() + host.size()));
    if (!host.empty()) be_.copy_to_device(d, staged_.back().data(), host.size() * sizeof(T));
    return d;
  }
  // Floats stored as `dtype` (F32, or BF16 rounded to nearest even).
  DevPtr upload_as(const std::vector<float>& host, DType dtype) {
    if (dtype == DType::F32) return upload(host);
    std::vector<uint16_t> h16(host.size());
    to_bf16(h16.data(), host.data(), host.size());
    return {upload(h16), DType::BF16};
  }
  DevPtr zeros_as(size_t n, DType dtype) {
    if (dtype == DType::F32) return zeros<float>(n);
    return {zeros<uint16_t>(n), DType::BF16};
  }
  // n elements read back to the host, widened to double (BF16 data as its bf16 values).
  std::vector<double> download(ConstDevPtr p, size_t n) {
    std::vector<double> out(n);
    if (p.dtype == DType::BF16) {
      std::vector<uint16_t> h(n);
      read(h.data(), p.data, n * sizeof(uint16_t));
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(h[i]);
    } else {
      std::vector<float> h(n);
      read(h.data(), p.data, n * sizeof(float));
      for (size_t i = 0; i < n; ++i) out[i] = h[i];
    }
    return out;
  }
  std::vector<double> download(const double* p, size_t n) {
    std::vector<double> out(n);
    read(out.data(), p, n * sizeof(double));
    return out;
  }

 private:
  void read(void* host, const void* dev, size_t bytes) {
    if (bytes > 0) be_.copy_to_host(host, dev, bytes);
    be_.synchronize();
  }
  const Backend& be_;
  std::vector<void*> allocations_;
  std::vector<std::vector<unsigned char>> staged_;
};

// An op's outputs, named, widened to double.
using Outputs = std::vector<std::pair<std::string, std::vector<double>>>;

// Allowed error, as max |got - want| / max |want| over an output: on an fp32 backend and on a
// bf16 (mixed precision) one.
struct Tolerance {
  double fp32;
  double bf16;
};
// Elementwise fp32 math in another order or with fused multiply-adds.
inline constexpr Tolerance kExact{1e-5, 1e-5};
// An output stored in bf16 (one rounding of a value that may differ in its last fp32 bits).
inline constexpr Tolerance kBf16Stored{8e-3, 8e-3};
// Matrix products and what is built on them: fp32 sums in another order, or bf16 inputs.
inline constexpr Tolerance kProduct{1e-4, 3e-2};

// max |got - want| / max |want| over an output (of equal sizes), where it is worst, and max |want|.
struct RelError {
  double rel = 0;
  size_t worst = 0;
  double max_want = 0;
};
inline RelError rel_error(const std::vector<double>& got, const std::vector<double>& want) {
  RelError e;
  double max_err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    e.max_want = std::max(e.max_want, std::fabs(want[i]));
    const double err = std::fabs(got[i] - want[i]);
    if (err > max_err) {
      max_err = err;
      e.worst = i;
    }
  }
  e.rel = max_err / std::max(e.max_want, 1e-30);
  return e;
}

// Compares one output: every value finite, the normalised max error within tol.
inline void expect_close(const std::string& what, const std::vector<double>& got,
                         const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "] = " << got[i];
  }
  const RelError e = rel_error(got, want);
  EXPECT_LE(e.rel, tol) << what << ": worst at [" << e.worst << "]: " << got[e.worst] << " vs "
                        << want[e.worst] << " (max |want| " << e.max_want << ")";
}

// Runs `op` on the reference and on `be` and compares every output it returns.
inline void expect_parity(const Backend& be, const std::string& what, Tolerance tol,
                          const std::function<Outputs(const Backend&)>& op) {
  const Outputs want = op(reference());
  const Outputs got = op(be);
  ASSERT_EQ(got.size(), want.size()) << what;
  const double t = be.compute_dtype() == ComputeDType::kBf16 ? tol.bf16 : tol.fp32;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first);
    expect_close(what + " " + want[i].first, got[i].second, want[i].second, t);
  }
}

// Host floats of mean `offset` and standard deviation `scale` (uniform, from a counter hash:
// cheap for the 10M-element weights of the 1.5B shapes), rounded to bf16 values so that storing
// them in F32 or in BF16 gives the same numbers on every backend.
inline std::vector<float> random_values(size_t n, uint32_t seed, float scale = 1.0f,
                                        float offset = 0.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t z = (static_cast<uint64_t>(seed) << 40) + i + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;  // splitmix64's finaliser
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * 0x1p-24f;  // [0, 1)
    v[i] = offset + scale * 3.4641016f * (u - 0.5f);         // variance scale^2
  }
  std::vector<uint16_t> h(n);
  to_bf16(h.data(), v.data(), n);
  for (size_t i = 0; i < n; ++i) v[i] = bf16_to_float(h[i]);
  return v;
}

}  // namespace kiln::parity
