// Decoding throughput of the Generator (KV-cached incremental decoding) on randomly initialised
// presets: prompt tokens/s of the prefill and new tokens/s of greedy decoding, one token at a
// time. Prints figures, asserts nothing; no tokenizer needed.
//
//   generate_bench [--presets tiny,25m] [--prompt 128] [--new 128] [--runs 5]
//
// Each figure is the median of --runs runs; "others" is the CPU time other processes used during
// the runs (from /proc/stat), to show when a figure was taken on a busy machine.
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/base/cpu_time.h"
#include "kiln/kernels/device/backend.h"
#include "kiln/kernels/device/host_cpu.h"
#include "kiln/model/config.h"
#include "kiln/model/generate.h"
#include "kiln/model/init.h"
#include "kiln/model/layout.h"
#include "kiln/model/sampling.h"

using kiln::machine_busy_seconds;
using kiln::own_cpu_seconds;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void bench(const std::string& preset, int prompt_len, int new_tokens, int runs) {
  const kiln::ModelConfig c = kiln::preset_config(preset);
  const kiln::ParamLayout layout(c);
  const std::unique_ptr<kiln::Backend> be =
      kiln::make_backend(kiln::DeviceRequest::kAuto, kiln::ComputeDType::kFp32);
  kiln::ParamStore params(layout, *be, /*with_grads=*/false);
  kiln::init_params(params, layout, /*seed=*/1);
  std::vector<int32_t> prompt(prompt_len);
  for (int i = 0; i < prompt_len; ++i)
    prompt[i] = static_cast<int32_t>((i * 7919 + 13) % c.vocab_size);

  std::vector<double> prefill_tps, decode_tps;
  size_t cache_bytes = 0;
  const double busy0 = machine_busy_seconds(), own0 = own_cpu_seconds();
  for (int r = 0; r < runs + 1; ++r) {  // run 0 warms up (allocations, page faults)
    kiln::Generator gen(c, params, *be);
    kiln::Sampler greedy({0.0, 1.0}, 0);
    auto t0 = Clock::now();
    std::span<const float> logits = gen.prefill(prompt);
    const double t_prefill = seconds_since(t0);
    t0 = Clock::now();
    for (int n = 0; n < new_tokens; ++n) logits = gen.step(greedy.sample(logits));
    const double t_decode = seconds_since(t0);
    cache_bytes = gen.cache_bytes();
    if (r == 0) continue;
    prefill_tps.push_back(prompt_len / t_prefill);
    decode_tps.push_back(new_tokens / t_decode);
  }
  const double others = (machine_busy_seconds() - busy0) - (own_cpu_seconds() - own0);
  std::printf("%-8s %8.1fM %10.0f %10.1f %10.1f %12.1f\n", preset.c_str(),
              kiln::parameter_count(c) / 1e6, median(prefill_tps), median(decode_tps),
              cache_bytes / 1048576.0, std::max(0.0, others));
}

}  // namespace

int main(int argc, char** argv) {
  // Same OpenBLAS core selection as the CLI (see blas_setup.h).
  if (const std::string core = kiln::blas_coretype_override(); !core.empty()) {
    ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
    ::execv("/proc/self/exe", argv);
  }
  std::string presets = "tiny,25m";
  int prompt_len = 128, new_tokens = 128, runs = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--presets") {
      presets = v;
    } else if (a == "--prompt") {
      prompt_len = std::max(1, std::atoi(v.c_str()));
    } else if (a == "--new") {
      new_tokens = std::max(1, std::atoi(v.c_str()));
    } else if (a == "--runs") {
      runs = std::max(1, std::atoi(v.c_str()));
    } else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  std::printf("%s; OMP threads %d; prompt %d tokens, %d new (greedy); median of %d runs\n",
              kiln::blas_info().c_str(), omp_get_max_threads(), prompt_len, new_tokens, runs);
  std::printf("%-8s %9s %10s %10s %10s %12s\n", "preset", "params", "prefill/s", "decode/s",
              "cache MiB", "others cpu-s");
  std::stringstream list(presets);
  for (std::string p; std::getline(list, p, ',');) bench(p, prompt_len, new_tokens, runs);
  return 0;
}
