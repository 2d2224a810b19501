// The tensor-core instructions of the flash attention kernels (attention_mma.cuh), computed for a
// whole warp from every lane's operands, by the PTX ISA's fragment layouts (lane l, group
// g = l / 4, pair p = l % 4; a .b32 register holds two bf16, the lower-numbered element in its
// low half):
//   ldmatrix.sync.aligned.m8n8.x4.b16: lane s gives the address of row s % 8 of 8x8 matrix s / 8
//     (8 consecutive b16, 16 bytes); register m of lane l holds that matrix's row g, columns
//     2p, 2p + 1; with .trans its rows 2p, 2p + 1 of column g.
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d (16 x 8) += A (16 x 16) B (16 x 8)
//     A a[r]: row g + 8 (r % 2), columns 8 (r / 2) + 2p + {0, 1}
//     B b[r]: rows (k) 8 r + 2p + {0, 1}, column (n) g
//     D d[e]: row g + 8 (e / 2), column 2p + e % 2
// The emulator's warp operations call these; tests/kernels/attention_fragments_test checks the
// kernels' fragment addressing with them.
#pragma once

#include <cstdint>

namespace kiln::emul {

inline constexpr int kWarpLanes = 32;

// rows[s]: the 16-byte row lane s addresses; out[l]: lane l's four registers.
void ldmatrix_x4_warp(const uint16_t* const (&rows)[kWarpLanes], bool trans,
                      uint32_t (&out)[kWarpLanes][4]);

// d[l] += the product for lane l's accumulators, from every lane's a[l] and b[l]. Products of
// bf16 are exact in fp32; each output element's sixteen products are added to it in double and
// rounded once (the hardware's order and rounding are unspecified).
void mma_m16n8k16_bf16_warp(const uint32_t (&a)[kWarpLanes][4], const uint32_t (&b)[kWarpLanes][2],
                            float (&d)[kWarpLanes][4]);

// The bf16 value of a b16 half.
float bf16_half(uint32_t word, int half);

}  // namespace kiln::emul
