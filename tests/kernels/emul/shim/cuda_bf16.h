// The CPU emulator's <cuda_bf16.h> (tests/kernels/emul/bf16.h).
#pragma once

#include "kernels/emul/bf16.h"
