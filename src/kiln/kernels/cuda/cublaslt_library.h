// cuBLASLt, opened at run time on first use (dlopen of libcublasLt.so.<major>) instead of linked:
// loading the library costs about 210 MiB of resident memory and 0.1 s, which every kiln command
// (and every CPU-only run of a CUDA build) would otherwise pay at start. Its types and constants
// come from <cublasLt.h> as usual; its functions are called through cublaslt():
//   KILN_CUBLAS_CHECK(cublaslt().cublasLtMatmulDescCreate(&desc, compute, scale_type));
#pragma once

#include <cublasLt.h>

namespace kiln {

// Every cuBLASLt function kiln calls: X(name).
#define KILN_CUBLASLT_FUNCTIONS(X)        \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtGetVersion)                   \
  X(cublasLtGetStatusString)              \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulAlgoGetHeuristic)       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescGetAttribute)       \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatrixLayoutGetAttribute)

struct CublasLtLibrary {
#define KILN_CUBLASLT_POINTER(name) decltype(&::name) name = nullptr;
  KILN_CUBLASLT_FUNCTIONS(KILN_CUBLASLT_POINTER)
#undef KILN_CUBLASLT_POINTER
};

// The library's entry points, opened once per process on the first call (as the dynamic linker
// would have, once per process). kiln::Error naming the library and the loader's message when it
// cannot be opened or lacks a function.
const CublasLtLibrary& cublaslt();

}  // namespace kiln
