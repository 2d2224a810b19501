#include "kiln/data/mixture.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kiln/base/error.h"
#include "kiln/data/sampler.h"  // epoch_permutation

namespace kiln {

namespace {

// Distinct streams for the two draws, so a file's held-out set and its weighted choice are
// unrelated (epoch_permutation hashes the seed and mixes in the part index).
constexpr uint64_t kHoldOutStream = 0x686f6c646f7574ull;  // "holdout"
constexpr uint64_t kWeightStream = 0x776569676874ull;     // "weight"

// The first `count` of a seeded permutation of 0..n-1, sorted, and the rest, sorted.
std::pair<std::vector<size_t>, std::vector<size_t>> seeded_choice(size_t n, size_t count,
                                                                  uint64_t seed, uint64_t part) {
  std::vector<size_t> order = epoch_permutation(n, seed, part);
  std::vector<size_t> chosen(order.begin(), order.begin() + static_cast<ptrdiff_t>(count));
  std::vector<size_t> rest(order.begin() + static_cast<ptrdiff_t>(count), order.end());
  std::sort(chosen.begin(), chosen.end());
  std::sort(rest.begin(), rest.end());
  return {std::move(chosen), std::move(rest)};
}

}  // namespace

IndexedSource::IndexedSource(const ExampleSource& base, std::vector<size_t> indices,
                             std::string what)
    : base_(&base), indices_(std::move(indices)), what_(std::move(what)) {}

ExampleView IndexedSource::example(size_t i) const {
  KILN_CHECK(i < indices_.size(), "{}: example {} of {}", what_, i, indices_.size());
  return base_->example(indices_[i]);
}

Mixture::Mixture(const std::vector<MixturePart>& parts, double eval_fraction, uint64_t seed) {
  KILN_CHECK(eval_fraction >= 0 && eval_fraction < 1, "eval fraction {}", eval_fraction);
  std::vector<const ExampleSource*> train, held_out;
  for (size_t k = 0; k < parts.size(); ++k) {
    const ExampleSource& src = *parts[k].source;
    const double weight = parts[k].weight;
    KILN_CHECK(weight > 0, "{}: weight {}", src.what(), weight);
    const size_t n = src.size();
    const auto h = static_cast<size_t>(std::llround(eval_fraction * static_cast<double>(n)));
    if (weight == 1.0 && h == 0) {
      train.push_back(&src);  // the whole file, once: no index table
      continue;
    }
    auto [out, kept] = seeded_choice(n, h, seed ^ kHoldOutStream, k);
    if (kept.empty()) {
      fail("{}: holding out {} of its {} examples for evaluation leaves none to train on",
           src.what(), h, n);
    }
    if (h > 0) {
      views_.push_back(std::make_unique<IndexedSource>(src, std::move(out),
                                                       fmt::format("{} (held out)", src.what())));
      held_out.push_back(views_.back().get());
    }
    const size_t m = kept.size();
    const auto count = static_cast<size_t>(std::llround(weight * static_cast<double>(m)));
    if (count == 0) {
      fail("{}: weight {} of its {} examples takes none of them", src.what(), weight, m);
    }
    std::vector<size_t> take;
    take.reserve(count);
    for (size_t c = 0; c < count / m; ++c) take.insert(take.end(), kept.begin(), kept.end());
    const auto [extra, unused] = seeded_choice(m, count % m, seed ^ kWeightStream, k);
    for (size_t i : extra) take.push_back(kept[i]);
    const std::string what =
        weight == 1.0 ? fmt::format("{} (less held out)", src.what())
                      : fmt::format("{} (weight {}: {} of {})", src.what(), weight, count, m);
    views_.push_back(std::make_unique<IndexedSource>(src, std::move(take), what));
    train.push_back(views_.back().get());
  }
  train_ = std::make_unique<ConcatSource>(std::move(train));
  if (eval_fraction > 0) held_out_ = std::make_unique<ConcatSource>(std::move(held_out));
}

}  // namespace kiln
