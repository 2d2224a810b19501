// Choosing the backend: the one place above the backends themselves that names one. The model,
// FSDP, the trainer, eval, generate and the benchmarks all get theirs from make_backend().
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "kiln/kernels/ops.h"

namespace kiln {

// train.device: "cpu", "cuda", or "auto" (CUDA when this build has it and a GPU is visible,
// else the CPU, with a notice).
enum class DeviceRequest { kAuto, kCpu, kCuda };
DeviceRequest parse_device_request(std::string_view name);  // errors name train.device
std::string_view device_request_name(DeviceRequest d);
// train.dtype: "fp32" | "bf16".
ComputeDType parse_compute_dtype(std::string_view name);  // errors name train.dtype
std::string_view compute_dtype_name(ComputeDType d);

// The backend for a device and compute dtype. On the CPU, KILN_ASYNC_CPU=1 gives the stream
// emulation (every stream a worker thread, ops run some time after they are enqueued), which
// tests use to catch a missing wait. Errors (kiln::Error, one line) for a device this build or
// machine cannot serve and for a dtype the device lacks. On CUDA, local_rank picks the GPU
// (local_rank % visible GPUs); kLocalRankFromEnv reads LOCAL_RANK (set by kiln's node agent and by
// torchrun), 0 when unset.
inline constexpr int kLocalRankFromEnv = -1;
std::unique_ptr<Backend> make_backend(DeviceRequest device, ComputeDType dtype,
                                      int local_rank = kLocalRankFromEnv);

// The local rank make_backend uses for kLocalRankFromEnv: LOCAL_RANK, or 0 when unset;
// kiln::Error naming LOCAL_RANK when it is not a non-negative integer.
int local_rank_from_env();

// Whether KILN_ASYNC_CPU asks for the stream emulation.
bool async_cpu_requested();

}  // namespace kiln
