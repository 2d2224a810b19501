// A GPU's peak dense FLOP/s, the denominator of MFU: the vendor's published dense bf16 tensor
// figure (fp32 accumulation) for the GPUs in the table, matched by the name the driver reports;
// else an estimate from the boost clock, the multiprocessor count and the architecture's rate per
// clock, which the source says. The boost clock overstates what a GPU sustains (an H200 at
// 1980 MHz: 1070 TFLOP/s, against 989 published), so the table comes first. fp32 products
// (CUBLAS_COMPUTE_32F, no TF32) always use the estimate. Plain host code: tested in CI.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace kiln {

struct PublishedPeak {
  std::string_view gpu;  // the table's name for it, "H200 SXM"
  double tflops;         // dense bf16, fp32 accumulation
};
// The table's entry for a device name ("NVIDIA H200", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-80GB",
// "NVIDIA GeForce RTX 4090"), matched as whole words; nullopt for a GPU not in the table.
std::optional<PublishedPeak> published_bf16_peak(std::string_view device_name);

struct PeakFlops {
  double flops = 0;    // 0: unknown
  std::string source;  // one line: where the figure comes from
};
// The peak of one device: the published figure under bf16, else the clock-based estimate from
// compute capability, multiprocessors and boost clock (kHz).
PeakFlops gpu_peak_flops(std::string_view device_name, int cc_major, int cc_minor, int sms,
                         int clock_khz, bool bf16);

}  // namespace kiln
