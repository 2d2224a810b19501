// Reading a rank's part of an HF checkpoint: HfWeightsReader::read_range over any range of a
// unit (crossing tensor boundaries, as shard ranges do) equals that slice of the whole unit.
#include "kiln/model_files/hf_checkpoint.h"

#include <gtest/gtest.h>

#include <vector>

#include "common/small_model.h"
#include "common/temp_dir.h"
#include "common/test_backend.h"

namespace kiln {
namespace {

fs::path temp_model_dir() { return testing::fresh_path("kiln_hf_range"); }

TEST(HfWeightsReader, RangesEqualSlicesOfTheUnit) {
  for (bool tied : {true, false}) {
    const ModelConfig c = testing::small_config(tied);
    const ParamLayout layout(c);
    ParamStore store(layout, testing::cpu_fp32(), /*with_grads=*/false);
    testing::randomize(store, layout, 7);
    const fs::path dir = temp_model_dir();
    save_hf_checkpoint(dir, c, layout, store, DType::BF16);
    const HfWeightsReader reader(dir, layout);
    for (int u = 0; u < layout.num_units(); ++u) {
      const size_t n = layout.units()[u].numel;
      std::vector<float> whole(n);
      reader.read_unit(u, whole.data());
      // The shard ranges of 1 to 5 ranks (units padded to a multiple of S), plus one element.
      for (size_t S = 1; S <= 5; ++S) {
        const size_t shard = (n + S - 1) / S;
        for (size_t r = 0; r < S; ++r) {
          const ShardRange range{std::min(n, r * shard), std::min(n, (r + 1) * shard)};
          std::vector<float> part(range.size() + 1, -99.0f);
          reader.read_range(u, range, part.data());
          for (size_t i = 0; i < range.size(); ++i) {
            ASSERT_EQ(part[i], whole[range.begin + i]) << "unit " << u << " S " << S << " r " << r;
          }
          EXPECT_EQ(part[range.size()], -99.0f) << "wrote past the range";
        }
      }
      std::vector<float> one(1);
      reader.read_range(u, {n - 1, n}, one.data());
      EXPECT_EQ(one[0], whole[n - 1]);
      EXPECT_ANY_THROW(reader.read_range(u, {n - 1, n + 1}, one.data()));
    }
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace kiln
