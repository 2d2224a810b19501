// libFuzzer target for parse_store_request, the TCP store server's parser of bytes from the
// network: the input is a stream of request frames, parsed one after another as the server does.
// Each frame must either parse into a request that keeps its promises or fail with kiln::Error.
// Anything else (a crash, an out-of-bounds read under ASan, another exception type, a broken
// invariant) is a bug. The small limits let the fuzzer reach the bound checks. tests/comm also
// runs this entry point over deterministic mutations in the ordinary (gcc) test suite.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "kiln/base/error.h"
#include "kiln/comm/tcp_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const kiln::StoreLimits limits{64, 1024};
  size_t pos = 0;
  while (pos < size) {
    kiln::StoreRequest req;
    size_t n = 0;
    try {
      n = kiln::parse_store_request(data + pos, size - pos, limits, req);
    } catch (const kiln::Error&) {
      return 0;  // the server closes the connection here
    }
    if (n == 0) {
      // A partial frame: the server waits for more, which it may only do within the bound.
      if (size - pos >= 4) {
        const uint8_t* p = data + pos;
        const uint64_t len = p[0] | p[1] << 8 | p[2] << 16 | uint64_t{p[3]} << 24;
        if (len == 0 || len > limits.max_frame_bytes()) std::abort();
      }
      return 0;
    }
    if (n < 5 || n > size - pos || n > limits.max_frame_bytes() + 4) std::abort();
    for (const std::string& k : req.keys) {
      if (k.size() > limits.max_key_bytes) std::abort();
    }
    if (req.token.size() > limits.max_key_bytes) std::abort();
    if (req.value.size() > limits.max_value_bytes) std::abort();
    const bool one_key = req.op == kiln::StoreOp::kSet || req.op == kiln::StoreOp::kGet ||
                         req.op == kiln::StoreOp::kAdd || req.op == kiln::StoreOp::kDelete;
    if (one_key && req.keys.size() != 1) std::abort();
    // The encoding is canonical: what parsed re-encodes to exactly the bytes it came from.
    const kiln::Bytes again = kiln::encode_store_request(req);
    if (again.size() != n || std::memcmp(again.data(), data + pos, n) != 0) std::abort();
    pos += n;
  }
  return 0;
}
