// Backend's kernel ops (ops.h: embedding_forward to sgd_step) as a backend declares them when it
// implements every one out of line. CpuBackend, CudaBackend, PhaseTimedBackend and the tests'
// DryRunCudaBackend each expand KILN_BACKEND_KERNEL_OPS_OVERRIDE in their class body rather than
// restate the list; `override` ties each line to Backend's declaration, so a changed op does not
// compile until the two agree. (Backends that define their ops inline, CountingBackend and
// AsyncCpuBackend, write them out.)
#pragma once

#include "kiln/kernels/ops.h"

// Backend's copies (device/backend.h), for the backends that define them out of line (CpuBackend,
// CudaBackend, PhaseTimedBackend).
#define KILN_BACKEND_COPIES_OVERRIDE                                                         \
  void copy_to_device(void* dst, const void* host_src, size_t bytes) const override;         \
  void copy_to_host(void* host_dst, const void* src, size_t bytes) const override;           \
  void copy_on_device(void* dst, const void* src, size_t bytes) const override;              \
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, \
               size_t rows) const override;                                                  \
  void fill_zero(void* dst, size_t bytes) const override;

#define KILN_BACKEND_KERNEL_OPS_OVERRIDE                                                          \
  void embedding_forward(float* out, const int32_t* ids, ConstDevPtr wte, int N, int C)           \
      const override;                                                                             \
  void embedding_forward_part(float* out, const int32_t* ids, const float* part,                  \
                              size_t part_begin, size_t part_len, int N, int C, bool round_bf16)  \
      const override;                                                                             \
  void embedding_backward(float* dwte, const float* dout, const int32_t* ids, int N, int C)       \
      const override;                                                                             \
  void embedding_backward_part(float* dpart, const float* dout, const int32_t* ids,               \
                               size_t part_begin, size_t part_len, int N, int C) const override;  \
  void rmsnorm_forward(DevPtr out, float* rstd, const float* x, ConstDevPtr w, int N, int C,      \
                       float eps) const override;                                                 \
  void add_rmsnorm_forward(float* sum, DevPtr out, float* rstd, const float* a, const float* b,   \
                           ConstDevPtr w, int N, int C, float eps) const override;                \
  void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, ConstDevPtr w,   \
                        const float* rstd, int N, int C, bool accumulate) const override;         \
  void matmul_forward(float* out, ConstDevPtr x, ConstDevPtr w, ConstDevPtr b, int N, int IC,     \
                      int OC) const override;                                                     \
  void matmul_backward(float* dx, float* dw, float* db, const float* dout, ConstDevPtr x,         \
                       ConstDevPtr w, int N, int IC, int OC, bool accumulate) const override;     \
  void rope_forward(float* x, const int32_t* pos, const float* cos_table, const float* sin_table, \
                    int N, int heads, int D) const override;                                      \
  void rope_backward(float* dx, const int32_t* pos, const float* cos_table,                       \
                     const float* sin_table, int N, int heads, int D) const override;             \
  void attention_forward(float* y, float* lse, const float* q, const float* k, const float* v,    \
                         const int32_t* doc_start, const AttnShape& s) const override;            \
  void attention_backward(float* dq, float* dk, float* dv, const float* dy, const float* q,       \
                          const float* k, const float* v, const float* y, const float* lse,       \
                          const int32_t* doc_start, const AttnShape& s) const override;           \
  void attention_decode(float* y, const float* q, const float* k_cache, const float* v_cache,     \
                        int n_q, int past, int H, int KV, int D) const override;                  \
  void swiglu_forward(DevPtr h, const float* gate_up, int N, int I) const override;               \
  void swiglu_backward(float* dgate_up, const float* dh, const float* gate_up, int N, int I)      \
      const override;                                                                             \
  void add(float* out, const float* a, const float* b, size_t n) const override;                  \
  void dropout(DevPtr out, ConstDevPtr x, size_t n, float p, uint64_t seed, uint64_t offset)      \
      const override;                                                                             \
  void cast_to_bf16(void* dst, const float* src, size_t n) const override;                        \
  void cast_from_bf16(float* dst, const void* src, size_t n) const override;                      \
  void cross_entropy(double* loss_sum, float* dx, float* dw, const float* x, ConstDevPtr w,       \
                     const int32_t* targets, int N, int targeted, int C, int V, float scale)      \
      const override;                                                                             \
  void ce_part_max(float* row_max, const float* logits, int n, int m, int ld, bool accumulate)    \
      const override;                                                                             \
  void ce_part_sumexp(float* sums, const float* logits, const float* row_max,                     \
                      const int32_t* targets, int v0, int n, int m, int ld) const override;       \
  void ce_part_grad(float* logits, double* loss_sum, const float* row_max, const float* sums,     \
                    const int32_t* targets, int v0, int n, int m, int ld, float scale,            \
                    const float* row_weight, int loss_begin, int loss_end) const override;        \
  void ce_part_row_loss(float* row_loss, const float* row_max, const float* sums,                 \
                        const int32_t* targets, int n) const override;                            \
  void sequence_logps(double* seq, const float* row_loss, const int32_t* targets,                 \
                      const int32_t* bounds, int S) const override;                               \
  void preference_loss(float* row_weight, double* sums, const double* seq, const double* ref_seq, \
                       const int32_t* bounds, int S, const PreferenceTerms& terms, int sum_begin, \
                       int sum_end) const override;                                               \
  void sum_squares(double* sum, const float* x, size_t n) const override;                         \
  void scale(float* x, float a, size_t n) const override;                                         \
  void scale_rows(float* x, const float* row_scale, int n, int C) const override;                 \
  void clip_by_norm(float* x, size_t n, const double* sq_norm, double max_norm) const override;   \
  void adamw_step(float* p, float* m, float* v, const float* g, size_t n, const AdamWStep& s)     \
      const override;                                                                             \
  void sgd_step(float* p, float* m, const float* g, size_t n, const SgdStep& s) const override;
