#include "kiln/model/hf_checkpoint.h"

#include <set>

#include "kiln/base/error.h"
#include "kiln/io/checkpoint_reader.h"
#include "kiln/io/checkpoint_writer.h"

namespace kiln {

namespace {
// Buffers some exporters leave in a checkpoint that are not parameters.
bool ignorable(const std::string& name) { return name.ends_with(".rotary_emb.inv_freq"); }
}  // namespace

void load_hf_weights(const fs::path& path, const ParamLayout& layout, ParamStore& store) {
  CheckpointReader reader(path);
  std::set<std::string> expected;
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const auto& e : layout.units()[u].entries) {
      expected.insert(e.name);
      reader.read_f32(e.name, e.shape, store.params(u).data() + e.offset);
    }
  }
  for (const auto& name : reader.names()) {
    if (expected.count(name) || ignorable(name)) continue;
    if (name == "lm_head.weight") {
      fail("{}: unexpected tensor lm_head.weight: config.json says tie_word_embeddings=true",
           reader.file_of(name));
    }
    fail("{}: unexpected tensor {} (not a parameter of this Qwen2 model)", reader.file_of(name),
         name);
  }
}

void save_hf_checkpoint(const fs::path& dir, const Qwen2Config& config, const ParamLayout& layout,
                        const ParamStore& store, DType dtype, uint64_t max_shard_bytes) {
  fs::create_directories(dir);
  const char* torch_dtype = dtype == DType::BF16  ? "bfloat16"
                            : dtype == DType::F16 ? "float16"
                                                  : "float32";
  write_file_atomic(dir / "config.json", config_to_json(config, torch_dtype).dump(2) + "\n");
  std::vector<TensorToWrite> tensors;
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const auto& e : layout.units()[u].entries) {
      tensors.push_back({e.name, e.shape, store.params(u).data() + e.offset});
    }
  }
  write_checkpoint_dir(dir, tensors, dtype, max_shard_bytes);
}

}  // namespace kiln
