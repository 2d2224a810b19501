// The pointwise kernels' one host-side error (dtype_dispatch.h), here so nvcc never compiles fmt.
#include "kiln/base/error.h"
#include "kiln/kernels/cuda/dtype_dispatch.h"

namespace kiln::cuda {

void unsupported_dtype(const char* op, DType t) {
  fail("CUDA {}: {} data is not supported (F32 or BF16)", op, dtype_name(t));
}

}  // namespace kiln::cuda
