// The tensor-core data flow of the flash attention kernels, emulated on the CPU: ldmatrix.x4
// (plain and .trans) and mma.m16n8k16 written here from the PTX ISA's fragment layouts, fed with
// the lane addresses and repacking of kernels/cuda/attention_fragments.h in the loop order of
// the kernels (S = Q K^T as attention_flash_fwd.cu's scores() and flash_bwd's rows_dot_rows,
// O += P V as the forward's P V loop and weights_times_rows), against plain matrix products.
// Small integer values keep every sum exact. Runs without a GPU.
#include "kiln/kernels/cuda/attention_fragments.h"

#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

namespace kiln::cuda::frag {
namespace {

constexpr int kLanes = 32;
using Word = std::pair<float, float>;  // a .b32 register's two b16 halves (low, high)
using Regs4 = Word[kLanes][4];
using Acc = float[kLanes][4];

struct Tile {
  int rows, cols, ld;  // row stride ld >= cols (the kernels' D + kSmemPad)
  std::vector<float> v;
  Tile(int r, int c, int pad, uint32_t seed) : rows(r), cols(c), ld(c + pad), v(r * (c + pad)) {
    std::mt19937 rng(seed);
    for (float& x : v) x = static_cast<float>(static_cast<int>(rng() % 7) - 3);
  }
  float at(int r, int c) const {
    EXPECT_TRUE(r >= 0 && r < rows && c >= 0 && c < cols) << "address outside the tile";
    return v[r * ld + c];
  }
};

// The PTX ISA's conditions on ldmatrix's row addresses, for a bf16 tile at a 16-byte aligned base:
// every row address 16-byte aligned (else the result is undefined), and, for the load to be free
// of bank conflicts, the eight rows of each 8x8 matrix in distinct 16-byte bank groups of 128.
// Returns how many row addresses break either.
int bad_ldmatrix_addresses(const Tile& t, const int (&row)[kLanes], const int (&col)[kLanes]) {
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

// ldmatrix.sync.aligned.m8n8.x4[.trans].b16: lane s supplies the address (row[s], col[s]) of row
// s % 8 of matrix s / 8. Register m of lane l: that matrix's row l / 4, columns 2 (l % 4) + {0,1};
// with .trans its rows 2 (l % 4) + {0,1}, column l / 4.
void ldmatrix_x4(Regs4& out, const Tile& t, const int (&row)[kLanes], const int (&col)[kLanes],
                 bool trans) {
  EXPECT_EQ(bad_ldmatrix_addresses(t, row, col), 0)
      << "ldmatrix row addresses misaligned or in conflicting banks";
  for (int l = 0; l < kLanes; ++l) {
    for (int m = 0; m < 4; ++m) {
      if (!trans) {
        const int s = 8 * m + l / 4;
        out[l][m] = {t.at(row[s], col[s] + 2 * (l % 4)), t.at(row[s], col[s] + 2 * (l % 4) + 1)};
      } else {
        const int s0 = 8 * m + 2 * (l % 4), s1 = s0 + 1;
        out[l][m] = {t.at(row[s0], col[s0] + l / 4), t.at(row[s1], col[s1] + l / 4)};
      }
    }
  }
}

// mma.m16n8k16.row.col: d += A B with (group g = l / 4, pair p = l % 4)
//   A a[r]: row g + 8 (r % 2), columns 8 (r / 2) + 2p + {0,1};  B b[r]: rows 8r + 2p + {0,1},
//   column g;  D d[e]: row g + 8 (e / 2), column 2p + e % 2.
void mma(Acc& d, const Regs4& a, const Regs4& b, int b_first) {
  float A[16][16], B[16][8];
  for (int l = 0; l < kLanes; ++l) {
    const int g = l / 4, p = l % 4;
    for (int r = 0; r < 4; ++r) {
      A[g + 8 * (r % 2)][8 * (r / 2) + 2 * p] = a[l][r].first;
      A[g + 8 * (r % 2)][8 * (r / 2) + 2 * p + 1] = a[l][r].second;
    }
    for (int r = 0; r < 2; ++r) {
      B[8 * r + 2 * p][g] = b[l][b_first + r].first;
      B[8 * r + 2 * p + 1][g] = b[l][b_first + r].second;
    }
  }
  for (int l = 0; l < kLanes; ++l) {
    for (int e = 0; e < 4; ++e) {
      float acc = 0;
      for (int k = 0; k < 16; ++k) acc += A[l / 4 + 8 * (e / 2)][k] * B[k][2 * (l % 4) + e % 2];
      d[l][e] += acc;
    }
  }
}

// S (16 x 8 N per warp) = X[row0 ..] Y^T for X, Y stored [row][d]: the kernels' score loop.
template <int N>
void rows_dot_rows(Acc (&s)[N], const Tile& x, int row0, const Tile& y, int D) {
  for (int kk = 0; kk < D / 16; ++kk) {
    int ar[kLanes], ac[kLanes];
    for (int l = 0; l < kLanes; ++l) {
      ar[l] = row0 + a_row(l);
      ac[l] = kk * 16 + a_col(l);
    }
    Regs4 af;
    ldmatrix_x4(af, x, ar, ac, false);
    for (int nb = 0; nb < N / 2; ++nb) {
      int br[kLanes], bc[kLanes];
      for (int l = 0; l < kLanes; ++l) {
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

// O (16 x D) += W X for W the accumulators (16 x 8 N) and X stored [n][d]: the kernels' P V.
template <int N>
void weights_times_rows(std::vector<Acc>& o, const Acc (&w)[N], const Tile& x, int D) {
  for (int kk = 0; kk < N / 2; ++kk) {
    Regs4 wa;
    for (int l = 0; l < kLanes; ++l) {
      Word a[4];
      acc_to_a(a, w[2 * kk][l], w[2 * kk + 1][l], [](float lo, float hi) { return Word{lo, hi}; });
      for (int r = 0; r < 4; ++r) wa[l][r] = a[r];
    }
    for (int dn = 0; dn < D / 16; ++dn) {
      int br[kLanes], bc[kLanes];
      for (int l = 0; l < kLanes; ++l) {
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
      float acc = 0;
      for (int d = 0; d < D; ++d) acc += q.at(row0 + r, d) * k.at(j, d);
      want_s[r][j] = acc;
    }
  }
  for (int l = 0; l < kLanes; ++l) {
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
  for (int l = 0; l < kLanes; ++l) {
    for (int n = 0; n < D / 8; ++n) {
      for (int e = 0; e < 4; ++e) {
        const int r = acc_row(l, e), c = n * 8 + acc_col(l, e);
        float acc = 0;
        for (int j = 0; j < 8 * N; ++j) acc += want_s[r][j] * v.at(j, c);
        ASSERT_EQ(o[n][l][e], acc) << "O lane " << l << " tile " << n << " element " << e;
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
  int row[kLanes], col[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    row[l] = a_row(l);
    col[l] = a_col(l);
  }
  EXPECT_EQ(bad_ldmatrix_addresses(Tile(16, 64, kSmemPad, 1), row, col), 0);
  EXPECT_GT(bad_ldmatrix_addresses(Tile(16, 64, 0, 1), row, col), 0) << "no padding";
  EXPECT_GT(bad_ldmatrix_addresses(Tile(16, 64, 4, 1), row, col), 0) << "a pad of 4";
}

TEST(AttentionFragments, AccumulatorCoordinatesCoverTheTileOnce) {
  int seen[16][8] = {};
  for (int l = 0; l < kLanes; ++l) {
    for (int e = 0; e < 4; ++e) ++seen[acc_row(l, e)][acc_col(l, e)];
  }
  for (auto& row : seen) {
    for (int c : row) EXPECT_EQ(c, 1);
  }
}

}  // namespace
}  // namespace kiln::cuda::frag
