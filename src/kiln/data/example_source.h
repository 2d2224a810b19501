// Read-only access to a dataset's examples, wherever they live: in memory (TokenDataset) or in a
// memory-mapped tokenized cache (TokenizedDataset). The samplers read examples only through it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace kiln {

// One example's tokens, borrowed from its dataset. Labels are unshifted (HF convention): labels[t]
// is the token the model should produce at position t-1, or kIgnoreIndex (-100) for no loss.
struct ExampleView {
  std::span<const int32_t> input_ids;  // (len)
  std::span<const int32_t> labels;     // (len)
  size_t size() const { return input_ids.size(); }
};

class ExampleSource {
 public:
  virtual ~ExampleSource() = default;
  virtual size_t size() const = 0;
  // Example i < size(); the view stays valid as long as the source.
  virtual ExampleView example(size_t i) const = 0;
  // The source file (or a name), for messages.
  virtual const std::string& what() const = 0;
};

}  // namespace kiln
