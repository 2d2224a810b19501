// Backend::sequence_logps and preference_loss (ops.h) on the GPU: a block per sequence for the
// sums over its rows and for its rows' weights, one block for the pairs' sums; every
// reduction in a fixed order (block_all_reduce), so a run repeats bit for bit. The pair's
// formulas are preference_terms.h's, the CPU's own.
#include "kiln/kernels/cuda/cross_entropy_kernels.h"
#include "kiln/kernels/cuda/cuda_check.h"
#include "kiln/kernels/cuda/device_math.cuh"
#include "kiln/kernels/cuda/launch.cuh"
#include "kiln/kernels/ops.h"

namespace kiln::cuda {

namespace {
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    sequence_logps_kernel(double* seq, const float* row_loss, const int32_t* targets,
                          const int32_t* bounds) {
  const size_t s = blockIdx.x;
  double logp = 0, n = 0;
  for (int32_t i = bounds[2 * s] + static_cast<int32_t>(threadIdx.x); i < bounds[2 * s + 1];
       i += kThreads) {
    if (targets[i] == kIgnoreIndex) continue;
    logp -= row_loss[i];
    n += 1;
  }
  logp = block_all_reduce(logp, BlockPlus{}, 0.0);
  n = block_all_reduce(n, BlockPlus{}, 0.0);
  if (threadIdx.x == 0) {
    seq[2 * s] += logp;
    seq[2 * s + 1] += n;
  }
}

// Pair p's terms, or none when a completion is empty (the pair is not counted).
struct ValidTerms {
  bool valid = false;
  PairTerms t;
};
__device__ __forceinline__ ValidTerms terms_of(const PreferenceTerms& terms, const double* seq,
                                               const double* ref_seq, int p) {
  const double* c = seq + 4 * p;
  if (!(c[1] > 0 && c[3] > 0)) return {};
  const bool simpo = terms.type == PreferenceLossType::kSimpo;
  const double rc = simpo ? 0 : ref_seq[4 * p], rr = simpo ? 0 : ref_seq[4 * p + 2];
  return {true, pair_terms(terms, c[0], c[2], rc, rr, c[1], c[3])};
}

__global__ void __launch_bounds__(kThreads)
    row_weight_kernel(float* row_weight, const double* seq, const double* ref_seq,
                      const int32_t* bounds, PreferenceTerms terms) {
  const int s = static_cast<int>(blockIdx.x);
  const PairTerms t = terms_of(terms, seq, ref_seq, s / 2).t;
  const float w = static_cast<float>(-terms.scale * (s % 2 == 0 ? t.d_chosen : t.d_rejected));
  for (int32_t i = bounds[2 * s] + static_cast<int32_t>(threadIdx.x); i < bounds[2 * s + 1];
       i += kThreads) {
    row_weight[i] = w;
  }
}

__global__ void __launch_bounds__(kThreads)
    pair_sums_kernel(double* sums, const double* seq, const double* ref_seq, PreferenceTerms terms,
                     int begin, int end) {
  // Each thread's partial sums: its column of `part`.
  __shared__ double part[kNumPreferenceSums][kThreads];
  const int x = static_cast<int>(threadIdx.x);
  for (int k = 0; k < kNumPreferenceSums; ++k) part[k][x] = 0;
  for (int p = begin + x; p < end; p += kThreads) {
    const ValidTerms v = terms_of(terms, seq, ref_seq, p);
    if (!v.valid) continue;
    const PairTerms& t = v.t;
    part[kPrefLoss][x] += t.loss;
    part[kPrefRewardChosen][x] += t.reward_chosen;
    part[kPrefRewardRejected][x] += t.reward_rejected;
    part[kPrefAccuracy][x] += t.reward_chosen > t.reward_rejected ? 1 : 0;
    part[kPrefMargin][x] += t.reward_chosen - t.reward_rejected;
    part[kPrefLogpChosen][x] += seq[4 * p];
    part[kPrefLogpRejected][x] += seq[4 * p + 2];
    part[kPrefPairs][x] += 1;
  }
  for (int k = 0; k < kNumPreferenceSums; ++k) {
    const double total = block_all_reduce(part[k][x], BlockPlus{}, 0.0);
    if (x == 0) sums[k] += total;
  }
}
}  // namespace

void sequence_logps(double* seq, const float* row_loss, const int32_t* targets,
                    const int32_t* bounds, int S, cudaStream_t stream) {
  if (S == 0) return;
  KILN_LAUNCH(S, kThreads, 0, stream, sequence_logps_kernel)(seq, row_loss, targets, bounds);
  KILN_CUDA_CHECK_LAUNCH();
}

void preference_loss(float* row_weight, double* sums, const double* seq, const double* ref_seq,
                     const int32_t* bounds, int S, const PreferenceTerms& terms, int sum_begin,
                     int sum_end, cudaStream_t stream) {
  if (row_weight != nullptr && S > 0) {
    KILN_LAUNCH(S, kThreads, 0, stream, row_weight_kernel)(row_weight, seq, ref_seq, bounds, terms);
    KILN_CUDA_CHECK_LAUNCH();
  }
  if (sums != nullptr && sum_begin < sum_end) {
    KILN_LAUNCH(1, kThreads, 0, stream, pair_sums_kernel)
    (sums, seq, ref_seq, terms, sum_begin, sum_end);
    KILN_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace kiln::cuda
