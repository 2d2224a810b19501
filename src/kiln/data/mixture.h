// data.train's files as one training set (docs/recipe.md, "Several files, weights and held-out
// data"): each file's examples weighted, less an optional seeded held-out fraction that becomes
// the evaluation set.
//
//   part k, n_k examples:  held out  h_k = round(eval_fraction * n_k) of them: those with the
//                                    smallest hash of their input tokens under the seed; then
//                                    every example of any part whose tokens equal a held-out one
//                          kept      m_k = the rest, in file order
//                          weighted  c_k = round(weight_k * m_k) per epoch: floor(c_k / m_k)
//                                    copies of every kept example, then c_k mod m_k of them drawn
//                                    from the seed (no repeats), in file order
//   train()    = weighted part 0 + weighted part 1 + ...   (the samplers shuffle it per epoch)
//   held_out() = held-out part 0 + held-out part 1 + ...   (file order; an example whose tokens
//                                                          an earlier part holds out is left out,
//                                                          so each content is evaluated once)
//
// The held-out draw follows the examples' content, never a file's place in data.train: a file
// listed twice holds out the same examples both times, and no example trained on has the tokens
// of one held out. Every choice depends only on (seed, the examples, part index, weight_k,
// eval_fraction), never on the rank or the run's history, so every rank and every resumed run
// sees the same sets and the samplers' state (sampler.h) resumes exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/data/concat_source.h"
#include "kiln/data/example_source.h"

namespace kiln {

// The rule that chooses held-out examples, recorded in checkpoints: a resume under another rule
// would train on another set. 1: per listing of a file (kiln before issue 34, no record);
// 2: by content, as above.
inline constexpr int kHoldOutRule = 2;

// Chosen examples of another source, in the order given (indices may repeat). The base is
// borrowed and must outlive it.
class IndexedSource final : public ExampleSource {
 public:
  IndexedSource(const ExampleSource& base, std::vector<size_t> indices, std::string what);
  size_t size() const override { return indices_.size(); }
  ExampleView example(size_t i) const override;
  const std::string& what() const override { return what_; }

 private:
  const ExampleSource* base_;
  std::vector<size_t> indices_;
  std::string what_;
};

struct MixturePart {
  const ExampleSource* source;  // borrowed
  double weight = 1.0;          // > 0
};

class Mixture {
 public:
  // Throws kiln::Error naming the part's source when its weight takes none of its examples, or
  // when holding out leaves it none.
  Mixture(const std::vector<MixturePart>& parts, double eval_fraction, uint64_t seed);
  Mixture(const Mixture&) = delete;
  Mixture& operator=(const Mixture&) = delete;

  const ExampleSource& train() const { return *train_; }
  // nullptr when eval_fraction is 0; may hold no example when every file is small.
  const ExampleSource* held_out() const { return held_out_.get(); }

 private:
  const ExampleSource* weighted(const ExampleSource& src, const std::vector<size_t>& kept,
                                double weight, uint64_t seed, size_t part);

  std::vector<std::unique_ptr<IndexedSource>> views_;  // what train_ and held_out_ read
  std::unique_ptr<ConcatSource> train_, held_out_;
};

}  // namespace kiln
