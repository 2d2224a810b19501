#include "kiln/model/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kiln/base/error.h"

namespace kiln {

Sampler::Sampler(const SamplingOptions& options, uint64_t seed) : o_(options), rng_{seed} {
  if (!(o_.temperature >= 0) || !std::isfinite(o_.temperature)) {
    fail("temperature must be a number >= 0, got {}", o_.temperature);
  }
  if (!(o_.top_p > 0 && o_.top_p <= 1)) fail("top-p must be in (0, 1], got {}", o_.top_p);
}

int32_t Sampler::sample(std::span<const float> logits) {
  KILN_CHECK(!logits.empty(), "sampling from no logits");
  const size_t n = logits.size();
  size_t best = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i])) fail("the model produced a NaN logit (token {})", i);
    if (logits[i] > logits[best]) best = i;
  }
  const float m = logits[best];
  if (!std::isfinite(m)) fail("the model produced an infinite logit (token {})", best);
  if (o_.temperature == 0) return static_cast<int32_t>(best);

  // p_i = exp((l_i - max) / T), unnormalised: the draw scales by the kept mass instead.
  prob_.resize(n);
  double total = 0;
  for (size_t i = 0; i < n; ++i) {
    prob_[i] = std::exp((static_cast<double>(logits[i]) - m) / o_.temperature);
    total += prob_[i];
  }
  if (o_.top_p >= 1) {
    const double u = rng_.uniform() * total;
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += prob_[i];
      if (u < cum) return static_cast<int32_t>(i);
    }
    return static_cast<int32_t>(best);  // u landed on the rounding slack at the very end
  }

  // Nucleus: the smallest m such that the m most likely tokens (ties broken by id, so the set is
  // unique) reach top_p of the mass. Quickselect on the mass instead of a sort: each round
  // partitions [lo, hi) around its middle and keeps the half where m lies, O(V) expected in
  // all (a random model's near-uniform 150k-token distribution puts most tokens in the nucleus).
  rank_.resize(n);
  std::iota(rank_.begin(), rank_.end(), 0);
  const auto before = [this](int32_t a, int32_t b) {
    return prob_[a] > prob_[b] || (prob_[a] == prob_[b] && a < b);
  };
  const double target = o_.top_p * total;
  // Invariant: rank_[0, lo) are the lo most likely tokens, their mass acc < target; m in (lo, hi].
  size_t lo = 0, hi = n;
  double acc = 0;
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(rank_.begin() + lo, rank_.begin() + mid, rank_.begin() + hi, before);
    double mass = 0;
    for (size_t j = lo; j < mid; ++j) mass += prob_[rank_[j]];
    if (acc + mass >= target) {
      hi = mid;
    } else {
      acc += mass;
      lo = mid;
    }
  }
  // Draw over the nucleus in id order, so the result depends only on the set.
  keep_.assign(n, 0);
  double kept = 0;
  for (size_t j = 0; j < hi; ++j) {
    keep_[rank_[j]] = 1;
    kept += prob_[rank_[j]];
  }
  const double u = rng_.uniform() * kept;
  double cum = 0;
  int32_t last = rank_[0];
  for (size_t i = 0; i < n; ++i) {
    if (!keep_[i]) continue;
    cum += prob_[i];
    last = static_cast<int32_t>(i);
    if (u < cum) return last;
  }
  return last;  // u landed on the rounding slack at the very end
}

}  // namespace kiln
