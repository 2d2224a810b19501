// The CPU backend: OpenMP loops for elementwise work, gemm() (OpenBLAS sgemm in fp32, oneDNN matmul
// in bf16; both OpenMP builds sharing one thread pool with kiln's loops) for every matrix product.
#pragma once

#include <mutex>

#include "kiln/kernels/backend_overrides.h"
#include "kiln/kernels/cpu/cpu_scratch.h"
#include "kiln/kernels/ops.h"

namespace kiln {

// The CPU's stream: everything runs at once on the calling thread, so every event is complete
// when recorded.
class SyncStream final : public Stream {
 public:
  SyncStream();
  std::shared_ptr<Event> record() override { return done_; }
  std::shared_ptr<Event> record_timed() override;  // a new event, set now
  void wait(std::shared_ptr<const Event>) override {}
  void wait_for(std::function<void()> blocking_wait) override { blocking_wait(); }
  void synchronize() override {}

 private:
  std::shared_ptr<Event> done_;  // one completed event, shared (record() never allocates)
};

// The synchronous CPU backend. Device memory is host memory (aligned_alloc), copies are memcpy,
// and every op has finished when it returns.
class CpuBackend final : public Backend {
 public:
  // bf16: mixed precision (train.dtype bf16): matrix products take bf16-rounded inputs with fp32
  // accumulation and fp32 outputs; everything else is identical to the fp32 backend.
  explicit CpuBackend(bool bf16 = false) : bf16_(bf16) {}
  std::string_view name() const override { return bf16_ ? "cpu-bf16" : "cpu"; }
  Device device() const override { return Device::kCpu; }
  ComputeDType compute_dtype() const override {
    return bf16_ ? ComputeDType::kBf16 : ComputeDType::kFp32;
  }
  bool supports(ComputeDType d) const override;
  DType activation_dtype() const override;
  bool bf16() const { return bf16_; }

  void* alloc(size_t bytes) const override;
  void free(void* p) const override;
  void* alloc_pinned(size_t bytes) const override { return alloc(bytes); }
  void free_pinned(void* p) const override { free(p); }
  DeviceMemoryStats memory_stats() const override { return memory_.stats(); }
  double peak_flops() const override;
  KILN_BACKEND_COPIES_OVERRIDE
  Stream& compute_stream() const override { return stream_; }
  std::unique_ptr<Stream> create_stream() const override { return std::make_unique<SyncStream>(); }

  // Every kernel op of Backend (ops.h), defined out of line.
  KILN_BACKEND_KERNEL_OPS_OVERRIDE

 private:
  // KILN_CHECK that matrix-product inputs are F32, or BF16 on the bf16 backend.
  void check_matmul_inputs(ConstDevPtr x, ConstDevPtr w, const char* op) const;

  bool bf16_ = false;
  mutable SyncStream stream_;
  mutable MemoryCounter memory_;
  // The fused cross-entropy's scratch (cpu_ce_scratch_bytes(), scratch_sizes.h): this backend's
  // memory, declared after memory_ (their destructors free into it).
  struct CeScratch {
    explicit CeScratch(const Backend& be)
        : rows(be),
          row_loss(be),
          xc(be),
          logits(be),
          dxc(be),
          xc16(be),
          dlogits16(be),
          w16(be),
          w32(be) {}
    CpuScratch rows, row_loss, xc, logits, dxc, xc16, dlogits16, w16, w32;
  };
  mutable std::mutex ce_mu_;
  mutable CeScratch ce_scratch_{*this};
  // The attention kernels' scratch (cpu_attention_scratch_bytes()): the team's per-thread heads
  // and the backward's per-query-head dK and dV.
  mutable std::mutex attn_mu_;
  mutable CpuScratch attn_team_{*this}, attn_heads_{*this};
  mutable std::once_flag peak_once_;
  mutable double peak_flops_ = 0;  // stateless: record() returns a completed event
};

}  // namespace kiln
