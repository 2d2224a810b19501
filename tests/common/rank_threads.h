// Ranks of a group as threads of the test process: body(rank) on one thread each, joined, and a
// test failure naming every rank whose body threw.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace kiln::testing {

inline void run_rank_threads(int world, const std::function<void(int rank)>& body) {
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " of " << world;
}

}  // namespace kiln::testing
