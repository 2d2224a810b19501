// The stream emulation of the CPU backend (KILN_ASYNC_CPU=1): the CPU backend's ops, copies and
// fills, each enqueued on an emulated compute stream (a worker thread, random delays) instead
// of run at once. Streams created for communicators are emulated streams too. Allocation is
// immediate; free is stream-ordered (it runs after the work enqueued before it), as
// cudaFreeAsync is.
#pragma once

#include <memory>

#include "kiln/kernels/ops.h"

namespace kiln {

std::unique_ptr<Backend> make_async_cpu_backend(bool bf16);

}  // namespace kiln
