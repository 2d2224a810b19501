// What an unknown recipe key may have meant: another fine-tuning tool's name for one of kiln's
// keys, or a near miss. The recipe reader appends the hint to its "unknown key" error.
#pragma once

#include <span>
#include <string>
#include <vector>

namespace kiln {

// A key another fine-tuning tool spells otherwise, matched by its last component ("lora.r",
// "r" and axolotl's top-level "lora_r" alike): an unknown key that is one of these is answered
// with kiln's key, `recipe.yaml:3: unknown key 'lora.r' (PEFT's name; kiln's is 'lora.rank')`.
struct ForeignKey {
  const char* name;      // "r"
  const char* whose;     // "PEFT's"
  const char* kiln_key;  // "lora.rank": a key of recipe_keys()
  const char* note;      // "" or what differs beyond the name
};
std::span<const ForeignKey> foreign_recipe_keys();

// The hint for unknown `key`: another tool's name for a kiln key ("lora.r": " (PEFT's name;
// kiln's is 'lora.rank')"), else a near miss among `candidates` (" (did you mean 'x'?)"), else a
// key elsewhere with the same last component ("train.lr" -> "optimizer.lr"), else one whose last
// component is a near miss ("train.warmup_step" -> "schedule.warmup_steps"), else "".
std::string unknown_key_hint(const std::string& key, const std::vector<std::string>& candidates);

}  // namespace kiln
