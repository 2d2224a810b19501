// libFuzzer target for parse_safetensors_header: any bytes must either parse into a header that
// keeps its promises or fail with kiln::Error. Anything else (a crash, an out-of-bounds read
// under ASan, another exception type, a broken invariant) is a bug. tests/io also runs this entry
// point over the seed corpus and deterministic mutations in the ordinary (gcc) test suite.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "kiln/base/error.h"
#include "kiln/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::SafetensorsHeader h;
  try {
    h = kiln::parse_safetensors_header(data, size, "fuzz.safetensors");
  } catch (const kiln::Error&) {
    return 0;
  }
  // A header that parses must describe tensors lying inside the data section, sized exactly,
  // in file order, without overlap.
  if (h.data_offset < 8 || h.data_offset > size) std::abort();
  const uint64_t data_size = size - h.data_offset;
  uint64_t reach = 0;
  for (const kiln::TensorInfo& t : h.tensors) {
    if (t.begin > t.end || t.end > data_size) std::abort();
    if (t.numel() * kiln::dtype_size(t.dtype) != t.nbytes()) std::abort();
    if (t.begin == t.end) continue;
    if (t.begin < reach) std::abort();
    reach = t.end;
  }
  return 0;
}
