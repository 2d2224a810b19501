// A worker's merged stdout and stderr as its agent reads them. Complete lines are forwarded to
// the agent's stderr with a "[rank N] " prefix as they come, except the worker's own error line
// ("kiln: error: ...", what the CLI prints before it exits non-zero), which is held: once the
// attempt is over the agent prints each distinct message once, naming every rank that reported
// it ("[ranks 0, 1] kiln: error: ..."), and its own failure line ends with the failing rank's
// message, so the last line of the log says what went wrong.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln {

class WorkerOutput {
 public:
  explicit WorkerOutput(int rank) : rank_(rank) {}

  // Takes bytes read from the worker; forwards the complete lines among them.
  void append(std::string_view bytes);
  // The worker's output ended: forwards an unterminated last line too.
  void finish();
  int rank() const { return rank_; }
  // The first error line's message (after "kiln: error: "); "" when the worker printed none.
  const std::string& error() const { return error_; }

 private:
  void line(std::string_view text);
  int rank_;
  std::string partial_;
  std::string error_;
};

// Prints each distinct held error of `outputs` once, in rank order of its first reporter:
// "[rank 1] kiln: error: X" or "[ranks 0, 1, 3] kiln: error: X".
void print_held_errors(const std::vector<const WorkerOutput*>& outputs);

// "rank 2" or "ranks 0, 1, 3".
std::string describe_ranks(const std::vector<int>& ranks);

}  // namespace kiln
