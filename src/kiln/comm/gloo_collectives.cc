#include "kiln/comm/gloo_collectives.h"

#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kiln/base/error.h"

namespace kiln::gloo_detail {

namespace {

struct Sum {
  template <typename T>
  T operator()(T a, T b) const {
    return a + b;
  }
};

// NaN in either operand wins, as torch.maximum does: a NaN gradient must not vanish in a max.
struct Max {
  template <typename T>
  T operator()(T a, T b) const {
    return (a != a || a > b) ? a : b;
  }
};

template <typename T, typename Op>
void reduce_plain(void* c, const void* a, const void* b, size_t n) {
  T* out = static_cast<T*>(c);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = Op()(x[i], y[i]);
}

template <typename Op, float (*ToF32)(uint16_t), uint16_t (*FromF32)(float)>
void reduce_half(void* c, const void* a, const void* b, size_t n) {
  uint16_t* out = static_cast<uint16_t*>(c);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i) out[i] = FromF32(Op()(ToF32(x[i]), ToF32(y[i])));
}

template <typename Op>
ReduceFn pick(DType t) {
  switch (t) {
    case DType::F32:
      return reduce_plain<float, Op>;
    case DType::BF16:
      return reduce_half<Op, bf16_to_f32, f32_to_bf16>;
    case DType::F16:
      return reduce_half<Op, f16_to_f32, f32_to_f16>;
  }
  KILN_CHECK(false, "unknown dtype {}", static_cast<int>(t));
  return nullptr;
}

// One message slot for the ring, outside the range of Gloo's own collectives (prefixes 0x01 to
// 0x08 in gloo/types.h). Messages on one pair and slot match in issue order.
constexpr uint64_t kRingSlot = (uint64_t{0x4b} << 56) | 1;
// Segments small enough that reduction of one overlaps the transfer of the next, large enough
// that per-message overhead is noise (Gloo's all-reduce uses 1 MiB).
constexpr size_t kSegmentBytes = size_t{1} << 20;

std::chrono::milliseconds remaining(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  // Gloo reads -1 ms as "the context default"; an expired deadline must time out at once.
  return std::max(left, std::chrono::milliseconds(1));
}

}  // namespace

ReduceFn reduce_fn(DType t, ReduceOp op) {
  return op == ReduceOp::kMax ? pick<Max>(t) : pick<Sum>(t);
}

ReduceFn reduce_fn_f64(ReduceOp op) {
  return op == ReduceOp::kMax ? reduce_plain<double, Max> : reduce_plain<double, Sum>;
}

void divide_by(void* data, size_t n, DType t, int divisor) {
  const float d = static_cast<float>(divisor);
  if (t == DType::F32) {
    float* x = static_cast<float*>(data);
    for (size_t i = 0; i < n; ++i) x[i] /= d;
    return;
  }
  uint16_t* x = static_cast<uint16_t*>(data);
  if (t == DType::BF16) {
    for (size_t i = 0; i < n; ++i) x[i] = f32_to_bf16(bf16_to_f32(x[i]) / d);
  } else {
    for (size_t i = 0; i < n; ++i) x[i] = f32_to_f16(f16_to_f32(x[i]) / d);
  }
}

void ring_reduce_scatter(const std::shared_ptr<gloo::Context>& context, void* out, const void* in,
                         size_t n, DType t, ReduceFn fn, std::chrono::milliseconds timeout,
                         std::vector<uint8_t>& scratch) {
  const int size = context->size;
  const int rank = context->rank;
  const size_t es = dtype_size(t);
  const size_t block = n * es;
  const auto* in8 = static_cast<const uint8_t*>(in);
  if (size == 1) {
    if (out != in) std::memmove(out, in, block);
    return;
  }
  if (n == 0) return;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  const size_t seg_elems = std::max<size_t>(1, kSegmentBytes / es);
  const size_t segments = (n + seg_elems - 1) / seg_elems;
  auto seg_offset = [&](size_t j) { return j * seg_elems * es; };
  auto seg_count = [&](size_t j) { return std::min(n, (j + 1) * seg_elems) - j * seg_elems; };
  // Step s sends the partial sum of block (rank - s - 1) and receives that of block
  // (rank - s - 2), adding this rank's contribution; the last step (s = size - 2) receives block
  // `rank`, now reduced over every rank.
  auto block_at = [&](int s, int shift) {
    return static_cast<size_t>((rank - s - shift + 2 * size) % size);
  };

  // Partial sums arrive in tmp[s % 2] and are forwarded from there at step s + 1, so tmp[s % 2]
  // is free again (its sends drained) by step s + 2.
  const int nbuf = std::min(2, size - 1);
  const size_t need = static_cast<size_t>(nbuf) * block;
  if (scratch.size() < need) scratch.resize(need);
  uint8_t* tmp_mem[2] = {scratch.data(), scratch.data() + block};
  std::unique_ptr<gloo::transport::UnboundBuffer> tmp[2];
  for (int i = 0; i < nbuf; ++i) tmp[i] = context->createUnboundBuffer(tmp_mem[i], block);
  // Gloo's buffers are read-write; the input is only ever sent from.
  auto input = context->createUnboundBuffer(const_cast<uint8_t*>(in8), block * size);
  size_t pending[3] = {0, 0, 0};  // sends in flight from tmp[0], tmp[1], input
  auto drain = [&](gloo::transport::UnboundBuffer& buf, size_t& count) {
    for (; count > 0; --count) buf.waitSend(remaining(deadline));
  };

  const size_t first = block_at(0, 1) * block;
  for (size_t j = 0; j < segments; ++j) {
    input->send(right, kRingSlot, first + seg_offset(j), seg_count(j) * es);
    ++pending[2];
  }
  for (int s = 0; s <= size - 2; ++s) {
    const int b = s % 2;
    const bool last = s == size - 2;
    drain(*tmp[b], pending[b]);
    for (size_t j = 0; j < segments; ++j) {
      tmp[b]->recv(left, kRingSlot, seg_offset(j), seg_count(j) * es);
    }
    const uint8_t* mine = in8 + block_at(s, 2) * block;
    for (size_t j = 0; j < segments; ++j) {
      // Segments from one peer on one slot complete in the order they were posted.
      tmp[b]->waitRecv(remaining(deadline));
      const size_t off = seg_offset(j);
      uint8_t* dst = last ? static_cast<uint8_t*>(out) + off : tmp_mem[b] + off;
      fn(dst, tmp_mem[b] + off, mine + off, seg_count(j));
      if (!last) {
        tmp[b]->send(right, kRingSlot, off, seg_count(j) * es);
        ++pending[b];
      }
    }
  }
  drain(*input, pending[2]);
  for (int i = 0; i < 2; ++i) {
    if (tmp[i]) drain(*tmp[i], pending[i]);
  }
}

}  // namespace kiln::gloo_detail
