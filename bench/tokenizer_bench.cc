// Tokenizer throughput: MB/s of UTF-8 text encoded, on one thread and on all cores, over the test
// corpus repeated to a few MB. Prints figures, asserts nothing.
//
//   tokenizer_bench [--tokenizer PATH] [--mb 4] [--runs 5] [--threads N]
//
// Three inputs: "corpus" is the corpus as it is: most pieces hit the per-thread BPE cache, but
// its two synthetic lines of 3,000 'a' and 1,500 spaces (a quarter of its bytes) are single
// pieces too long to cache, and dominate. "natural" leaves out the lines holding a run of 64 or
// more of one character. "permuted" is natural with the letters of each copy permuted
// differently: some 300,000 distinct words, more than a thread's cache holds, so that nearly
// every word goes through the full BPE merge loop. Each
// figure is the median of
// --runs runs; "others" is the CPU time other processes used meanwhile (from /proc/stat), to
// show when a figure was taken on a busy machine.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kiln/base/cpu_time.h"
#include "kiln/base/file.h"
#include "kiln/base/json.h"
#include "kiln/text/tokenizer.h"

using kiln::machine_busy_seconds;
using kiln::own_cpu_seconds;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Replaces ASCII letters by a permutation of the alphabet drawn from `seed`: the same shapes of
// text, different words.
std::string permute_letters(const std::string& s, unsigned seed) {
  std::string alphabet = "abcdefghijklmnopqrstuvwxyz";
  std::shuffle(alphabet.begin(), alphabet.end(), std::mt19937(seed));
  std::string out = s;
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = alphabet[c - 'a'];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(alphabet[c - 'A'] - 'a' + 'A');
  }
  return out;
}

bool has_long_run(const std::string& s, size_t n) {
  size_t run = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    run = i > 0 && s[i] == s[i - 1] ? run + 1 : 1;
    if (run >= n) return true;
  }
  return false;
}

struct Figure {
  double mb_per_s;
  double others_cpu_s;
  size_t tokens;
};

// Encodes every document once per run, split over `threads` threads; returns the median run.
// The threads live through all the runs, so their BPE caches are warm after the first, as a
// data loader's would be.
Figure measure(const kiln::Tokenizer& tok, const std::vector<std::string>& docs, size_t bytes,
               int threads, int runs) {
  std::vector<Figure> figs;
  std::atomic<size_t> next{0}, tokens{0};
  std::barrier sync(threads);
  auto work = [&] {
    size_t n = 0;
    std::vector<int32_t> ids;
    for (size_t i; (i = next.fetch_add(1)) < docs.size();) {
      ids.clear();
      tok.encode(docs[i], ids);
      n += ids.size();
    }
    tokens += n;
  };
  std::vector<std::thread> pool;
  for (int k = 1; k < threads; ++k) {
    pool.emplace_back([&] {
      for (int r = 0; r < runs; ++r) {
        sync.arrive_and_wait();  // start
        work();
        sync.arrive_and_wait();  // done
      }
    });
  }
  for (int r = 0; r < runs; ++r) {
    next = 0;
    tokens = 0;
    const double busy0 = machine_busy_seconds(), own0 = own_cpu_seconds();
    const auto t0 = Clock::now();
    sync.arrive_and_wait();
    work();
    sync.arrive_and_wait();
    const double dt = seconds_since(t0);
    const double others = (machine_busy_seconds() - busy0) - (own_cpu_seconds() - own0);
    figs.push_back({static_cast<double>(bytes) / 1e6 / dt, std::max(0.0, others), tokens.load()});
  }
  for (auto& t : pool) t.join();
  std::sort(figs.begin(), figs.end(),
            [](const Figure& a, const Figure& b) { return a.mb_per_s < b.mb_per_s; });
  return figs[figs.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string path = std::string(KILN_SOURCE_DIR) + "/assets/tokenizer/qwen3/tokenizer.json";
  double mb = 4;
  int runs = 5;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--tokenizer")
      path = v;
    else if (a == "--mb")
      mb = std::atof(v.c_str());
    else if (a == "--runs")
      runs = std::max(1, std::atoi(v.c_str()));
    else if (a == "--threads")
      threads = std::max(1, std::atoi(v.c_str()));
    else {
      std::fprintf(stderr, "usage: %s [--tokenizer PATH] [--mb N] [--runs N] [--threads N]\n",
                   argv[0]);
      return 2;
    }
  }

  auto t0 = Clock::now();
  const kiln::Tokenizer tok = kiln::Tokenizer::load(path);
  std::printf("load %s: %.2f s, vocab %lld\n", path.c_str(), seconds_since(t0),
              static_cast<long long>(tok.vocab_size()));

  std::vector<std::string> corpus;
  {
    std::istringstream in(
        kiln::read_file(std::string(KILN_SOURCE_DIR) + "/tests/fixtures/tokenizer/corpus.jsonl"));
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) corpus.push_back(kiln::parse_json(line, "corpus").at("text"));
    }
  }
  const auto target = static_cast<size_t>(mb * 1e6);
  struct Input {
    const char* name;
    std::vector<std::string> docs;
    size_t bytes = 0;
  };
  std::vector<Input> inputs = {{"corpus", {}, 0}, {"natural", {}, 0}, {"permuted", {}, 0}};
  for (int copy = 0; inputs[0].bytes < target || inputs[1].bytes < target; ++copy) {
    for (const std::string& doc : corpus) {
      if (inputs[0].bytes < target) {
        inputs[0].docs.push_back(doc);
        inputs[0].bytes += doc.size();
      }
      if (has_long_run(doc, 64) || inputs[1].bytes >= target) continue;
      inputs[1].docs.push_back(doc);
      inputs[1].bytes += doc.size();
      inputs[2].docs.push_back(permute_letters(doc, static_cast<unsigned>(copy)));
      inputs[2].bytes += doc.size();
    }
  }
  std::printf("input: about %.1f MB per pass; %d runs per figure (median); %u cores\n",
              static_cast<double>(target) / 1e6, runs, std::thread::hardware_concurrency());
  std::printf("%-9s %8s %10s %12s %14s\n", "input", "threads", "MB/s", "tokens", "others cpu-s");
  for (const Input& in : inputs) {
    std::vector<int> counts = {1};
    if (threads > 1) counts.push_back(threads);
    for (const int n : counts) {
      const Figure f = measure(tok, in.docs, in.bytes, n, runs);
      std::printf("%-9s %8d %10.1f %12zu %14.2f\n", in.name, n, f.mb_per_s, f.tokens,
                  f.others_cpu_s);
    }
  }
  return 0;
}
