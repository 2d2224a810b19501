// A graceful stop: SIGTERM (Kubernetes preemption, `kill`) or SIGINT (Ctrl-C) asks a training
// process to finish its current step, commit a checkpoint and exit with kExitStopped, instead of
// dying with its work since the last checkpoint. The trainer polls stop_requested() once a step
// (through WorkerContext::stop_requested) and agrees with every other rank (the step's sync
// record, train/step_sync.h), so all ranks stop after the same step. Only processes whose training
// function honours the request install the handlers (LaunchOptions::graceful_stop); others keep the
// default dispositions.
#pragma once

namespace kiln {

// The exit code of a run that stopped on request after committing a checkpoint (EX_TEMPFAIL:
// "try again later"; `train.resume=auto` continues it exactly). docs/distributed.md.
inline constexpr int kExitStopped = 75;

// Installs the SIGTERM and SIGINT handlers that set the request.
void install_stop_handlers();
// True once SIGTERM or SIGINT arrived (after install_stop_handlers()) or request_stop() ran.
bool stop_requested();
void request_stop();

}  // namespace kiln
