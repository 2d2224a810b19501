#include "kiln/kernels/cuda/gpu_peak_flops.h"

#include <fmt/format.h>

#include <cctype>
#include <vector>

namespace kiln {

namespace {

// Dense bf16 tensor TFLOP/s with fp32 accumulation, from the vendors' datasheets (the sparse
// figures halved where a sheet gives only those). More specific names first: "H100 PCIe" before
// "H100"; a variant with no figure here (H100 NVL, H200 NVL) maps to none and falls back to the
// clock estimate rather than to a sibling's figure. GPUs whose figure could not be checked
// against a published sheet (A10, A10G) are left out: they get the estimate, with a note.
struct Entry {
  std::string_view match;  // whole words of the device name, in order
  std::string_view gpu;
  double tflops;  // 0: known name, no published figure here
};
constexpr Entry kTable[] = {
    {"H100 PCIe", "H100 PCIe", 756},  // 1,513 with sparsity
    {"H100 NVL", "H100 NVL", 0},
    {"H200 NVL", "H200 NVL", 0},
    {"H100", "H100 SXM", 989},  // 1,979 with sparsity
    {"H200", "H200 SXM", 989},  // the H100's arithmetic with more memory
    {"A100", "A100", 312},
    {"L40S", "L40S", 362},          // 362.05; 733 with sparsity
    {"L40", "L40", 181},            // 181.05
    {"L4", "L4", 121},              // 242 with sparsity
    {"RTX 4090", "RTX 4090", 165},  // 165.2 with fp32 accumulation
};

// Upper-cased words of a name, split at spaces and dashes.
std::vector<std::string> words(std::string_view s) {
  std::vector<std::string> out;
  std::string w;
  for (const char c : s) {
    if (c == ' ' || c == '-' || c == '_') {
      if (!w.empty()) out.push_back(w);
      w.clear();
    } else {
      w += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
  }
  if (!w.empty()) out.push_back(w);
  return out;
}

bool contains_words(const std::vector<std::string>& name, const std::vector<std::string>& want) {
  for (size_t i = 0; i + want.size() <= name.size(); ++i) {
    size_t j = 0;
    while (j < want.size() && name[i + j] == want[j]) ++j;
    if (j == want.size()) return true;
  }
  return false;
}

// Dense FLOP per clock per SM: tensor-core bf16 products with fp32 accumulation (bf16), or fp32
// FMA on the CUDA cores (fp32: CUBLAS_COMPUTE_32F, no TF32). A100 sm_80: 2048 / 128; L4 and
// other sm_86/89: 1024 / 256; H100/H200 sm_90: 4096 / 256. 0 for other architectures.
double flops_per_clock_per_sm(int major, int minor, bool bf16) {
  if (major == 8 && minor == 0) return bf16 ? 2048 : 128;
  if (major == 8) return bf16 ? 1024 : 256;
  if (major == 9) return bf16 ? 4096 : 256;
  return 0;
}

}  // namespace

std::optional<PublishedPeak> published_bf16_peak(std::string_view device_name) {
  const std::vector<std::string> name = words(device_name);
  for (const Entry& e : kTable) {
    if (!contains_words(name, words(e.match))) continue;
    if (e.tflops <= 0) return std::nullopt;
    return PublishedPeak{e.gpu, e.tflops};
  }
  return std::nullopt;
}

PeakFlops gpu_peak_flops(std::string_view device_name, int cc_major, int cc_minor, int sms,
                         int clock_khz, bool bf16) {
  if (bf16) {
    if (const auto p = published_bf16_peak(device_name)) {
      return {p->tflops * 1e12, fmt::format("published dense bf16 peak of the {}: {:.0f} TFLOP/s",
                                            p->gpu, p->tflops)};
    }
  }
  const double per_clock = flops_per_clock_per_sm(cc_major, cc_minor, bf16);
  const double flops = per_clock * sms * clock_khz * 1e3;
  if (flops <= 0) {
    return {0, fmt::format("unknown: no published figure and no rate per clock for {} (sm_{}{})",
                           device_name, cc_major, cc_minor)};
  }
  return {flops, fmt::format("estimate from the boost clock ({} SMs x {} MHz x {:.0f} FLOP per "
                             "clock{}): {:.0f} TFLOP/s",
                             sms, clock_khz / 1000, per_clock,
                             bf16 ? fmt::format("; no published figure for {}", device_name) : "",
                             flops / 1e12)};
}

}  // namespace kiln
