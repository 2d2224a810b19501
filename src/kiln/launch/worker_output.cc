#include "kiln/launch/worker_output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <map>

namespace kiln {

namespace {

constexpr std::string_view kErrorPrefix = "kiln: error: ";

void write_stderr(const std::string& s) { (void)!::write(STDERR_FILENO, s.data(), s.size()); }

}  // namespace

void WorkerOutput::line(std::string_view text) {
  if (text.starts_with(kErrorPrefix)) {
    // Held for print_held_errors; a later error line (rare) is forwarded as it comes.
    if (error_.empty()) {
      error_ = std::string(text.substr(kErrorPrefix.size()));
      if (!error_.empty()) return;
    }
  }
  write_stderr(fmt::format("[rank {}] {}\n", rank_, text));
}

void WorkerOutput::append(std::string_view bytes) {
  partial_.append(bytes);
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    line(std::string_view(partial_).substr(start, nl - start));
  }
  partial_.erase(0, start);
}

void WorkerOutput::finish() {
  if (!partial_.empty()) line(partial_);
  partial_.clear();
}

std::string describe_ranks(const std::vector<int>& ranks) {
  std::string list;
  for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", list);
}

void print_held_errors(const std::vector<const WorkerOutput*>& outputs) {
  std::vector<std::string> order;  // messages by their first reporter
  std::map<std::string, std::vector<int>> ranks;
  for (const WorkerOutput* o : outputs) {
    if (o->error().empty()) continue;
    auto& rs = ranks[o->error()];
    if (rs.empty()) order.push_back(o->error());
    rs.push_back(o->rank());
  }
  for (const std::string& msg : order) {
    write_stderr(fmt::format("[{}] {}{}\n", describe_ranks(ranks[msg]), kErrorPrefix, msg));
  }
}

}  // namespace kiln
