#include "kiln/data/concat_source.h"

#include <algorithm>

#include "kiln/base/error.h"

namespace kiln {

ConcatSource::ConcatSource(std::vector<const ExampleSource*> parts) : parts_(std::move(parts)) {
  starts_.push_back(0);
  for (const ExampleSource* p : parts_) {
    starts_.push_back(starts_.back() + p->size());
    what_ += (what_.empty() ? "" : " + ") + p->what();
  }
}

ExampleView ConcatSource::example(size_t i) const {
  KILN_CHECK(i < size(), "{}: example {} of {}", what_, i, size());
  // The last part whose first example is <= i (empty parts are skipped over).
  const auto after = std::upper_bound(starts_.begin(), starts_.end(), i);
  const size_t k = static_cast<size_t>(after - starts_.begin()) - 1;
  return parts_[k]->example(i - starts_[k]);
}

}  // namespace kiln
