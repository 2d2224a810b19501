// What the Gloo communicator's thread runs beyond Gloo's own algorithms: element-wise reductions
// for kiln's dtypes (Gloo has no bfloat16) and a ring reduce-scatter over Gloo's unbound buffers
// (Gloo's ReduceScatterHalvingDoubling is the old buffer API, int-sized and without timeouts).
// Internal to kiln_comm.
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/comm/communicator.h"
#include "kiln/tensor/dtype.h"

namespace kiln::gloo_detail {

// c[i] = a[i] (op) b[i] for n elements; c may alias a or b. Gloo's AllreduceOptions::Func shape.
// Half types compute in f32 and round once per call: a ring all-reduce rounds once per hop, as
// NCCL does. kMean reduces as kSum; the caller divides afterwards (divide_by).
using ReduceFn = void (*)(void* c, const void* a, const void* b, size_t n);
ReduceFn reduce_fn(DType t, ReduceOp op);
ReduceFn reduce_fn_f64(ReduceOp op);

// data[i] /= divisor, in f32 precision for half types (rounded once).
void divide_by(void* data, size_t n, DType t, int divisor);

// out (n) = reduce over ranks of in[rank * n, (rank + 1) * n); in: (size * n). `out` may alias
// in + rank * n. Ring: size - 1 steps, each sending one block (n elements) to the right neighbour
// and reducing the one arriving from the left into this rank's contribution, pipelined in
// segments so reduction overlaps the transfer. Each rank moves (size - 1) * n elements, as in
// NCCL. Throws gloo's exception when a wait passes the deadline (start + timeout).
// `scratch` (grown to 2 * n elements as needed) is kept by the caller across operations: FSDP
// reduce-scatters the same unit sizes every step, and fresh buffers would page-fault each time.
void ring_reduce_scatter(const std::shared_ptr<gloo::Context>& context, void* out, const void* in,
                         size_t n, DType t, ReduceFn fn, std::chrono::milliseconds timeout,
                         std::vector<uint8_t>& scratch);

}  // namespace kiln::gloo_detail
