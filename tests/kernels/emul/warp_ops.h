// The warp operations' effect once every lane of the mask has arrived (block_run.h): shuffles
// and votes exchange the lanes' values; ldmatrix reads the rows the lanes address (checked as
// shared memory reads) and mma.sync multiplies the lanes' fragments (tensor_core.h).
#pragma once

#include "kernels/emul/block_run.h"

namespace kiln::emul {

// Writes every lane's out slot of `op`, whose lanes (warp `warp` of `block`) have all arrived.
void compute_warp_op(BlockRun& block, WarpOp& op, int warp);

}  // namespace kiln::emul
