// Choosing the backend: the one place above the backends themselves that names one. The model,
// FSDP, the trainer, eval, generate and the benchmarks all get theirs from make_backend().
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>

#include "kiln/base/named_values.h"
#include "kiln/kernels/ops.h"

namespace kiln {

// train.device (and the --device options): auto (CUDA when this build has it and a GPU is
// visible, else the CPU, with a notice), cpu or cuda. Parsed with parse_named.
enum class DeviceRequest { kAuto, kCpu, kCuda };
inline constexpr std::array<Named<DeviceRequest>, 3> kDeviceRequestNames = {{
    {DeviceRequest::kAuto, "auto"},
    {DeviceRequest::kCpu, "cpu"},
    {DeviceRequest::kCuda, "cuda"},
}};
// train.dtype (and the --dtype options of bench train): fp32 or bf16 (ComputeDType, ops.h).
inline constexpr std::array<Named<ComputeDType>, 2> kComputeDTypeNames = {{
    {ComputeDType::kFp32, "fp32"},
    {ComputeDType::kBf16, "bf16"},
}};

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
