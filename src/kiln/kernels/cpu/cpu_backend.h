// The CPU backend: OpenMP loops for elementwise work, gemm() (OpenBLAS sgemm in fp32, oneDNN matmul
// in bf16; both OpenMP builds sharing one thread pool with kiln's loops) for every matrix product.
#pragma once

#include "kiln/kernels/ops.h"

namespace kiln {

class CpuBackend final : public Backend {
 public:
  // bf16: mixed precision (train.dtype bf16): matrix products take bf16-rounded inputs with fp32
  // accumulation and fp32 outputs; everything else is identical to the fp32 backend.
  explicit CpuBackend(bool bf16 = false) : bf16_(bf16) {}
  std::string_view name() const override { return bf16_ ? "cpu-bf16" : "cpu"; }
  bool bf16() const { return bf16_; }

  void embedding_forward(float* out, const int32_t* ids, const float* wte, int N,
                         int C) const override;
  void embedding_backward(float* dwte, const float* dout, const int32_t* ids, int N,
                          int C) const override;
  void rmsnorm_forward(float* out, float* rstd, const float* x, const float* w, int N, int C,
                       float eps) const override;
  void add_rmsnorm_forward(float* sum, float* out, float* rstd, const float* a, const float* b,
                           const float* w, int N, int C, float eps) const override;
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* w,
                        const float* rstd, int N, int C, bool accumulate) const override;
  void matmul_forward(float* out, const float* x, const float* w, const float* b, int N, int IC,
                      int OC) const override;
  void matmul_backward(float* dx, float* dw, float* db, const float* dout, const float* x,
                       const float* w, int N, int IC, int OC, bool accumulate) const override;
  void rope_forward(float* x, const int32_t* pos, const float* cos_table, const float* sin_table,
                    int N, int heads, int D) const override;
  void rope_backward(float* dx, const int32_t* pos, const float* cos_table, const float* sin_table,
                     int N, int heads, int D) const override;
  void attention_forward(float* y, float* lse, const float* q, const float* k, const float* v,
                         const int32_t* doc_start, const AttnShape& s) const override;
  void attention_backward(float* dq, float* dk, float* dv, const float* dy, const float* q,
                          const float* k, const float* v, const float* y, const float* lse,
                          const int32_t* doc_start, const AttnShape& s) const override;
  void attention_decode(float* y, const float* q, const float* k_cache, const float* v_cache,
                        int n_q, int past, int H, int KV, int D) const override;
  void swiglu_forward(float* h, const float* gate, const float* up, size_t n) const override;
  void swiglu_backward(float* dgate, float* dup, const float* dh, const float* gate,
                       const float* up, size_t n) const override;
  void add(float* out, const float* a, const float* b, size_t n) const override;
  double cross_entropy(float* dx, float* dw, const float* x, const float* w, const int32_t* targets,
                       int N, int C, int V, float scale) const override;
  double sum_squares(const float* x, size_t n) const override;
  void scale(float* x, float a, size_t n) const override;

 private:
  bool bf16_ = false;
};

}  // namespace kiln
