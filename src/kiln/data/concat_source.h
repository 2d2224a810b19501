// Several example sources read as one (data.train as a list of files): example i is the i-th of
// their concatenation, in the order given. The parts are borrowed and must outlive it.
#pragma once

#include <string>
#include <vector>

#include "kiln/data/example_source.h"

namespace kiln {

class ConcatSource final : public ExampleSource {
 public:
  explicit ConcatSource(std::vector<const ExampleSource*> parts);
  size_t size() const override { return starts_.back(); }
  ExampleView example(size_t i) const override;
  // The parts' names joined by " + ".
  const std::string& what() const override { return what_; }

 private:
  std::vector<const ExampleSource*> parts_;
  std::vector<size_t> starts_;  // (parts + 1): part k holds examples [starts_[k], starts_[k+1])
  std::string what_;
};

}  // namespace kiln
