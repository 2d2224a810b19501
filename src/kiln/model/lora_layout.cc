#include "kiln/model/lora_layout.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiln {

namespace {

struct GroupSpec {
  ProjectionGroup id;
  std::vector<LoraTarget> members;  // the targets whose outputs the base product concatenates
};

const std::array<GroupSpec, kNumProjectionGroups>& group_specs() {
  using T = LoraTarget;
  static const std::array<GroupSpec, kNumProjectionGroups> specs{{
      {ProjectionGroup::kQkv, {T::kQ, T::kK, T::kV}},
      {ProjectionGroup::kO, {T::kO}},
      {ProjectionGroup::kGateUp, {T::kGate, T::kUp}},
      {ProjectionGroup::kDown, {T::kDown}},
  }};
  return specs;
}

}  // namespace

int64_t LoraGroup::b_rows() const {
  int64_t n = 0;
  for (int64_t s : out_size) n += s;
  return n;
}

int64_t LoraOffsets::max_ranks() const {
  int64_t m = 0;
  for (const LoraGroup& g : groups) m = std::max<int64_t>(m, g.ranks() * rank);
  return m;
}

int64_t LoraOffsets::max_out() const {
  int64_t m = 0;
  for (const LoraGroup& g : groups) m = std::max(m, g.targets.empty() ? 0 : g.out);
  return m;
}

int64_t LoraOffsets::max_in() const {
  int64_t m = 0;
  for (const LoraGroup& g : groups) m = std::max(m, g.targets.empty() ? 0 : g.in);
  return m;
}

int64_t LoraOffsets::total_ranks() const {
  int64_t n = 0;
  for (const LoraGroup& g : groups) n += g.ranks() * rank;
  return n;
}

ParamUnit lora_unit(const ModelConfig& c, const LoraConfig& lora, int64_t layer,
                    LoraOffsets* offsets) {
  ParamUnit u{fmt::format("layers.{}.lora", layer), {}, 0};
  LoraOffsets o;
  o.rank = lora.rank;
  for (const GroupSpec& spec : group_specs()) {
    LoraGroup& g = o.groups[static_cast<int>(spec.id)];
    int64_t column = 0;
    for (LoraTarget t : spec.members) {
      const LoraShape s = lora_shape(c, t);
      g.in = s.in;
      if (lora.has(t)) {
        g.targets.push_back(t);
        g.out_begin.push_back(column);
        g.out_size.push_back(s.out);
      }
      column += s.out;
    }
    g.out = column;
    for (size_t i = 0; i < g.targets.size(); ++i) {  // the A's, adjacent
      const size_t at =
          u.add(peft_tensor_name(layer, g.targets[i], LoraFactor::kA), {lora.rank, g.in}, true);
      if (i == 0) g.a = at;
    }
    for (size_t i = 0; i < g.targets.size(); ++i) {  // then the B's
      const size_t at = u.add(peft_tensor_name(layer, g.targets[i], LoraFactor::kB),
                              {g.out_size[i], lora.rank}, true);
      if (i == 0) g.b = at;
    }
  }
  *offsets = std::move(o);
  return u;
}

}  // namespace kiln
