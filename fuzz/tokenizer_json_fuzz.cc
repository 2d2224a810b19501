// libFuzzer target for the tokenizer.json loader (Tokenizer::from_json_text): any bytes must
// either load or fail with kiln::Error. A tokenizer that loads must then encode and decode
// without crashing, give ids inside its vocabulary, and decode what it encoded without error.
// tests/text also runs this entry point over mutated small tokenizer.json files in the
// ordinary (gcc) test suite.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/error.h"
#include "kiln/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<kiln::Tokenizer> tok;
  try {
    tok = kiln::Tokenizer::from_json_text(text, "fuzz.json");
  } catch (const kiln::Error&) {
    return 0;
  }
  const std::string samples[] = {
      "Hello, world! It's 2024.\n\n  <|im_start|>user\nhi<|im_end|>",
      "caf\xC3\xA9 e\xCC\x81 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD\t\r\n  ",
      std::string(300, 'a') + std::string(70, ' ') + "x",
  };
  for (const std::string& s : samples) {
    for (const bool parse_special : {true, false}) {
      std::vector<int32_t> ids;
      try {
        ids = tok->encode(s, parse_special);
      } catch (const kiln::Error&) {
        continue;  // e.g. a hostile regex hitting the match limit
      }
      for (const int32_t id : ids) {
        if (id < 0 || id >= tok->vocab_size() || !tok->token_str(id)) std::abort();
      }
      try {
        (void)tok->decode(ids);
        (void)tok->decode(ids, true);
      } catch (const kiln::Error&) {
        std::abort();  // every id came from this tokenizer: decoding cannot fail
      }
    }
  }
  return 0;
}
