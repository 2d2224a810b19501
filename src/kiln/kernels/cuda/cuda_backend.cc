// CudaBackend: memory, copies, streams, and the ops that forward to kiln::cuda kernels.
// Matrix products and the cross-entropy are cuda_matmul.cc.
#include "kiln/kernels/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kiln/base/error.h"
#include "kiln/kernels/cuda/attention_ops.h"
#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/gpu_peak_flops.h"
#include "kiln/kernels/cuda/pointwise_ops.h"

namespace kiln {

namespace {
// Makes `device` current and prepares its stream-ordered pool: whether it has one.
bool use_device_and_pool(int device) {
  KILN_CUDA_CHECK(cudaSetDevice(device));
  return cuda::prepare_stream_pool(device);
}
}  // namespace

CudaBackend::CudaBackend(ComputeDType dtype, int device)
    : bf16_(dtype == ComputeDType::kBf16),
      device_(device),
      stream_scratch_(*this, memory_, use_device_and_pool(device)) {
  stream_ = std::make_unique<CudaStream>();
}

CudaBackend::~CudaBackend() {
  // The scratch buffers are freed after this; enqueued work may still read them.
  if (stream_ != nullptr) cudaStreamSynchronize(stream_->native());
}

bool CudaBackend::supports(ComputeDType d) const {
  return d == ComputeDType::kFp32 || d == ComputeDType::kBf16;
}

// ---- Memory and copies ----

void* CudaBackend::alloc(size_t bytes) const {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  // cudaMalloc returns 256-byte aligned memory (the seam asks for 64).
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is not sticky: clear it for the next call
    fail("CUDA: cudaMalloc of {} bytes on GPU {} failed: {}", bytes, device_,
         cudaGetErrorString(e));
  }
  memory_.allocated(p, bytes);
  return p;
}

void CudaBackend::free(void* p) const {
  if (p == nullptr) return;
  memory_.freed(p);
  KILN_CUDA_CHECK(cudaFree(p));
}

PeakFlops CudaBackend::peak() const {
  cudaDeviceProp prop{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  int khz = 0;  // the boost clock (cudaDeviceProp no longer carries it)
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device_));
  return gpu_peak_flops(prop.name, prop.major, prop.minor, prop.multiProcessorCount, khz, bf16_);
}

double CudaBackend::peak_flops() const { return peak().flops; }

void* CudaBackend::alloc_pinned(size_t bytes) const {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  KILN_CUDA_CHECK(cudaMallocHost(&p, bytes));
  return p;
}

void CudaBackend::free_pinned(void* p) const {
  if (p != nullptr) KILN_CUDA_CHECK(cudaFreeHost(p));
}

void CudaBackend::copy_to_device(void* dst, const void* host_src, size_t bytes) const {
  if (bytes == 0) return;
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, native()));
}

void CudaBackend::copy_to_host(void* host_dst, const void* src, size_t bytes) const {
  if (bytes == 0) return;
  KILN_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, native()));
}

void CudaBackend::copy_on_device(void* dst, const void* src, size_t bytes) const {
  if (bytes == 0) return;
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, native()));
}

void CudaBackend::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                          size_t width, size_t rows) const {
  if (width == 0 || rows == 0) return;
  KILN_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows,
                                    cudaMemcpyDeviceToDevice, native()));
}

void CudaBackend::fill_zero(void* dst, size_t bytes) const {
  if (bytes == 0) return;
  KILN_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, native()));
}

std::unique_ptr<Stream> CudaBackend::create_stream() const {
  KILN_CUDA_CHECK(cudaSetDevice(device_));
  return std::make_unique<CudaStream>();
}

// ---- Ops forwarded to the kernels of the same name ----

