// Run metadata and the transport check at training start. A run that silently fell back to a
// slower transport (TCP instead of EFA, loopback instead of the NIC) trains correctly but slowly,
// so what each rank actually uses is recorded in <output.dir>/run_meta.json and the log, and
// dist.require_transport can turn a mismatch into an error before step 1.
#pragma once

#include <string>
#include <vector>

#include "kiln/base/json.h"
#include "kiln/train/recipe.h"
#include "kiln/train/runtime.h"

namespace kiln {

// Every rank's Communicator::transport_info(), in rank order, on every rank. Collective.
std::vector<TransportInfo> gather_transports(Communicator& comm);

// Collective: every rank calls it once, after the group is formed. Gathers the transports; rank
// 0 logs them and writes run_meta.json atomically (kiln version, world size, strategy,
// transports, topology source, start time). When recipe.dist.require_transport is set and some
// rank's transport does not deliver it (src/kiln/comm/transport.h), every rank throws the
// same kiln::Error naming the transport in use, after run_meta.json records it.
void record_run_start(const Recipe& recipe, WorkerContext& ctx, const std::string& strategy);

// The run_meta.json object (exposed for tests).
Json run_meta_json(const Recipe& recipe, const WorkerIdentity& id, const std::string& strategy,
                   const std::vector<TransportInfo>& transports, const std::string& started_at);

}  // namespace kiln
