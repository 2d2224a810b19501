#include "kiln/kernels/cuda/cublas_check.h"

#include "kiln/base/error.h"

namespace kiln {

void cublas_failed(cublasStatus_t s, const char* call, const char* file, int line) {
  fail("cuBLASLt: {} failed: {} (status {}) at {}:{}", call, cublaslt().cublasLtGetStatusString(s),
       static_cast<int>(s), file, line);
}

}  // namespace kiln
