#include "kernels/emul/warp_ops.h"

#include <fmt/format.h>

#include <cstring>

#include "kernels/emul/access_check.h"
#include "kernels/emul/device_builtins.h"
#include "kernels/emul/tensor_core.h"

namespace kiln::emul {

namespace {

bool in_mask(unsigned mask, int lane) { return (mask >> lane & 1u) != 0; }

// The source lane of lane l for a shuffle (-1: l keeps its own value).
int shuffle_source(ShuffleKind kind, int l, int arg, int width) {
  const int seg = l / width * width;
  switch (kind) {
    case ShuffleKind::kIndex:
      return seg + ((arg % width) + width) % width;
    case ShuffleKind::kUp:
      return l - arg >= seg ? l - arg : -1;
    case ShuffleKind::kDown:
      return l + arg < seg + width ? l + arg : -1;
    case ShuffleKind::kXor: {
      const int s = l ^ arg;
      return s >= seg && s < seg + width ? s : -1;
    }
  }
  return -1;
}

void compute_shuffle(BlockRun& b, WarpOp& op) {
  const auto kind = static_cast<ShuffleKind>(op.variant >> 16);
  const int width = op.variant >> 8 & 0xff;
  const size_t bytes = static_cast<size_t>(op.variant & 0xff);
  if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
    b.fault(fmt::format("warp shuffle at {} with width {}", site_text(op.site), width));
  }
  for (int l = 0; l < kWarpLanes; ++l) {
    if (!in_mask(op.mask, l)) continue;
    int src = shuffle_source(kind, l, op.lanes[l].arg, width);
    if (src < 0) src = l;
    if (!in_mask(op.mask, src)) {
      b.fault(
          fmt::format("warp shuffle at {}: lane {} reads lane {}, which is not in the mask "
                      "{:#x}",
                      site_text(op.site), l, src, op.mask));
    }
    std::memcpy(op.lanes[l].out, op.lanes[src].in, bytes);
  }
}

void compute_vote(WarpOp& op) {
  const auto kind = static_cast<VoteKind>(op.variant);
  unsigned ballot = 0;
  for (int l = 0; l < kWarpLanes; ++l) {
    if (in_mask(op.mask, l) && op.lanes[l].in[0] != 0) ballot |= 1u << l;
  }
  const unsigned r = kind == VoteKind::kBallot ? ballot
                     : kind == VoteKind::kAny  ? unsigned{ballot != 0}
                                               : unsigned{ballot == op.mask};
  for (int l = 0; l < kWarpLanes; ++l) std::memcpy(op.lanes[l].out, &r, sizeof r);
}

void require_whole_warp(BlockRun& b, const WarpOp& op, const char* what) {
  if (op.mask != 0xffffffffu) {
    b.fault(fmt::format("{} at {} executed by lanes {:#x}: .aligned needs all 32", what,
                        site_text(op.site), op.mask));
  }
}

void compute_ldmatrix(BlockRun& b, WarpOp& op, int warp) {
  require_whole_warp(b, op, "ldmatrix");
  const uint16_t* rows[kWarpLanes];
  for (int s = 0; s < kWarpLanes; ++s) {
    std::memcpy(&rows[s], op.lanes[s].in, sizeof rows[s]);
    const auto a = reinterpret_cast<uintptr_t>(rows[s]);
    if (a % 16 != 0) {
      b.fault(fmt::format("ldmatrix at {}: lane {} gives a row address {:#x} not 16-byte aligned",
                          site_text(op.site), s, a));
    }
    const Region* r = check_access(b, warp * 32 + s, a, 16, Access::kRead);
    if (r == nullptr || !r->is_shared()) {
      b.fault(fmt::format("ldmatrix at {}: lane {} gives a row address {:#x} outside shared memory",
                          site_text(op.site), s, a));
    }
  }
  uint32_t out[kWarpLanes][4];
  ldmatrix_x4_warp(rows, op.variant != 0, out);
  for (int l = 0; l < kWarpLanes; ++l) std::memcpy(op.lanes[l].out, out[l], sizeof out[l]);
}

void compute_mma(BlockRun& b, WarpOp& op) {
  require_whole_warp(b, op, "mma.sync");
  uint32_t a[kWarpLanes][4], bb[kWarpLanes][2];
  float d[kWarpLanes][4];
  for (int l = 0; l < kWarpLanes; ++l) {
    std::memcpy(a[l], op.lanes[l].in, 16);
    std::memcpy(bb[l], op.lanes[l].in + 16, 8);
    std::memcpy(d[l], op.lanes[l].in + 24, 16);
  }
  mma_m16n8k16_bf16_warp(a, bb, d);
  for (int l = 0; l < kWarpLanes; ++l) std::memcpy(op.lanes[l].out, d[l], sizeof d[l]);
}

}  // namespace

void compute_warp_op(BlockRun& b, WarpOp& op, int warp) {
  switch (op.kind) {
    case WarpOpKind::kShuffle:
      compute_shuffle(b, op);
      return;
    case WarpOpKind::kVote:
      compute_vote(op);
      return;
    case WarpOpKind::kLdmatrix:
      compute_ldmatrix(b, op, warp);
      return;
    case WarpOpKind::kMma:
      compute_mma(b, op);
      return;
    case WarpOpKind::kSyncWarp:
    case WarpOpKind::kNone:
      return;
  }
}

}  // namespace kiln::emul
