#include "kiln/launch/comm_choice.h"

#include <gtest/gtest.h>

#include "kiln/base/error.h"

namespace kiln {
namespace {

TEST(CommChoice, AutoPicksNcclOnlyWithAGpuPerRank) {
  EXPECT_EQ(choose_communicator(CommRequest::kAuto, false, 4, 0).kind, CommKind::kGloo);
  EXPECT_EQ(choose_communicator(CommRequest::kAuto, false, 1, 8).kind, CommKind::kGloo);
  EXPECT_EQ(choose_communicator(CommRequest::kAuto, true, 8, 8).kind, CommKind::kNccl);
  EXPECT_EQ(choose_communicator(CommRequest::kAuto, true, 1, 1).kind, CommKind::kNccl);
  const CommChoice shared = choose_communicator(CommRequest::kAuto, true, 4, 1);
  EXPECT_EQ(shared.kind, CommKind::kGlooStaged);
  EXPECT_NE(shared.reason.find("4 ranks share 1 GPU"), std::string::npos) << shared.reason;
}

TEST(CommChoice, Forced) {
  EXPECT_EQ(choose_communicator(CommRequest::kGloo, true, 2, 8).kind, CommKind::kGlooStaged);
  EXPECT_EQ(choose_communicator(CommRequest::kGloo, false, 2, 0).kind, CommKind::kGloo);
  EXPECT_EQ(choose_communicator(CommRequest::kNccl, true, 2, 2).kind, CommKind::kNccl);
  EXPECT_THROW(choose_communicator(CommRequest::kNccl, false, 1, 0), Error);
  try {
    choose_communicator(CommRequest::kNccl, true, 4, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 ranks on this node but 2 GPU(s)"), std::string::npos)
        << e.what();
  }
}

TEST(CommChoice, Parse) {
  const std::string key = "dist.communicator";
  EXPECT_EQ(parse_named(kCommRequestNames, "auto", key), CommRequest::kAuto);
  EXPECT_EQ(parse_named(kCommRequestNames, "nccl", key), CommRequest::kNccl);
  EXPECT_EQ(parse_named(kCommRequestNames, "gloo", key), CommRequest::kGloo);
  EXPECT_THROW(parse_named(kCommRequestNames, "mpi", key), Error);
}

}  // namespace
}  // namespace kiln
