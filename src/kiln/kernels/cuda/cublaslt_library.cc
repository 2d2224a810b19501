#include "kiln/kernels/cuda/cublaslt_library.h"

#include <dlfcn.h>

#include <string>

#include "kiln/base/error.h"

namespace kiln {

namespace {

CublasLtLibrary open_cublaslt() {
  const std::string so = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) fail("cuBLASLt: cannot open {}: {}", so, dlerror());
  CublasLtLibrary lib;
#define KILN_CUBLASLT_LOAD(name)                                         \
  lib.name = reinterpret_cast<decltype(lib.name)>(dlsym(handle, #name)); \
  if (lib.name == nullptr) fail("cuBLASLt: {} has no function {}", so, #name);
  KILN_CUBLASLT_FUNCTIONS(KILN_CUBLASLT_LOAD)
#undef KILN_CUBLASLT_LOAD
  return lib;  // the handle stays open for the process's life
}

}  // namespace

const CublasLtLibrary& cublaslt() {
  static const CublasLtLibrary lib = open_cublaslt();  // thread-safe, once; retried after a throw
  return lib;
}

}  // namespace kiln
