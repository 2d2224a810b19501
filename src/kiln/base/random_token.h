// A random per-job token: the secret a single node's agent makes for its workers to present to
// the rendezvous store and the authenticated pairs, and the doctor's for its Gloo probe.
#pragma once

#include <string>

namespace kiln {

// 16 bytes from /dev/urandom as 32 hex characters; kiln::Error when it cannot be read.
std::string random_token();

}  // namespace kiln