void CudaBackend::embedding_forward(float* out, const int32_t* ids, ConstDevPtr wte, int N,
                                    int C) const {
  cuda::embedding_forward(out, ids, wte, N, C, native());
}
void CudaBackend::embedding_forward_part(float* out, const int32_t* ids, const float* part,
                                         size_t part_begin, size_t part_len, int N, int C,
                                         bool round_bf16) const {
  cuda::embedding_forward_part(out, ids, part, part_begin, part_len, N, C, round_bf16, native());
}
void CudaBackend::embedding_backward(float* dwte, const float* dout, const int32_t* ids, int N,
                                     int C) const {
  cuda::embedding_backward(dwte, dout, ids, 0, SIZE_MAX, N, C, native());
}
void CudaBackend::embedding_backward_part(float* dpart, const float* dout, const int32_t* ids,
                                          size_t part_begin, size_t part_len, int N, int C) const {
  cuda::embedding_backward(dpart, dout, ids, part_begin, part_len, N, C, native());
}
void CudaBackend::rmsnorm_forward(DevPtr out, float* rstd, const float* x, ConstDevPtr w, int N,
                                  int C, float eps) const {
  cuda::rmsnorm_forward(out, rstd, x, w, N, C, eps, native());
}
void CudaBackend::add_rmsnorm_forward(float* sum, DevPtr out, float* rstd, const float* a,
                                      const float* b, ConstDevPtr w, int N, int C,
                                      float eps) const {
  cuda::add_rmsnorm_forward(sum, out, rstd, a, b, w, N, C, eps, native());
}
void CudaBackend::rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x,
                                   ConstDevPtr w, const float* rstd, int N, int C,
                                   bool accumulate) const {
  cuda::rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C, accumulate, native(), stream_scratch_);
}
void CudaBackend::rope_forward(float* x, const int32_t* pos, const float* cos_table,
                               const float* sin_table, int N, int heads, int D) const {
  cuda::rope_forward(x, pos, cos_table, sin_table, N, heads, D, native());
}
void CudaBackend::rope_backward(float* dx, const int32_t* pos, const float* cos_table,
                                const float* sin_table, int N, int heads, int D) const {
  cuda::rope_backward(dx, pos, cos_table, sin_table, N, heads, D, native());
}
void CudaBackend::swiglu_forward(DevPtr h, const float* gate_up, int N, int I) const {
  cuda::swiglu_forward(h, gate_up, N, I, native());
}
void CudaBackend::swiglu_backward(float* dgate_up, const float* dh, const float* gate_up, int N,
                                  int I) const {
  cuda::swiglu_backward(dgate_up, dh, gate_up, N, I, native());
}
void CudaBackend::add(float* out, const float* a, const float* b, size_t n) const {
  cuda::add(out, a, b, n, native());
}
void CudaBackend::dropout(DevPtr out, ConstDevPtr x, size_t n, float p, uint64_t seed,
                          uint64_t offset) const {
  cuda::dropout(out, x, n, p, seed, offset, native());
}
void CudaBackend::cast_to_bf16(void* dst, const float* src, size_t n) const {
  cuda::cast_f32_to_bf16(static_cast<uint16_t*>(dst), src, n, native());
}
void CudaBackend::cast_from_bf16(float* dst, const void* src, size_t n) const {
  cuda::cast_bf16_to_f32(dst, static_cast<const uint16_t*>(src), n, native());
}
void CudaBackend::sum_squares(double* sum, const float* x, size_t n) const {
  cuda::sum_squares(sum, x, n, native(), stream_scratch_);
}
void CudaBackend::scale(float* x, float a, size_t n) const { cuda::scale(x, a, n, native()); }

void CudaBackend::scale_rows(float* x, const float* row_scale, int n, int C) const {
  cuda::scale_rows(x, row_scale, n, C, native());
}
void CudaBackend::clip_by_norm(float* x, size_t n, const double* sq_norm, double max_norm) const {
  cuda::clip_by_norm(x, n, sq_norm, max_norm, native());
}
void CudaBackend::adamw_step(float* p, float* m, float* v, const float* g, size_t n,
                             const AdamWStep& s) const {
  cuda::adamw_step(p, m, v, g, n, s, native());
}
void CudaBackend::sgd_step(float* p, float* m, const float* g, size_t n, const SgdStep& s) const {
  cuda::sgd_step(p, m, g, n, s, native());
}

// ---- Attention: the flash kernels under bf16 where they take the shape, else the reference ----

void CudaBackend::attention_forward(float* y, float* lse, const float* q, const float* k,
                                    const float* v, const int32_t* doc_start,
                                    const AttnShape& s) const {
  if (bf16_ && cuda::flash_attention_supports(s)) {
    cuda::flash_attention_forward(y, lse, q, k, v, doc_start, s, native());
  } else {
    cuda::reference_attention_forward(y, lse, q, k, v, doc_start, s, native());
  }
}

void CudaBackend::attention_backward(float* dq, float* dk, float* dv, const float* dy,
                                     const float* q, const float* k, const float* v, const float* y,
                                     const float* lse, const int32_t* doc_start,
                                     const AttnShape& s) const {
  void* scratch = attention_scratch_.get(cuda::attention_backward_scratch_bytes(s));
  if (bf16_ && cuda::flash_attention_supports(s)) {
    cuda::flash_attention_backward(dq, dk, dv, dy, q, k, v, y, lse, doc_start, s, scratch,
                                   native());
  } else {
    cuda::reference_attention_backward(dq, dk, dv, dy, q, k, v, y, lse, doc_start, s, scratch,
                                       native());
  }
}

void CudaBackend::attention_decode(float* y, const float* q, const float* k_cache,
                                   const float* v_cache, int n_q, int past, int H, int KV,
                                   int D) const {
  cuda::attention_decode(y, q, k_cache, v_cache, n_q, past, H, KV, D, native());
}

}  // namespace kiln
