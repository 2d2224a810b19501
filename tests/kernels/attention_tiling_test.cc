// The block-skip arithmetic of the CUDA attention kernels (kernels/cuda/attention_tiling.h),
// against brute force over every (query, key) pair: plain C++, runs without a GPU or CUDA.
#include "kiln/kernels/cuda/attention_tiling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>
#include <utility>
#include <vector>

namespace kiln::cuda {
namespace {

// Packed documents: starts at 0 and at random cut points; ds[t] = start of t's document.
std::vector<int> packed_doc_starts(int T, int docs, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> cuts = {0};
  for (int d = 1; d < docs; ++d) cuts.push_back(static_cast<int>(rng() % T));
  std::sort(cuts.begin(), cuts.end());
  std::vector<int> ds(T);
  for (int t = 0; t < T; ++t) ds[t] = *(std::upper_bound(cuts.begin(), cuts.end(), t) - 1);
  return ds;
}

// Any ds[t] in [0, t]: not monotone, which the kernels must not assume.
std::vector<int> arbitrary_doc_starts(int T, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int> ds(T);
  for (int t = 0; t < T; ++t) ds[t] = static_cast<int>(rng() % (t + 1));
  return ds;
}

int min_doc_start(const std::vector<int>& ds, int i0, int rows) {
  int lo = INT_MAX;
  for (int i = i0; i < std::min(i0 + rows, static_cast<int>(ds.size())); ++i) {
    lo = std::min(lo, ds[i]);
  }
  return lo;
}

// Whether any pair of query block [i0, i0 + br) x key block [j0, j0 + bk) attends.
bool any_pair(const std::vector<int>& ds, int i0, int br, int j0, int bk) {
  const int T = static_cast<int>(ds.size());
  for (int i = i0; i < std::min(i0 + br, T); ++i) {
    for (int j = j0; j < std::min(j0 + bk, T); ++j) {
      if (attends(i, j, ds[i], T)) return true;
    }
  }
  return false;
}

// Forward and dQ: every key block holding an attended key is in the range, and the range's first
// and last blocks hold one (so nothing wholly before the documents or after the rows is taken).
void check_key_ranges(const std::vector<int>& ds, int br, int bk) {
  const int T = static_cast<int>(ds.size());
  for (int i0 = 0; i0 < T; i0 += br) {
    const BlockRange r = key_blocks_for_queries(i0, br, min_doc_start(ds, i0, br), bk, T);
    ASSERT_LT(r.begin, r.end) << "i0=" << i0;
    for (int kb = 0; kb < blocks_of(T, bk); ++kb) {
      if (any_pair(ds, i0, br, kb * bk, bk)) {
        EXPECT_TRUE(kb >= r.begin && kb < r.end) << "i0=" << i0 << " key block " << kb;
      }
    }
    EXPECT_TRUE(any_pair(ds, i0, br, r.begin * bk, bk)) << "i0=" << i0;
    EXPECT_TRUE(any_pair(ds, i0, br, (r.end - 1) * bk, bk)) << "i0=" << i0;
  }
}

// dK/dV: every query block attending a key of the block is in the range and passes
// queries_see_keys; returns how many query blocks of the ranges queries_see_keys skipped.
int check_query_ranges(const std::vector<int>& ds, int br, int bk) {
  const int T = static_cast<int>(ds.size());
  int skipped = 0;
  for (int j0 = 0; j0 < T; j0 += bk) {
    const BlockRange r = query_blocks_for_keys(j0, br, T);
    for (int qb = 0; qb < blocks_of(T, br); ++qb) {
      const int i0 = qb * br;
      const bool in_range = qb >= r.begin && qb < r.end;
      const bool seen = in_range && queries_see_keys(i0, br, min_doc_start(ds, i0, br), j0, bk, T);
      if (any_pair(ds, i0, br, j0, bk)) {
        EXPECT_TRUE(seen) << "j0=" << j0 << " query block " << qb;
      }
      if (in_range && !seen) ++skipped;
      if (!in_range) {
        EXPECT_LT(i0 + br - 1, j0) << "a query block at or after the keys left out";
      }
    }
  }
  return skipped;
}

struct Tiling {
  int br, bk;
};
constexpr Tiling kTilings[] = {{64, 64}, {32, 64}, {64, 32}, {16, 16}, {8, 16}};

TEST(AttentionTiling, NoDocumentsTakesTheCausalTriangle) {
  for (int T : {1, 7, 64, 65, 200, 256}) {
    const std::vector<int> ds(T, 0);
    for (const Tiling& t : kTilings) {
      check_key_ranges(ds, t.br, t.bk);
      EXPECT_EQ(check_query_ranges(ds, t.br, t.bk), 0);
      const BlockRange r = key_blocks_for_queries(0, t.br, 0, t.bk, T);
      EXPECT_EQ(r.begin, 0);
      EXPECT_EQ(r.end, blocks_of(std::min(t.br, T), t.bk));
    }
  }
}

TEST(AttentionTiling, PackedDocumentsSkipBlocksBeforeTheirStart) {
  int skipped = 0;
  for (int T : {100, 256, 333}) {
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      const std::vector<int> ds = packed_doc_starts(T, 5, seed);
      for (const Tiling& t : kTilings) {
        check_key_ranges(ds, t.br, t.bk);
        skipped += check_query_ranges(ds, t.br, t.bk);
      }
    }
  }
  EXPECT_GT(skipped, 0) << "packed documents never let a dK/dV pass skip a query block";
}

TEST(AttentionTiling, ArbitraryDocStartsAreCovered) {
  for (int T : {50, 130}) {
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      const std::vector<int> ds = arbitrary_doc_starts(T, seed);
      for (const Tiling& t : kTilings) {
        check_key_ranges(ds, t.br, t.bk);
        check_query_ranges(ds, t.br, t.bk);
      }
    }
  }
}

