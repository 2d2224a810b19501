#include "kiln/base/stop_request.h"

#include <signal.h>

#include <csignal>

namespace kiln {

namespace {

// Process-wide state by necessity: a signal handler can reach nothing else, and may only store
// to a volatile sig_atomic_t. This is the one global of its kind (besides the agent's own).
volatile std::sig_atomic_t g_stop_requested = 0;

void on_stop_signal(int) { g_stop_requested = 1; }

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and collectives carry on; the trainer polls
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
}

bool stop_requested() { return g_stop_requested != 0; }

void request_stop() { g_stop_requested = 1; }

}  // namespace kiln
