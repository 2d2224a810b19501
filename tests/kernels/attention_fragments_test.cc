// The tensor-core data flow of the flash attention kernels on the CPU: ldmatrix.x4 (plain and
// .trans) and mma.m16n8k16 as the emulator computes them from the PTX ISA's fragment layouts
// (tests/kernels/emul/tensor_core.h), fed with the lane addresses and repacking of
// kernels/cuda/attention_fragments.h in the loop order of the kernels (S = Q K^T as
// attention_flash_fwd.cu's scores() and flash_bwd's rows_dot_rows, O += P V as the forward's P V
// loop and weights_times_rows), against plain matrix products. Small integer values keep every
// sum exact (P is rounded to bf16 as the kernels round it). Runs without a GPU; the whole kernels
// run under the emulator in emul_attention_test.
#include "kiln/kernels/cuda/attention_fragments.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/emul/tensor_core.h"
#include "kiln/tensor/dtype.h"

namespace kiln::cuda::frag {
namespace {

using emul::kWarpLanes;
using Regs4 = uint32_t[kWarpLanes][4];
using Acc = float[kWarpLanes][4];

// A bf16 tile of small integers, row stride ld >= cols (the kernels' D + kSmemPad).
struct Tile {
  int rows, cols, ld;
  std::vector<uint16_t> v;
  Tile(int r, int c, int pad, uint32_t seed) : rows(r), cols(c), ld(c + pad), v(r * (c + pad)) {
    std::mt19937 rng(seed);
    for (uint16_t& x : v) x = f32_to_bf16(static_cast<float>(static_cast<int>(rng() % 7) - 3));
  }
  float at(int r, int c) const { return bf16_to_f32(v[static_cast<size_t>(r) * ld + c]); }
  const uint16_t* row(int r, int c) const {
    EXPECT_TRUE(r >= 0 && r < rows && c >= 0 && c + 8 <= cols) << "address outside the tile";
    return v.data() + static_cast<size_t>(r) * ld + c;
  }
};

// The PTX ISA's conditions on ldmatrix's row addresses, for a bf16 tile at a 16-byte aligned base:
// every row address 16-byte aligned (else the result is undefined), and, for the load to be free
// of bank conflicts, the eight rows of each 8x8 matrix in distinct 16-byte bank groups of 128.
// Returns how many row addresses break either.
int bad_ldmatrix_addresses(const Tile& t, const int (&row)[kWarpLanes],
                           const int (&col)[kWarpLanes]) {
  constexpr int kBf16Bytes = 2;
  int bad = 0;
  for (int m = 0; m < 4; ++m) {
    bool group_used[8] = {};
    for (int s = 8 * m; s < 8 * m + 8; ++s) {
      const long bytes = (static_cast<long>(row[s]) * t.ld + col[s]) * kBf16Bytes;
      const int group = static_cast<int>(bytes / 16 % 8);
      if (bytes % 16 != 0 || group_used[group]) ++bad;
      group_used[group] = true;
    }
  }
  return bad;
}

// ldmatrix.x4 with lane s addressing row (row[s], col[s]) of t.
void ldmatrix_x4(Regs4& out, const Tile& t, const int (&row)[kWarpLanes],
                 const int (&col)[kWarpLanes], bool trans) {
  EXPECT_EQ(bad_ldmatrix_addresses(t, row, col), 0)
      << "ldmatrix row addresses misaligned or in conflicting banks";
  const uint16_t* rows[kWarpLanes];
  for (int s = 0; s < kWarpLanes; ++s) rows[s] = t.row(row[s], col[s]);
  emul::ldmatrix_x4_warp(rows, trans, out);
}

// d += A B with B registers b_first, b_first + 1 of every lane's x4 load.
void mma(Acc& d, const Regs4& a, const Regs4& b, int b_first) {
  uint32_t bb[kWarpLanes][2];
  for (int l = 0; l < kWarpLanes; ++l) {
    bb[l][0] = b[l][b_first];
    bb[l][1] = b[l][b_first + 1];
  }
  emul::mma_m16n8k16_bf16_warp(a, bb, d);
}

uint32_t pack(float lo, float hi) {
  return static_cast<uint32_t>(f32_to_bf16(lo)) | static_cast<uint32_t>(f32_to_bf16(hi)) << 16;
}

// S (16 x 8 N per warp) = X[row0 ..] Y^T for X, Y stored [row][d]: the kernels' score loop.
template <int N>
void rows_dot_rows(Acc (&s)[N], const Tile& x, int row0, const Tile& y, int D) {
  for (int kk = 0; kk < D / 16; ++kk) {
    int ar[kWarpLanes], ac[kWarpLanes];
    for (int l = 0; l < kWarpLanes; ++l) {
      ar[l] = row0 + a_row(l);
      ac[l] = kk * 16 + a_col(l);
    }
    Regs4 af;
    ldmatrix_x4(af, x, ar, ac, false);
    for (int nb = 0; nb < N / 2; ++nb) {
      int br[kWarpLanes], bc[kWarpLanes];
      for (int l = 0; l < kWarpLanes; ++l) {
        br[l] = nb * 16 + b_nk_row(l);
        bc[l] = kk * 16 + b_nk_col(l);
      }
      Regs4 bf;
      ldmatrix_x4(bf, y, br, bc, false);
      mma(s[2 * nb], af, bf, 0);
      mma(s[2 * nb + 1], af, bf, 2);
    }
  }
}

// O (16 x D) += W X for W the accumulators (16 x 8 N, rounded to bf16) and X stored [n][d]: the
// kernels' P V.
template <int N>
void weights_times_rows(std::vector<Acc>& o, const Acc (&w)[N], const Tile& x, int D) {
  for (int kk = 0; kk < N / 2; ++kk) {
    Regs4 wa;
    for (int l = 0; l < kWarpLanes; ++l) acc_to_a(wa[l], w[2 * kk][l], w[2 * kk + 1][l], pack);
    for (int dn = 0; dn < D / 16; ++dn) {
      int br[kWarpLanes], bc[kWarpLanes];
      for (int l = 0; l < kWarpLanes; ++l) {
        br[l] = kk * 16 + b_kn_row(l);
        bc[l] = dn * 16 + b_kn_col(l);
      }
      Regs4 xf;
      ldmatrix_x4(xf, x, br, bc, true);
      mma(o[2 * dn], wa, xf, 0);
      mma(o[2 * dn + 1], wa, xf, 2);
    }
  }
}

// One warp's forward step: rows [row0, row0 + 16) of Q against 8 N keys, then P V with P = S.
template <int N>
void check_warp_products(int D, int row0) {
  const Tile q(64, D, kSmemPad, 1), k(8 * N, D, kSmemPad, 2), v(8 * N, D, kSmemPad, 3);
  Acc s[N] = {};
  rows_dot_rows<N>(s, q, row0, k, D);
  std::vector<std::vector<float>> want_s(16, std::vector<float>(8 * N));
  for (int r = 0; r < 16; ++r) {
    for (int j = 0; j < 8 * N; ++j) {
      double acc = 0;
      for (int d = 0; d < D; ++d) acc += q.at(row0 + r, d) * k.at(j, d);
      want_s[r][j] = static_cast<float>(acc);
    }
  }
  for (int l = 0; l < kWarpLanes; ++l) {
    for (int n = 0; n < N; ++n) {
      for (int e = 0; e < 4; ++e) {
        ASSERT_EQ(s[n][l][e], want_s[acc_row(l, e)][n * 8 + acc_col(l, e)])
            << "S lane " << l << " tile " << n << " element " << e;
      }
    }
  }
  std::vector<Acc> o(D / 8);
  for (Acc& a : o) {
    for (auto& lane : a) {
      for (float& x : lane) x = 0;
    }
  }
  weights_times_rows<N>(o, s, v, D);
  for (int l = 0; l < kWarpLanes; ++l) {
    for (int n = 0; n < D / 8; ++n) {
      for (int e = 0; e < 4; ++e) {
        const int r = acc_row(l, e), c = n * 8 + acc_col(l, e);
        double acc = 0;
        for (int j = 0; j < 8 * N; ++j) acc += bf16_to_f32(f32_to_bf16(want_s[r][j])) * v.at(j, c);
        ASSERT_EQ(o[n][l][e], static_cast<float>(acc))
            << "O lane " << l << " tile " << n << " element " << e;
      }
    }
  }
}

TEST(AttentionFragments, ForwardHeadDim64) { check_warp_products<8>(64, 16); }
TEST(AttentionFragments, ForwardHeadDim128) { check_warp_products<8>(128, 48); }
// The dK/dV pass at head_dim 128 takes 32 query rows a step: S^T is 16 x 32.
TEST(AttentionFragments, BackwardStepOf32Rows) { check_warp_products<4>(128, 0); }

// The address checks can fail: an unpadded tile (row stride 128 bytes at D = 64) puts the eight
// rows of a matrix in one bank group, and a pad of 4 misaligns every odd row.
TEST(AttentionFragments, AddressChecksCatchBadPadding) {
  int row[kWarpLanes], col[kWarpLanes];
  for (int l = 0; l < kWarpLanes; ++l) {
    row[l] = a_row(l);
    col[l] = a_col(l);
  }
  EXPECT_EQ(bad_ldmatrix_addresses(Tile(16, 64, kSmemPad, 1), row, col), 0);
  EXPECT_GT(bad_ldmatrix_addresses(Tile(16, 64, 0, 1), row, col), 0) << "no padding";
  EXPECT_GT(bad_ldmatrix_addresses(Tile(16, 64, 4, 1), row, col), 0) << "a pad of 4";
}

TEST(AttentionFragments, AccumulatorCoordinatesCoverTheTileOnce) {
  int seen[16][8] = {};
  for (int l = 0; l < kWarpLanes; ++l) {
    for (int e = 0; e < 4; ++e) ++seen[acc_row(l, e)][acc_col(l, e)];
  }
  for (auto& row : seen) {
    for (int c : row) EXPECT_EQ(c, 1);
  }
}

}  // namespace
}  // namespace kiln::cuda::frag
