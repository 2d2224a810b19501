#include "kernels/emul/tensor_core.h"

#include <bit>
#include <cstring>

namespace kiln::emul {

float bf16_half(uint32_t word, int half) {
  return std::bit_cast<float>((half == 0 ? word & 0xffffu : word >> 16) << 16);
}

namespace {
uint32_t pack(uint16_t lo, uint16_t hi) { return static_cast<uint32_t>(lo) | (uint32_t{hi} << 16); }
}  // namespace

void ldmatrix_x4_warp(const uint16_t* const (&rows)[kWarpLanes], bool trans,
                      uint32_t (&out)[kWarpLanes][4]) {
  for (int l = 0; l < kWarpLanes; ++l) {
    const int g = l / 4, p = l % 4;
    for (int m = 0; m < 4; ++m) {
      if (!trans) {
        const uint16_t* row = rows[8 * m + g];
        out[l][m] = pack(row[2 * p], row[2 * p + 1]);
      } else {
        out[l][m] = pack(rows[8 * m + 2 * p][g], rows[8 * m + 2 * p + 1][g]);
      }
    }
  }
}

void mma_m16n8k16_bf16_warp(const uint32_t (&a)[kWarpLanes][4], const uint32_t (&b)[kWarpLanes][2],
                            float (&d)[kWarpLanes][4]) {
  float A[16][16], B[16][8];
  for (int l = 0; l < kWarpLanes; ++l) {
    const int g = l / 4, p = l % 4;
    for (int r = 0; r < 4; ++r) {
      for (int h = 0; h < 2; ++h)
        A[g + 8 * (r % 2)][8 * (r / 2) + 2 * p + h] = bf16_half(a[l][r], h);
    }
    for (int r = 0; r < 2; ++r) {
      for (int h = 0; h < 2; ++h) B[8 * r + 2 * p + h][g] = bf16_half(b[l][r], h);
    }
  }
  for (int l = 0; l < kWarpLanes; ++l) {
    const int g = l / 4, p = l % 4;
    for (int e = 0; e < 4; ++e) {
      const int row = g + 8 * (e / 2), col = 2 * p + e % 2;
      double acc = d[l][e];
      for (int k = 0; k < 16; ++k) acc += static_cast<double>(A[row][k]) * B[k][col];
      d[l][e] = static_cast<float>(acc);
    }
  }
}

}  // namespace kiln::emul
