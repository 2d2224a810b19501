// kiln doctor [--json] [--require KEY=VALUE ...]: what this machine offers a kiln job and the
// known mistakes that would make one fail or crawl (src/kiln/doctor/doctor.h, docs/doctor.md).
#include <cstdio>

#include "kiln/base/error.h"
#include "kiln/cli/commands.h"
#include "kiln/doctor/doctor.h"

namespace kiln::cli {

Command add_doctor(CLI::App& app) {
  struct Opts {
    bool json = false;
    bool probe_cuda = false;
    std::vector<std::string> require;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "doctor",
      "Check this machine for a kiln job: CPU, memory, network, GPUs, the CUDA backend, NCCL, "
      "EFA, Gloo");
  sub->add_flag("--json", o->json, "Print the report as one JSON object");
  sub->add_flag("--probe-cuda", o->probe_cuda,
                "Only initialise CUDA with the libcuda the loader finds and query the GPUs; one "
                "line, exit 0 when the CUDA backend can use a GPU (deploy/entrypoint.sh)");
  sub->add_option("--require", o->require,
                  "Fail unless met: transport=efa|socket|gloo-tcp|loopback, gpus=N, gpus>=N, "
                  "cuda>=X.Y, device=cpu|cuda (repeatable)");
  sub->footer(
      "Exits non-zero with a one-line reason when a check fails or a requirement is not met; "
      "warnings alone exit 0. docs/doctor.md explains every check.");
  return {sub, [o] {
            if (o->probe_cuda) {
              const CudaProbeVerdict v = cuda_probe_verdict(probe_cuda_backend());
              if (!v.ok) fail("doctor --probe-cuda: {}", v.line);
              std::printf("doctor --probe-cuda: %s\n", v.line.c_str());
              return 0;
            }
            // A malformed requirement is an error before anything is probed.
            check_requirements(DoctorReport{}, o->require);
            const DoctorReport r = run_doctor(system_probes());
            const std::vector<Requirement> reqs = check_requirements(r, o->require);
            if (o->json) {
              std::printf("%s\n", doctor_json(r, reqs).dump(2).c_str());
            } else {
              std::printf("%s", doctor_text(r, reqs).c_str());
            }
            std::fflush(stdout);
            // One line: the first failure, and how many more the report shows.
            std::vector<std::string> failures;
            for (const auto& c : r.checks) {
              if (c.level == Level::kFail) failures.push_back(c.area + ": " + c.message);
            }
            for (const auto& q : reqs) {
              if (!q.met)
                failures.push_back(fmt::format("--require {} not met: {}", q.text, q.reason));
            }
            if (failures.empty()) return 0;
            if (failures.size() == 1) fail("doctor: {}", failures[0]);
            fail("doctor: {} (and {} more failure(s) above)", failures[0], failures.size() - 1);
          }};
}

}  // namespace kiln::cli
