#include "kiln/kernels/device/counting_backend.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

#include "kiln/base/error.h"
#include "kiln/kernels/cpu/cpu_backend.h"  // SyncStream
#include "kiln/kernels/cpu/scratch_sizes.h"
#include "kiln/kernels/cuda/gemm_spec.h"
#include "kiln/kernels/cuda/linear_gemms.h"
#include "kiln/kernels/cuda/scratch_sizes.h"

namespace kiln {

struct CountingBackend::Books {
  std::mutex mu;
  uintptr_t next = uintptr_t{1} << 44;  // addresses handed out, never backed by memory
  std::unordered_map<const void*, size_t> device, host;
  size_t device_live = 0, device_peak = 0, host_live = 0, host_peak = 0, both_peak = 0;
  std::map<std::string, std::pair<void*, size_t>> scratch;  // name -> (address, bytes)

  void note() {
    device_peak = std::max(device_peak, device_live);
    host_peak = std::max(host_peak, host_live);
    both_peak = std::max(both_peak, device_live + host_live);
  }
  // Device memory at `p` (caller holds mu).
  void add_device(void* p, size_t bytes) {
    device[p] = bytes;
    device_live += bytes;
    note();
  }
  // false where `p` is not device memory of these books.
  bool remove_device(void* p) {
    auto it = device.find(p);
    if (it == device.end()) return false;
    device_live -= it->second;
    device.erase(it);
    return true;
  }
};

CountingBackend::CountingBackend(Device imitates, ComputeDType dtype, int cpu_threads)
    : device_(imitates),
      dtype_(dtype),
      cpu_threads_(cpu_threads),
      books_(std::make_unique<Books>()),
      stream_(std::make_unique<SyncStream>()) {}

CountingBackend::~CountingBackend() = default;

std::string_view CountingBackend::name() const {
  if (on_cpu()) return bf16() ? "counting-cpu-bf16" : "counting-cpu";
  return bf16() ? "counting-cuda-bf16" : "counting-cuda";
}

DType CountingBackend::activation_dtype() const {
  return on_cpu() ? cpu_activation_dtype(bf16()) : cuda::activation_dtype(bf16());
}

void* CountingBackend::alloc(size_t bytes) const {
  if (bytes == 0) return nullptr;
  Books& b = *books_;
  std::lock_guard lock(b.mu);
  void* p = reinterpret_cast<void*>(b.next);
  b.next += (bytes + 255) / 256 * 256;  // cudaMalloc's alignment, above the seam's 64 bytes
  b.add_device(p, bytes);
  return p;
}

void CountingBackend::free(void* p) const {
  if (p == nullptr) return;
  std::lock_guard lock(books_->mu);
  KILN_CHECK(books_->remove_device(p), "counting backend: free of {} not allocated here", p);
}

void* CountingBackend::alloc_pinned(size_t bytes) const {
  if (bytes == 0) return nullptr;
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p == nullptr) throw std::bad_alloc();
  if (on_cpu()) {  // the CPU's pinned memory is its device memory (CpuBackend::alloc_pinned)
    std::lock_guard lock(books_->mu);
    books_->add_device(p, bytes);
  }
  return p;
}

void CountingBackend::free_pinned(void* p) const {
  if (p == nullptr) return;
  if (on_cpu()) {
    std::lock_guard lock(books_->mu);
    books_->remove_device(p);
  }
  std::free(p);
}

DeviceMemoryStats CountingBackend::memory_stats() const {
  std::lock_guard lock(books_->mu);
  return {books_->device_live, books_->device_peak};
}

void CountingBackend::host_allocated(const void* key, size_t bytes) const {
  Books& b = *books_;
  std::lock_guard lock(b.mu);
  auto it = b.host.find(key);
  if (it != b.host.end()) b.host_live -= it->second;
  b.host[key] = bytes;
  b.host_live += bytes;
  b.note();
}

void CountingBackend::host_freed(const void* key) const {
  Books& b = *books_;
  std::lock_guard lock(b.mu);
  auto it = b.host.find(key);
  if (it == b.host.end()) return;
  b.host_live -= it->second;
  b.host.erase(it);
}

DeviceMemoryStats CountingBackend::host_stats() const {
  std::lock_guard lock(books_->mu);
  return {books_->host_live, books_->host_peak};
}

size_t CountingBackend::resident_peak() const {
  std::lock_guard lock(books_->mu);
  return books_->both_peak;
}

std::map<std::string, size_t> CountingBackend::scratch() const {
  std::lock_guard lock(books_->mu);
  std::map<std::string, size_t> out;
  for (const auto& [name, s] : books_->scratch) out[name] = s.second;
  return out;
}

size_t CountingBackend::scratch_bytes() const {
  size_t n = 0;
  for (const auto& [name, bytes] : scratch()) n += bytes;
  return n;
}

void CountingBackend::copy_to_host(void* host_dst, const void*, size_t bytes) const {
  if (bytes) std::memset(host_dst, 0, bytes);
}

Stream& CountingBackend::compute_stream() const { return *stream_; }

std::unique_ptr<Stream> CountingBackend::create_stream() const {
  return std::make_unique<SyncStream>();
}

// A scratch buffer grows as the imitated backend's does: CpuScratch allocates the request
// exactly, CUDA's DeviceScratch rounds it up to its granule; the old buffer is freed first.
void CountingBackend::grow(const char* name, size_t bytes) const {
  if (bytes == 0) return;
  void* old = nullptr;
  {
    std::lock_guard lock(books_->mu);
    auto it = books_->scratch.find(name);
    if (it != books_->scratch.end()) {
      if (bytes <= it->second.second) return;
      old = it->second.first;
    }
  }
  free(old);
  const size_t capacity = on_cpu() ? bytes : cuda::scratch_capacity(bytes);
  void* p = alloc(capacity);
  std::lock_guard lock(books_->mu);
  books_->scratch[name] = {p, capacity};
}

