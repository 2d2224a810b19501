// dpo.precompute_reference: the reference's log-probabilities of every pair of the run, computed
// once before the first step and kept in the run directory (reference_logps.bin), so that the
// steps hold and run no reference model and a resumed or restarted run reads the very numbers
// the first one computed.
//
// A pair's four doubles: its chosen sequence's (log-probability, completion length), then its
// rejected one's, as Decoder::sequence_logps writes them; the training examples' pairs (by
// their index in the run's training set), then the evaluation set's.
//
// reference_logps.bin: "KILNREF1", the two counts (uint64), the doubles, then XXH3-64 of all
// before it; written atomically, so a file is whole or absent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "kiln/data/batch.h"

namespace kiln {

class ReferenceTable {
 public:
  ReferenceTable(size_t train_pairs, size_t eval_pairs);

  size_t train_pairs() const { return train_; }
  size_t eval_pairs() const { return eval_; }
  // Pair i of the training set, or of the evaluation set: its four doubles.
  double* pair(size_t i, bool eval);
  const double* pair(size_t i, bool eval) const;
  std::vector<double>& values() { return values_; }

  // The batch's rows' (log-probability, length), (B, 2) into `out`: row 2p and 2p + 1 from the
  // pair batch.examples[2p] (zeros for padding, whose pairs count for nothing).
  void rows_of(const Batch& batch, bool eval, double* out) const;

  void save(const std::filesystem::path& file) const;
  // The table in `file`, or nullopt when there is none. kiln::Error naming the file when it is
  // damaged or holds other counts (the run's data changed).
  static std::optional<ReferenceTable> load(const std::filesystem::path& file, size_t train_pairs,
                                            size_t eval_pairs);

 private:
  size_t offset(size_t i, bool eval) const;  // of pair i's first double

  size_t train_, eval_;
  std::vector<double> values_;  // ((train_ + eval_), 4)
};

}  // namespace kiln
