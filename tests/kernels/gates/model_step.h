// One training step of a preset on the dry-run CUDA backend (kernels/emul/dry_run_backend.h):
// what the gates of what only a GPU would show (gpu_gate_*_test) look at, launch by launch and
// GEMM by GEMM, with no memory and no compute.
#pragma once

#include <string>

#include "kiln/kernels/ops.h"
#include "kiln/model/config.h"

namespace kiln::gates {

// The preset with the most parameters (every family the model supports: the preset list).
std::string largest_preset();

// The trainer's step over B rows of T tokens in packed documents of `doc` tokens: forward and
// backward (recomputing activations or not), the gradient norm over every unit, clipping and an
// AdamW update of every unit; then the split vocabulary's passes as FSDP runs them over `ranks`
// shards of the LM head, the SGD update and a decode step, so that every kernel launches.
void run_step(const ModelConfig& config, const Backend& be, int B, int T, int doc, bool recompute,
              int ranks);

}  // namespace kiln::gates
