// How a GEMM gets its cuBLASLt algorithms, without the GPU: the heuristic is asked for several
// candidates (best first; the run takes the first that cuBLASLt accepts) at the operands' real
// alignments. When it has none for the shape (leading dimensions of a few bytes: the parity
// suite's hidden 8 and intermediate 12 in bf16, a cross-entropy with C = 4), the GEMM runs on
// copies of its operands whose rows are padded to 16 bytes and which start on 256-byte
// boundaries, asked again; when even that has none, the error names the shape. (Lowering the
// alignment preferences cannot help: a smaller MIN_ALIGNMENT only excludes algorithms,
// cublasLt.h; padding raises the data's alignment instead.)
//
// The heuristic is a function here so that tests/kernels/cuda_gemm_host_test.cc drives this
// logic with a fake one; gemm_lt.cc passes cublasLtMatmulAlgoGetHeuristic.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "kiln/kernels/cuda/gemm_lt_desc.h"

namespace kiln::cuda {

// What the algorithm depends on: the spec and the alignment (a power of two up to 256) of each
// pointer, which cuBLASLt's kernels may rely on.
struct GemmKey {
  GemmSpec spec;
  uint16_t align_a = 0, align_b = 0, align_c = 0, align_bias = 0;
  bool operator==(const GemmKey&) const = default;
};
struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const;
};

// Candidates asked of the heuristic per shape.
inline constexpr int kLtAlgoCandidates = 8;
// Rows of a padded operand are a multiple of this many bytes.
inline constexpr int64_t kLtPaddedRowBytes = 16;

// The same GEMM on padded copies: every leading dimension rounded up to kLtPaddedRowBytes, every
// operand 256-byte aligned (the bias stays where it is). Equal to `key` when nothing changes.
GemmKey padded_key(const GemmKey& key);
// Whether a spec's rows are all multiples of kLtPaddedRowBytes.
bool rows_are_padded(const GemmSpec& s);

// Up to kLtAlgoCandidates algorithms for key.spec at key's alignments, best first; empty: none.
using LtHeuristic = std::function<std::vector<cublasLtMatmulAlgo_t>(const GemmKey&)>;

struct LtChoice {
  GemmKey run;  // what runs: the caller's key, or padded_key() of it
  std::vector<cublasLtMatmulAlgo_t> algos;
  bool padded = false;  // run != the caller's key: the operands go through padded copies
};
// kiln::Error naming the shape (as asked and as padded) when neither has an algorithm.
LtChoice choose_lt_algorithms(const GemmKey& key, const LtHeuristic& heuristic);

}  // namespace kiln::cuda
