// The bias gradient of a linear layer: db (OC) += column sums of dout (N, OC), in a fixed order
// (no float atomics), so it repeats bit for bit.
#pragma once

#include <cuda_runtime_api.h>

namespace kiln::cuda {

void add_column_sums(float* db, const float* dout, int N, int OC, cudaStream_t stream);

}  // namespace kiln::cuda
