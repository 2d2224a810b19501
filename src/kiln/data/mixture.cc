#include "kiln/data/mixture.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <unordered_set>

#include "kiln/base/error.h"
#include "kiln/data/sampler.h"      // epoch_permutation
#include "kiln/data/token_cache.h"  // hash_bytes

namespace kiln {

namespace {

// Distinct streams for the two draws, so a file's held-out set and its weighted choice are
// unrelated (epoch_permutation hashes the seed and mixes in the part index).
constexpr uint64_t kHoldOutStream = 0x686f6c646f7574ull;  // "holdout"
constexpr uint64_t kWeightStream = 0x776569676874ull;     // "weight"

// An example's key for the held-out draw: a 64-bit hash of its input tokens under the seed, so
// the draw follows the example's content, not the position of its file in data.train.
uint64_t content_key(const ExampleSource& src, size_t i, uint64_t seed) {
  const std::span<const int32_t> ids = src.example(i).input_ids;
  return hash_bytes(ids.data(), ids.size_bytes(), seed);
}

// The `count` examples of `src` with the smallest content keys (ties by index), sorted, and the
// rest, sorted: the same choice for the same file, wherever and however often it is listed.
std::pair<std::vector<size_t>, std::vector<size_t>> held_out_choice(const ExampleSource& src,
                                                                    size_t count, uint64_t seed,
                                                                    std::vector<uint64_t>& keys) {
  const size_t n = src.size();
  keys.resize(n);
  for (size_t i = 0; i < n; ++i) keys[i] = content_key(src, i, seed);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return keys[a] != keys[b] ? keys[a] < keys[b] : a < b; });
  std::vector<size_t> chosen(order.begin(), order.begin() + static_cast<ptrdiff_t>(count));
  std::vector<size_t> rest(order.begin() + static_cast<ptrdiff_t>(count), order.end());
  std::sort(chosen.begin(), chosen.end());
  std::sort(rest.begin(), rest.end());
  return {std::move(chosen), std::move(rest)};
}

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
  // Each part's held-out and kept examples; then an example whose content is held out anywhere
  // is held out everywhere (a file listed twice, or one example in two files), so no training
  // example is one the evaluation holds out.
  std::vector<std::vector<size_t>> out(parts.size()), kept(parts.size());
  std::vector<std::vector<uint64_t>> keys(parts.size());
  std::unordered_set<uint64_t> held_keys;
  for (size_t k = 0; k < parts.size(); ++k) {
    const ExampleSource& src = *parts[k].source;
    KILN_CHECK(parts[k].weight > 0, "{}: weight {}", src.what(), parts[k].weight);
    const size_t n = src.size();
    const auto h = static_cast<size_t>(std::llround(eval_fraction * static_cast<double>(n)));
    if (h == 0) {
      kept[k].resize(n);
      std::iota(kept[k].begin(), kept[k].end(), size_t{0});
      continue;
    }
    std::tie(out[k], kept[k]) = held_out_choice(src, h, seed ^ kHoldOutStream, keys[k]);
    for (size_t i : out[k]) held_keys.insert(keys[k][i]);
  }
  std::vector<const ExampleSource*> train, held_out;
  std::unordered_set<uint64_t> evaluated;  // the held-out set holds each content once
  for (size_t k = 0; k < parts.size(); ++k) {
    const ExampleSource& src = *parts[k].source;
    const size_t n = src.size();
    if (!held_keys.empty()) {
      if (keys[k].empty()) {
        keys[k].resize(n);
        for (size_t i = 0; i < n; ++i) keys[k][i] = content_key(src, i, seed ^ kHoldOutStream);
      }
      std::vector<size_t> still;
      for (size_t i : kept[k]) (held_keys.count(keys[k][i]) ? out[k] : still).push_back(i);
      std::sort(out[k].begin(), out[k].end());
      kept[k] = std::move(still);
      std::erase_if(out[k], [&](size_t i) { return !evaluated.insert(keys[k][i]).second; });
    }
    if (kept[k].empty()) {
      fail("{}: holding out {} of its {} examples for evaluation leaves none to train on",
           src.what(), out[k].size(), n);
    }
    if (!out[k].empty()) {
      views_.push_back(std::make_unique<IndexedSource>(src, std::move(out[k]),
                                                       fmt::format("{} (held out)", src.what())));
      held_out.push_back(views_.back().get());
    }
    train.push_back(weighted(src, kept[k], parts[k].weight, seed, k));
  }
  train_ = std::make_unique<ConcatSource>(std::move(train));
  if (eval_fraction > 0) held_out_ = std::make_unique<ConcatSource>(std::move(held_out));
}

// `kept` (indices of `src`, sorted) weighted as the header says; the source itself when that is
// the whole file once.
const ExampleSource* Mixture::weighted(const ExampleSource& src, const std::vector<size_t>& kept,
                                       double weight, uint64_t seed, size_t part) {
  const size_t m = kept.size();
  if (weight == 1.0 && m == src.size()) return &src;  // the whole file, once: no index table
  const auto count = static_cast<size_t>(std::llround(weight * static_cast<double>(m)));
  if (count == 0) {
    fail("{}: weight {} of its {} examples takes none of them", src.what(), weight, m);
  }
  std::vector<size_t> take;
  take.reserve(count);
  for (size_t c = 0; c < count / m; ++c) take.insert(take.end(), kept.begin(), kept.end());
  const auto [extra, unused] = seeded_choice(m, count % m, seed ^ kWeightStream, part);
  for (size_t i : extra) take.push_back(kept[i]);
  const std::string what =
      weight == 1.0 ? fmt::format("{} (less held out)", src.what())
                    : fmt::format("{} (weight {}: {} of {})", src.what(), weight, count, m);
  views_.push_back(std::make_unique<IndexedSource>(src, std::move(take), what));
  return views_.back().get();
}

}  // namespace kiln