// ---- The ops that keep scratch ----

void CountingBackend::cuda_operand(ConstDevPtr p, size_t n, const char* scratch) const {
  const DType inputs = bf16() ? DType::BF16 : DType::F32;
  if (!cuda::reads_in_place(p.dtype, inputs)) grow(scratch, n * sizeof(uint16_t));
}

void CountingBackend::cuda_gemm() const { grow("cublaslt.workspace", cuda::kLtWorkspaceBytes); }

// CUDA (cuda_matmul.cc): x into cast_a, w into cast_b, a bias that is not fp32 and 16-byte
// aligned into bias_f32; the CPU keeps nothing of its own for a forward product.
void CountingBackend::matmul_forward(float*, ConstDevPtr x, ConstDevPtr w, ConstDevPtr b, int N,
                                     int IC, int OC) const {
  if (on_cpu() || N == 0) return;
  cuda_operand(x, static_cast<size_t>(N) * IC, "cuda.cast_a");
  cuda_operand(w, static_cast<size_t>(OC) * IC, "cuda.cast_b");
  if (!b.null() &&
      (b.dtype != DType::F32 || cuda::pointer_alignment(b.data) < cuda::kLtBiasAlignment)) {
    grow("cuda.bias_f32", static_cast<size_t>(OC) * sizeof(float));
  }
  cuda_gemm();
}

// CUDA: dout into cast_a, w into cast_b for dx, x into cast_c for dw. CPU: the GEMM library
// packs dout for dw.
void CountingBackend::matmul_backward(float* dx, float* dw, float*, const float* dout,
                                      ConstDevPtr x, ConstDevPtr w, int N, int IC, int OC,
                                      bool) const {
  if (N == 0) return;
  if (on_cpu()) {
    if (dw != nullptr) {
      grow("cpu.gemm_library",
           cpu_gemm_pack_bytes(static_cast<size_t>(N), static_cast<size_t>(OC)) +
               kCpuLibraryPagesBytes);
    }
    return;
  }
  cuda_operand(dout, static_cast<size_t>(N) * OC, "cuda.cast_a");
  if (dx != nullptr) cuda_operand(w, static_cast<size_t>(OC) * IC, "cuda.cast_b");
  if (dw != nullptr) cuda_operand(x, static_cast<size_t>(N) * IC, "cuda.cast_c");
  cuda_gemm();
}

// CPU: the team's per-thread heads and, in backward, the per-query-head dK and dV (attention.cc).
// CUDA: the backward's scratch.
void CountingBackend::attention_forward(float*, float*, const float*, const float*, const float*,
                                        const int32_t*, const AttnShape& s) const {
  if (!on_cpu()) return;
  grow("cpu.attention_team",
       cpu_attention_scratch_bytes(s.B, s.T, s.H, s.D, cpu_threads_, false).team);
}

void CountingBackend::attention_backward(float*, float*, float*, const float*, const float*,
                                         const float*, const float*, const float*, const float*,
                                         const int32_t*, const AttnShape& s) const {
  if (!on_cpu()) {
    grow("cuda.attention", cuda::attention_backward_scratch_bytes(s));
    return;
  }
  const CpuAttentionScratchBytes n =
      cpu_attention_scratch_bytes(s.B, s.T, s.H, s.D, cpu_threads_, true);
  grow("cpu.attention_team", n.team);
  grow("cpu.attention_heads", n.heads);
}

void CountingBackend::cross_entropy(double*, float* dx, float* dw, const float*, ConstDevPtr w,
                                    const int32_t*, int N, int targeted, int C, int V,
                                    float) const {
  KILN_CHECK(targeted >= 0 && targeted <= N, "cross_entropy: {} targeted rows of {}", targeted, N);
  const bool grad = dx != nullptr;
  if (on_cpu()) {
    const bool bf16_products = cpu_activation_dtype(bf16()) == DType::BF16;
    const CpuCeScratchBytes n =
        cpu_ce_scratch_bytes(N, targeted, C, V, bf16_products, grad, w.dtype);
    grow("cross_entropy.rows", n.rows);
    grow("cross_entropy.row_loss", n.row_loss);
    grow("cross_entropy.xc", n.xc);
    grow("cross_entropy.logits", n.logits);
    grow("cross_entropy.dxc", n.dxc);
    grow("cross_entropy.xc16", n.xc16);
    grow("cross_entropy.dlogits16", n.dlogits16);
    grow("cross_entropy.w16", n.w16);
    grow("cross_entropy.w32", n.w32);
    // dw += dlogits^T xc: the library packs the chunk's gradient (no dw: a frozen head).
    if (dw != nullptr && grad && targeted > 0) {
      grow("cpu.gemm_library",
           cpu_gemm_pack_bytes(ce_chunk_rows(targeted, V), V) + kCpuLibraryPagesBytes);
    }
    return;
  }
  const cuda::CePlan plan = cuda::ce_plan(targeted, V);
  const cuda::CeScratchBytes n =
      cuda::ce_scratch_bytes(plan, C, V, bf16(), grad, w.dtype == DType::F32);
  grow("cross_entropy.rows", n.rows);
  grow("cross_entropy.row_loss", n.row_loss);
  grow("cross_entropy.xr", n.xr);
  grow("cross_entropy.logits", n.logits);
  grow("cross_entropy.dlogits_bf16", n.dlogits_bf16);
  grow("cross_entropy.dxr", n.dxr);
  grow("cross_entropy.w_bf16", n.w_bf16);
  if (plan.chunks > 0) cuda_gemm();
}

}  // namespace kiln
