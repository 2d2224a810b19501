#include "kiln/launch/store_token.h"

#include <cstring>

#include "kiln/base/error.h"

namespace kiln {

std::string job_store_token(bool beyond_loopback, const EnvLookup& env) {
  if (const char* t = env("KILN_STORE_TOKEN"); t != nullptr) {
    if (std::strlen(t) < kMinStoreTokenChars) {
      fail("KILN_STORE_TOKEN has {} characters; the store needs a secret of at least {}",
           std::strlen(t), kMinStoreTokenChars);
    }
    return t;
  }
  if (beyond_loopback) {
    fail(
        "KILN_STORE_TOKEN is not set: the rendezvous store of a job that spans hosts listens on "
        "every interface and needs a secret of at least {} characters shared by every node (for "
        "example from a Kubernetes Secret, deploy/k8s); see docs/security.md",
        kMinStoreTokenChars);
  }
  for (const char* v : {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "OMPI_MCA_orte_ess_jobid",
                        "PMIX_NAMESPACE", "KILN_JOB_ID"}) {
    if (const char* t = env(v)) return std::string(v) + ":" + t;
  }
  return "kiln-loopback-job";
}

bool is_loopback_address(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

}  // namespace kiln
