// libFuzzer target for the recipe loader (parse_recipe: YAML, dotted keys, types, ranges, paths):
// any bytes must give a Recipe or kiln::Error, never a crash or another exception. A recipe that
// loads must survive its own round trip: recipe_to_yaml of it loads to an equal Recipe.
// tests/train also runs this entry point over the seeds and their mutations in the ordinary
// (gcc) suite.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "kiln/base/error.h"
#include "kiln/train/recipe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kiln::Recipe r;
  try {
    r = kiln::parse_recipe(text, "fuzz.yaml", "/base", {});
  } catch (const kiln::Error&) {
    return 0;  // rejected with a message: fine
  }
  const kiln::Recipe again = kiln::parse_recipe(kiln::recipe_to_yaml(r), "round trip", "/", {});
  if (!(again == r)) {
    std::fprintf(stderr, "round trip changed the recipe:\n%s\n---\n%s\n",
                 kiln::recipe_to_yaml(r).c_str(), kiln::recipe_to_yaml(again).c_str());
    std::abort();
  }
  return 0;
}
