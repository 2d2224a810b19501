#include "kiln/model_files/hf_checkpoint.h"

#include <algorithm>
#include <set>

#include "kiln/base/error.h"
#include "kiln/io/checkpoint_reader.h"
#include "kiln/io/checkpoint_writer.h"
#include "kiln/tensor/buffer.h"

namespace kiln {

namespace {
// Buffers some exporters leave in a checkpoint that are not parameters.
bool ignorable(const std::string& name) { return name.ends_with(".rotary_emb.inv_freq"); }
}  // namespace

HfWeightsReader::HfWeightsReader(const fs::path& path, const ParamLayout& layout)
    : reader_(std::make_unique<CheckpointReader>(path)), layout_(layout) {
  std::set<std::string> expected;
  for (const auto& u : layout.units()) {
    for (const auto& e : u.entries) {
      expected.insert(e.name);
      const TensorInfo& t = reader_->info(e.name);  // names the tensor when it is missing
      if (t.shape != e.shape) {
        fail("{}: tensor {} has shape {}, expected {}", reader_->file_of(e.name), e.name,
             format_shape(t.shape), format_shape(e.shape));
      }
    }
  }
  for (const auto& name : reader_->names()) {
    if (expected.count(name) || ignorable(name)) continue;
    if (name == "lm_head.weight") {
      fail("{}: unexpected tensor lm_head.weight: config.json says tie_word_embeddings=true",
           reader_->file_of(name));
    }
    if (name.ends_with("_proj.bias")) {
      fail(
          "{}: unexpected tensor {}: config.json's family and attention_bias give the model no "
          "q/k/v biases",
          reader_->file_of(name), name);
    }
    fail("{}: unexpected tensor {} (not a parameter of this model)", reader_->file_of(name), name);
  }
}

HfWeightsReader::~HfWeightsReader() = default;

void HfWeightsReader::read_unit(int unit, float* out) const {
  for (const auto& e : layout_.units()[unit].entries) {
    reader_->read_f32(e.name, e.shape, out + e.offset);
  }
}

void HfWeightsReader::read_range(int unit, ShardRange r, float* out) const {
  const ParamUnit& u = layout_.units()[unit];
  KILN_CHECK(r.begin <= r.end && r.end <= u.numel, "unit {}: range [{}, {}) outside its {}", unit,
             r.begin, r.end, u.numel);
  for (const auto& e : u.entries) {
    const size_t lo = std::max(r.begin, e.offset), hi = std::min(r.end, e.offset + e.numel);
    if (lo >= hi) continue;
    reader_->read_f32_range(e.name, e.shape, lo - e.offset, hi - lo, out + (lo - r.begin));
  }
}

void load_hf_weights(const fs::path& path, const ParamLayout& layout, ParamStore& store) {
  HfWeightsReader reader(path, layout);
  for (int u = 0; u < layout.num_units(); ++u) {
    std::vector<float> host(layout.units()[u].numel);
    reader.read_unit(u, host.data());
    store.load_unit(u, host.data());
  }
}

size_t hf_save_buffer_floats(const ParamLayout& layout) {
  size_t max_unit = 0;
  for (const auto& u : layout.units()) max_unit = std::max(max_unit, u.numel);
  return max_unit;
}

void save_hf_weights_streaming(const fs::path& dir, const ParamLayout& layout,
                               const std::function<void(int unit, float* out)>& read_unit,
                               DType dtype, uint64_t max_shard_bytes) {
  auto buf = std::make_shared<Buffer<float>>(hf_save_buffer_floats(layout));
  auto current = std::make_shared<int>(-1);
  std::vector<TensorToWrite> tensors;
  for (int u = 0; u < layout.num_units(); ++u) {
    for (const auto& e : layout.units()[u].entries) {
      tensors.push_back({e.name, e.shape, nullptr, [=, &read_unit]() -> const float* {
                           if (*current != u) {
                             read_unit(u, buf->data());
                             *current = u;
                           }
                           return buf->data() + e.offset;
                         }});
    }
  }
  write_checkpoint_dir(dir, tensors, dtype, max_shard_bytes);
}

void save_hf_checkpoint_streaming(const fs::path& dir, const ModelConfig& config,
                                  const ParamLayout& layout,
                                  const std::function<void(int unit, float* out)>& read_unit,
                                  DType dtype, uint64_t max_shard_bytes) {
  fs::create_directories(dir);
  const char* torch_dtype = dtype == DType::BF16  ? "bfloat16"
                            : dtype == DType::F16 ? "float16"
                                                  : "float32";
  write_file_atomic(dir / "config.json", config_to_json(config, torch_dtype).dump(2) + "\n");
  save_hf_weights_streaming(dir, layout, read_unit, dtype, max_shard_bytes);
}

void save_hf_checkpoint(const fs::path& dir, const ModelConfig& config, const ParamLayout& layout,
                        const ParamStore& store, DType dtype, uint64_t max_shard_bytes) {
  save_hf_checkpoint_streaming(
      dir, config, layout, [&](int u, float* out) { store.read_unit(u, out); }, dtype,
      max_shard_bytes);
}

}  // namespace kiln
