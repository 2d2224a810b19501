// The CPU emulator's <cuda_runtime_api.h>: first on the include path of the emulated kernel
// sources (tests/kernels/emul/CMakeLists.txt), in place of the CUDA toolkit's.
#pragma once

#include "kernels/emul/runtime_api.h"
