// Kernel launches and dynamic shared memory, written once for nvcc and for the CPU emulator
// (tests/kernels/emul), which compiles these sources with the host compiler and a CUDA runtime
// of its own (it defines KILN_EMULATED_DEVICE and KILN_EMULATED_LAUNCH):
//   KILN_LAUNCH(grid, block, shared bytes, stream, kernel)(args...)
//     is kernel<<<grid, block, shared bytes, stream>>>(args...) under nvcc
//   KILN_EXTERN_SHARED(name);
//     is extern __shared__ __align__(16) unsigned char name[]; (the launch's dynamic shared
//     memory) under nvcc
#pragma once

#include <cuda_runtime.h>

#if defined(KILN_EMULATED_DEVICE)
#define KILN_LAUNCH(grid, block, shared, stream, ...) \
  KILN_EMULATED_LAUNCH(grid, block, shared, stream, __VA_ARGS__)
#define KILN_EXTERN_SHARED(name) unsigned char* name = ::kiln::emul::dynamic_shared_memory()
#else
#define KILN_LAUNCH(grid, block, shared, stream, ...) __VA_ARGS__<<<grid, block, shared, stream>>>
#define KILN_EXTERN_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif
