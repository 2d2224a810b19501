// The token every process of a job presents to the rendezvous store (tcp_store.h). On one node
// the agent makes a random one and hands it to its workers. A store that listens beyond loopback
// (several nodes, or an external launcher's rank 0 with peers elsewhere) is reachable by anyone on
// the network, so it takes only a secret the operator provides, KILN_STORE_TOKEN (from a
// Kubernetes Secret in deploy/k8s), and refuses to start without one: job ids such as
// SLURM_JOB_ID are guessable. See docs/security.md.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>

namespace kiln {

inline constexpr size_t kMinStoreTokenChars = 16;

using EnvLookup = std::function<const char*(const char*)>;

// KILN_STORE_TOKEN when set (at least kMinStoreTokenChars characters, else an error). Without
// it: an error when `beyond_loopback`; otherwise a token every local rank of an external launcher
// derives alike from the job id in the environment (TORCHELASTIC_RUN_ID, SLURM_JOB_ID, ...).
std::string job_store_token(bool beyond_loopback, const EnvLookup& env = std::getenv);

// True for an address only this host can reach: 127.0.0.0/8, ::1, "localhost".
bool is_loopback_address(const std::string& host);

}  // namespace kiln
