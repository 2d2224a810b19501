// The CPU emulator's <cuda_runtime.h>: the runtime API, the device-side language and launches,
// for kernel sources compiled by the host compiler (tests/kernels/emul/emulator.h).
#pragma once

#include "kernels/emul/device_builtins.h"
#include "kernels/emul/launch.h"
#include "kernels/emul/runtime_api.h"
