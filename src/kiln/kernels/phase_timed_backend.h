// Where a step's device time goes: a Backend that forwards every call to another and, between
// start() and stop(), records a timed event on the compute stream after each op. The time from
// one mark to the next is charged to the later op's phase, so the phases add up to the compute
// stream's time from start() to its last op (host gaps between ops included, charged to the op
// that follows them). For `kiln bench train`; training never wraps its backend.
#pragma once

#include <array>
#include <memory>
#include <string_view>
#include <vector>

#include "kiln/kernels/backend_overrides.h"
#include "kiln/kernels/ops.h"

namespace kiln {

enum class Phase {
  kGemm,       // matmul_forward / matmul_backward (the layers' products)
  kLmHead,     // cross_entropy: the fused LM head products, softmax and loss
  kAttention,  // attention forward, backward and decode
  kOptimizer,  // optimizer steps, clipping, gradient norms
  kOther,      // norms, RoPE, SwiGLU, embedding, adds, dropout, casts, copies and fills
};
inline constexpr int kNumPhases = 5;
std::string_view phase_name(Phase p);

struct PhaseSeconds {
  std::array<double, kNumPhases> seconds{};
  double operator[](Phase p) const { return seconds[static_cast<int>(p)]; }
  double total() const;
};

class PhaseTimedBackend final : public Backend {
 public:
  explicit PhaseTimedBackend(const Backend& inner) : inner_(inner) {}

  // Marks the compute stream and starts charging ops to phases.
  void start();
  // Waits for the compute stream, stops timing and returns the time per phase since start().
  PhaseSeconds stop();

  std::string_view name() const override { return inner_.name(); }
  Device device() const override { return inner_.device(); }
  ComputeDType compute_dtype() const override { return inner_.compute_dtype(); }
  bool supports(ComputeDType d) const override { return inner_.supports(d); }
  DType activation_dtype() const override { return inner_.activation_dtype(); }
  void* alloc(size_t bytes) const override { return inner_.alloc(bytes); }
  void free(void* p) const override { inner_.free(p); }
  void* alloc_pinned(size_t bytes) const override { return inner_.alloc_pinned(bytes); }
  void free_pinned(void* p) const override { inner_.free_pinned(p); }
  DeviceMemoryStats memory_stats() const override { return inner_.memory_stats(); }
  double peak_flops() const override { return inner_.peak_flops(); }
  Stream& compute_stream() const override { return inner_.compute_stream(); }
  std::unique_ptr<Stream> create_stream() const override { return inner_.create_stream(); }

  KILN_BACKEND_COPIES_OVERRIDE
  // Every kernel op of Backend (ops.h), defined out of line.
  KILN_BACKEND_KERNEL_OPS_OVERRIDE

 private:
  struct Mark {
    Phase phase;
    std::shared_ptr<Event> done;
  };
  // After an op: its end mark, while timing.
  void mark(Phase p) const;

  const Backend& inner_;
  std::shared_ptr<Event> start_;  // null: not timing
  mutable std::vector<Mark> marks_;
};

}  // namespace kiln
