// The work of one training step per phase of kernels/phase_timed_backend.h (the layers'
// products, the LM head, attention, the optimizer, the rest): FLOPs and the bytes moved to and
// from device memory, estimated from the shapes (not counted), so that a measured phase time can
// be set beside a roofline estimate, max(FLOPs / GEMM ceiling, bytes / copy bandwidth), and the
// phase furthest from its limit stands out (`kiln bench train` prints these; the GPU check
// compares). train_flops() (below) is the FLOPs of the products, the LM head and attention
// without recomputation: MFU's numerator.
//
// With LoRA (StepShape::lora) the step is a frozen base's: every base product (the layers' and
// the LM head's) runs forward and its input gradient, never its weight gradient (2 + 2 FLOPs per
// base matmul parameter and token instead of 2 + 4), and each adapter's two products
// (u = s x A^T, y += u B^T) run forward and the full backward (dA, dB and dx: 6 FLOPs per adapter
// parameter and token), counted as PEFT's math defines them (kiln's block-diagonal B of a fused
// q/k/v or gate/up product multiplies zeros too; those are not counted). Attention is as in full
// fine-tuning (its backward is input gradients only), and the optimizer steps the adapters only.
#pragma once

#include <array>
#include <cstdint>

#include "kiln/kernels/phase_timed_backend.h"
#include "kiln/model/config.h"
#include "kiln/model/lora_config.h"

namespace kiln {

struct PhaseCost {
  double flops = 0;
  double bytes = 0;
};
using PhaseCosts = std::array<PhaseCost, kNumPhases>;

struct StepShape {
  int64_t tokens = 0;      // B x T
  int64_t seq = 0;         // T
  int64_t head_rows = -1;  // rows with a target (the LM head computes only those); < 0: tokens
  double act_bytes = 4;    // bytes of a product input: 2 under bf16, 4 under fp32
  bool recompute = false;  // each layer's forward runs again in backward
  const LoraConfig* lora = nullptr;  // LoRA on a frozen base; null: full fine-tuning
};

// One step of forward, backward and AdamW on one device (no sharding): estimates per phase.
PhaseCosts phase_costs(const ModelConfig& c, const StepShape& s);

// Training FLOPs for `tokens` tokens of sequence length T: 6 * matmul parameters * tokens plus
// the attention score/value products (forward 2 * 2 * T/2 * q_dim per token per layer, x3). The
// LM head counts `head_rows` rows when given (kiln computes it only for rows with a target),
// else every token. With `lora` (adapters on a frozen base), 4 * base matmul parameters * tokens
// (forward and input gradients, no weight gradients) + 6 * adapter parameters * tokens + the
// same attention (phase_costs.h has the formula, one place for both).
double train_flops(const ModelConfig& c, int64_t tokens, int64_t T, int64_t head_rows = -1,
                   const LoraConfig* lora = nullptr);

}  // namespace kiln
