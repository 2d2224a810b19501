// Which element of a tile each lane of a warp addresses or holds in the tensor-core operations of
// the flash attention kernels (attention_mma.cuh): ldmatrix.x4 row addresses, mma.m16n8k16
// accumulator coordinates and the repacking of accumulators into an A operand. Plain C++ shared
// by the kernels and a CPU emulation of ldmatrix and mma (tests/kernels/attention_fragments_test)
// that checks the products these compose without a GPU.
//
// PTX ISA fragment layouts (mma.m16n8k16, .bf16; lane l, group = l / 4, pair = l % 4):
//   A (16 x 16) a[r]: row group + 8 (r % 2), columns 8 (r / 2) + 2 pair + {0, 1}
//   B (16 x 8, k x n) b[r]: rows (k) 8 r + 2 pair + {0, 1}, column (n) group
//   C/D (16 x 8) c[e]: row group + 8 (e / 2), column 2 pair + e % 2
// ldmatrix.x4: lanes 8m .. 8m + 7 give the row addresses of 8x8 matrix m; register m of lane l
// holds that matrix's (row group, columns 2 pair + {0, 1}), with .trans (rows 2 pair + {0, 1},
// column group).
#pragma once

#include "kiln/kernels/cuda/host_device.h"

namespace kiln::cuda::frag {

// bf16 elements of padding per shared-memory tile row (row stride D + kSmemPad): every ldmatrix
// row address stays 16-byte aligned and the eight rows of one 8x8 matrix start 16 bytes apart
// modulo 128, in distinct banks.
constexpr int kSmemPad = 8;

// ldmatrix.x4 for an A operand of a row-major tile: matrices (rows 0-7 | 8-15, columns 0-7),
// then (rows 0-7 | 8-15, columns 8-15), so register r is a[r]. Offsets from the 16x16 corner.
KILN_HOST_DEVICE inline int a_row(int lane) { return lane % 16; }
KILN_HOST_DEVICE inline int a_col(int lane) { return lane / 16 * 8; }

// ldmatrix.x4 for the B operands of two n-tiles of a tile stored [n][k] (K in Q K^T): matrices
// (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15), so registers 0, 1 are
// b[0], b[1] of n-tile 0 and registers 2, 3 those of n-tile 1.
KILN_HOST_DEVICE inline int b_nk_row(int lane) { return lane / 16 * 8 + lane % 8; }  // n
KILN_HOST_DEVICE inline int b_nk_col(int lane) { return lane / 8 % 2 * 8; }          // k

// ldmatrix.x4.trans for the B operands of two n-tiles of a tile stored [k][n] (V in P V):
// matrices (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15): the same
// registers as b_nk.
KILN_HOST_DEVICE inline int b_kn_row(int lane) { return lane / 8 % 2 * 8 + lane % 8; }  // k
KILN_HOST_DEVICE inline int b_kn_col(int lane) { return lane / 16 * 8; }                // n

// Row (0..15) and column (0..7) of accumulator element e (0..3) within its 16x8 tile.
KILN_HOST_DEVICE inline int acc_row(int lane, int e) { return lane / 4 + e / 2 * 8; }
KILN_HOST_DEVICE inline int acc_col(int lane, int e) { return lane % 4 * 2 + e % 2; }

// The A operand (16 x 16) made of accumulators c0 (its columns 0-7) and c1 (8-15): word r packs
// (low, high) = pack(lo, hi) of the elements a[r] holds.
template <typename Word, typename Pack>
KILN_HOST_DEVICE inline void acc_to_a(Word (&a)[4], const float (&c0)[4], const float (&c1)[4],
                                      Pack pack) {
  a[0] = pack(c0[0], c0[1]);
  a[1] = pack(c0[2], c0[3]);
  a[2] = pack(c1[0], c1[1]);
  a[3] = pack(c1[2], c1[3]);
}

}  // namespace kiln::cuda::frag
