// Errors of the CUDA runtime, cuBLASLt and NCCL as kiln::Error: KILN_CUDA_CHECK(cudaMalloc(...))
// throws with the call, the runtime's message and the source line.
#pragma once

#include <cuda_runtime_api.h>

namespace kiln {

[[noreturn]] void cuda_failed(cudaError_t e, const char* call, const char* file, int line);

}  // namespace kiln

#define KILN_CUDA_CHECK(call)                                                    \
  do {                                                                           \
    const cudaError_t kiln_cuda_err_ = (call);                                   \
    if (kiln_cuda_err_ != cudaSuccess) {                                         \
      ::kiln::cuda_failed(kiln_cuda_err_, #call, __FILE__, __LINE__);            \
    }                                                                            \
  } while (0)
