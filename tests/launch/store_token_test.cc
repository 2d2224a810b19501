// The store's token: an operator's secret whenever the store is reachable beyond loopback.
#include "kiln/launch/store_token.h"

#include <gtest/gtest.h>

#include <map>

#include "common/error_of.h"
#include "kiln/base/error.h"

namespace kiln {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

std::string error_of(bool beyond, const EnvLookup& env) {
  return testing::error_of([&] { job_store_token(beyond, env); });
}

TEST(StoreToken, BeyondLoopbackOnlyTheOperatorsSecretWill) {
  EXPECT_EQ(job_store_token(true, env_of({{"KILN_STORE_TOKEN", "0123456789abcdef"}})),
            "0123456789abcdef");
  // A scheduler's job id is guessable: it is not enough.
  EXPECT_EQ(
      error_of(true, env_of({{"SLURM_JOB_ID", "4242"}}))
          .rfind("KILN_STORE_TOKEN is not set: the rendezvous store of a job that spans hosts", 0),
      0u);
  EXPECT_NE(error_of(true, env_of({})).find("at least 16 characters"), std::string::npos);
  EXPECT_EQ(error_of(true, env_of({{"KILN_STORE_TOKEN", "short"}})),
            "KILN_STORE_TOKEN has 5 characters; the store needs a secret of at least 16");
  EXPECT_EQ(error_of(false, env_of({{"KILN_STORE_TOKEN", "short"}})),
            "KILN_STORE_TOKEN has 5 characters; the store needs a secret of at least 16");
}

TEST(StoreToken, OnLoopbackRanksDeriveOneFromTheJobId) {
  EXPECT_EQ(job_store_token(false, env_of({{"SLURM_JOB_ID", "4242"}})), "SLURM_JOB_ID:4242");
  EXPECT_EQ(job_store_token(false, env_of({{"TORCHELASTIC_RUN_ID", "r"}, {"SLURM_JOB_ID", "1"}})),
            "TORCHELASTIC_RUN_ID:r");
  EXPECT_EQ(job_store_token(false, env_of({})), "kiln-loopback-job");
}

TEST(StoreToken, LoopbackAddresses) {
  EXPECT_TRUE(is_loopback_address("127.0.0.1"));
  EXPECT_TRUE(is_loopback_address("127.1.2.3"));
  EXPECT_TRUE(is_loopback_address("localhost"));
  EXPECT_TRUE(is_loopback_address("::1"));
  EXPECT_FALSE(is_loopback_address("10.0.0.1"));
  EXPECT_FALSE(is_loopback_address("0.0.0.0"));
  EXPECT_FALSE(is_loopback_address("kiln-0.kiln"));
  EXPECT_FALSE(is_loopback_address("1127.0.0.1"));
}

}  // namespace
}  // namespace kiln
