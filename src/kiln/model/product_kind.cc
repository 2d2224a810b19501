#include "kiln/model/product_kind.h"

#include "kiln/kernels/dropout_mask.h"
#include "kiln/model/lora_kind.h"
#include "kiln/model/plain_product.h"

namespace kiln {

std::unique_ptr<ProductKind> make_product_kind(const ModelConfig& c, const ParamLayout& layout,
                                               const Backend& be) {
  std::unique_ptr<ProductKind> kind = std::make_unique<PlainKind>(be, c, layout.layer_offsets());
  if (layout.has_lora()) kind = std::make_unique<LoraKind>(c, layout, be, std::move(kind));
  return kind;
}

uint64_t next_dropout_seed(uint64_t seed) { return dropout_stream_seed(seed, ~uint64_t{0}); }

}  // namespace kiln
