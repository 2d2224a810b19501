// Errors of cuBLASLt as kiln::Error: KILN_CUBLAS_CHECK(cublasLtMatmul(...)) throws with the call,
// the library's status string and the source line.
#pragma once

#include "kiln/kernels/cuda/cublaslt_library.h"

namespace kiln {

[[noreturn]] void cublas_failed(cublasStatus_t s, const char* call, const char* file, int line);

}  // namespace kiln

#define KILN_CUBLAS_CHECK(call)                                              \
  do {                                                                       \
    const cublasStatus_t kiln_cublas_status_ = (call);                       \
    if (kiln_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                      \
      ::kiln::cublas_failed(kiln_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                        \
  } while (0)