TEST(AttentionTiling, ALateDocumentStartsAtItsOwnBlock) {
  // rows [128, 192) all in a document starting at 130: key blocks of 64 from block 2 on
  const BlockRange r = key_blocks_for_queries(128, 64, 130, 64, 192);
  EXPECT_EQ(r.begin, 2);
  EXPECT_EQ(r.end, 3);
  EXPECT_FALSE(queries_see_keys(128, 64, 130, 64, 64, 192));  // keys [64, 128) before 130
  EXPECT_TRUE(queries_see_keys(128, 64, 127, 64, 64, 192));
  EXPECT_FALSE(queries_see_keys(0, 64, 0, 64, 64, 192));  // keys after every row
  // a last, partial query block: rows [192, 200)
  const BlockRange last = key_blocks_for_queries(192, 64, 0, 64, 200);
  EXPECT_EQ(last.end, 4);
  EXPECT_EQ(key_blocks_for_queries(200, 64, 0, 64, 200).end, 0);
}

TEST(AttentionTiling, DkdvHeadSplitsDivideTheGroupAndFillTheGpu) {
  EXPECT_EQ(dkdv_head_splits(1, 1024, 4, 4), 1);    // no groups
  EXPECT_EQ(dkdv_head_splits(1, 1024, 12, 2), 6);   // 32 blocks: every head its own part
  EXPECT_EQ(dkdv_head_splits(8, 1024, 12, 2), 2);   // 256 blocks x 2 reach the target
  EXPECT_EQ(dkdv_head_splits(16, 2048, 14, 2), 1);  // 1024 blocks: whole groups per block
  EXPECT_EQ(dkdv_head_splits(4, 1024, 14, 2), 7);   // 7 is prime: all or nothing
  // CudaBackend sizes backward's scratch before the launchers check the shape: no kv heads must
  // not divide by zero on the way to their error.
  EXPECT_EQ(dkdv_head_splits(1, 1024, 4, 0), 1);
  for (int B : {1, 2, 8, 32}) {
    for (int T : {1, 100, 1024, 4096}) {
      for (auto [H, KV] : {std::pair{14, 2}, {12, 2}, {16, 8}, {8, 1}, {6, 6}}) {
        const int splits = dkdv_head_splits(B, T, H, KV), group = H / KV;
        EXPECT_EQ(group % splits, 0) << B << " " << T << " " << H << " " << KV;
        const long long blocks = static_cast<long long>(B) * KV * blocks_of(T, kDkdvKeys);
        if (splits < group) {
          EXPECT_GE(blocks * splits, kDkdvTargetBlocks);
        }
      }
    }
  }
}

}  // namespace
}  // namespace kiln::cuda
