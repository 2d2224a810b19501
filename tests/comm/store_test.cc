// The rendezvous store: one behaviour contract run against both MemoryStore and TcpStore (a real
// server on loopback, one connection per simulated worker), then what only the TCP store has
// (tokens, limits, retries, a server that goes away), then its wire protocol: round trips, each
// rejection, and thousands of deterministic mutations through the fuzz entry point
// (fuzz/store_protocol_fuzz.cc, linked in). Every test name starts with "store/" so that
// `ctest -R store` selects them.
#include "kiln/comm/store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/error_of.h"
#include "common/loopback.h"
#include "kiln/base/error.h"
#include "kiln/comm/tcp_store.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace kiln {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kToken = "job-7f3a";

std::string error_of(const std::function<void()>& fn) {
  const std::string e = testing::error_of(fn);
  return e.empty() ? "(no error)" : e;
}

#define EXPECT_ERROR_HAS(stmt, part)                                        \
  do {                                                                      \
    const std::string msg_ = error_of([&] { stmt; });                       \
    EXPECT_NE(msg_.find(part), std::string::npos) << "error was: " << msg_; \
  } while (0)

// ---- The contract, over both stores ------------------------------------------------------------

// A "world" hands out one client per simulated worker.
struct MemoryWorld {
  static constexpr const char* kName = "memory";
  std::shared_ptr<MemoryStore> store = std::make_shared<MemoryStore>();
  std::shared_ptr<Store> client() { return store; }
};

struct TcpWorld {
  static constexpr const char* kName = "tcp";
  TcpStoreServer server{"127.0.0.1", 0, kToken};
  std::shared_ptr<Store> client() {
    return std::make_shared<TcpStore>("127.0.0.1", server.port(), kToken, 10s);
  }
};

template <typename W>
class StoreContract : public ::testing::Test {
 protected:
  W world;
};
TYPED_TEST_SUITE_P(StoreContract);

TYPED_TEST_P(StoreContract, SetGetOverwrite) {
  auto s = this->world.client();
  const Bytes binary{0, 1, 255, 0, 7};
  s->set("a/b c", binary);
  EXPECT_EQ(s->get("a/b c", 1s), binary);
  s->set("a/b c", {});
  EXPECT_EQ(s->get("a/b c", 1s), Bytes{});
  s->set("a/b c", to_bytes("x"));
  EXPECT_EQ(to_string(this->world.client()->get("a/b c", 1s)), "x");
}

TYPED_TEST_P(StoreContract, AddIsAtomicAcrossClients) {
  auto s = this->world.client();
  EXPECT_EQ(s->add("n", 5), 5);
  EXPECT_EQ(s->add("n", -7), -2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      auto c = this->world.client();
      for (int i = 0; i < 200; ++i) c->add("count", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(s->add("count", 0), 1600);
}

TYPED_TEST_P(StoreContract, AddOnNonCounterFailsAndStoreStaysUsable) {
  auto s = this->world.client();
  s->set("text", to_bytes("abc"));
  EXPECT_ERROR_HAS(s->add("text", 1), "key text does not hold a counter");
  s->set("after", to_bytes("ok"));
  EXPECT_EQ(to_string(s->get("after", 1s)), "ok");
}

TYPED_TEST_P(StoreContract, CheckAndWaitOnPresentKeys) {
  auto s = this->world.client();
  EXPECT_FALSE(s->check({"x"}));
  EXPECT_TRUE(s->check({}));
  s->set("x", to_bytes("1"));
  EXPECT_TRUE(s->check({"x"}));
  EXPECT_FALSE(s->check({"x", "y"}));
  s->wait({"x"}, 0ms);
  s->wait({}, 0ms);
}

TYPED_TEST_P(StoreContract, GetBlocksUntilAnotherClientSets) {
  std::atomic<bool> done{false};
  Bytes got;
  const auto start = Clock::now();
  std::thread reader([&] {
    got = this->world.client()->get("late", 20s);
    done = true;
  });
  std::this_thread::sleep_for(150ms);
  EXPECT_FALSE(done.load());
  this->world.client()->set("late", to_bytes("here"));
  reader.join();
  EXPECT_EQ(to_string(got), "here");
  EXPECT_GE(Clock::now() - start, 150ms);
}

TYPED_TEST_P(StoreContract, WaitReturnsOnceEveryKeyIsSet) {
  std::thread writer([&] {
    auto c = this->world.client();
    for (int i = 0; i < 4; ++i) {
      std::this_thread::sleep_for(20ms);
      c->set(fmt::format("k{}", i), to_bytes("v"));
    }
  });
  this->world.client()->wait({"k0", "k1", "k2", "k3"}, 20s);
  writer.join();
  EXPECT_TRUE(this->world.client()->check({"k0", "k1", "k2", "k3"}));
}

TYPED_TEST_P(StoreContract, TimeoutNamesExactlyTheMissingKeys) {
  auto s = this->world.client();
  s->set("b", to_bytes("1"));
  const auto start = Clock::now();
  EXPECT_ERROR_HAS(s->wait({"a", "b", "c"}, 80ms),
                   "store: timed out after 80 ms waiting for keys: a, c");
  EXPECT_GE(Clock::now() - start, 80ms);
  EXPECT_ERROR_HAS(s->get("nope", 20ms), "store: timed out after 20 ms waiting for keys: nope");
  EXPECT_ERROR_HAS(s->get("nope", 0ms), "store: timed out after 0 ms waiting for keys: nope");
  EXPECT_EQ(to_string(s->get("b", 0ms)), "1");  // the client is still usable after timeouts
}

// The bootstrap pattern: every worker publishes its address, counts itself in, and reads all.
TYPED_TEST_P(StoreContract, RendezvousOfManyWorkers) {
  constexpr int kWorld = 16;
  std::vector<std::thread> workers;
  std::vector<std::string> seen(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    workers.emplace_back([&, r] {
      auto c = this->world.client();
      c->set("addr/" + std::to_string(r), to_bytes("host" + std::to_string(r)));
      c->add("arrived", 1);
      std::vector<std::string> keys;
      for (int i = 0; i < kWorld; ++i) keys.push_back("addr/" + std::to_string(i));
      c->wait(keys, 20s);
      seen[r] = to_string(c->get(keys[(r + 1) % kWorld], 1s));
    });
  }
  for (auto& w : workers) w.join();
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(seen[r], "host" + std::to_string((r + 1) % kWorld));
  EXPECT_EQ(this->world.client()->add("arrived", 0), kWorld);
}

TYPED_TEST_P(StoreContract, PrefixStoreSeparatesNamespaces) {
  auto base = this->world.client();
  PrefixStore g1("g1", base), g2("g2", base);
  g1.set("k", to_bytes("one"));
  EXPECT_TRUE(base->check({"g1/k"}));
  EXPECT_FALSE(g2.check({"k"}));
  EXPECT_ERROR_HAS(g2.wait({"k"}, 10ms), "waiting for keys: g2/k");
  EXPECT_EQ(to_string(g1.get("k", 1s)), "one");
}

REGISTER_TYPED_TEST_SUITE_P(StoreContract, SetGetOverwrite, AddIsAtomicAcrossClients,
                            AddOnNonCounterFailsAndStoreStaysUsable, CheckAndWaitOnPresentKeys,
                            GetBlocksUntilAnotherClientSets, WaitReturnsOnceEveryKeyIsSet,
                            TimeoutNamesExactlyTheMissingKeys, RendezvousOfManyWorkers,
                            PrefixStoreSeparatesNamespaces);
struct WorldName {
  template <typename W>
  static std::string GetName(int) {
    return W::kName;
  }
};
using Worlds = ::testing::Types<MemoryWorld, TcpWorld>;
INSTANTIATE_TYPED_TEST_SUITE_P(store, StoreContract, Worlds, WorldName);

// ---- TCP only: run with the server bound to loopback and to every interface --------------------

// A plain client socket, for speaking to the server without TcpStore's checks.
class RawConn {
 public:
  explicit RawConn(int port) : fd_(testing::connect_loopback(port)) {
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ok_ = fd_ >= 0;
  }
  ~RawConn() { ::close(fd_); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;
  bool ok() const { return ok_; }
  void send(const Bytes& b) { (void)!::send(fd_, b.data(), b.size(), MSG_NOSIGNAL); }
  // Everything the server sends until it closes (or 5 s pass).
  Bytes read_to_end() {
    Bytes out;
    uint8_t buf[4096];
    ssize_t n;
    while ((n = ::recv(fd_, buf, sizeof buf, 0)) > 0) out.insert(out.end(), buf, buf + n);
    return out;
  }

 private:
  int fd_;
  bool ok_ = false;
};

// The status byte of the last response frame in `r`, -1 if none.
int last_status(const Bytes& r) {
  int status = -1;
  for (size_t at = 0; at + 5 <= r.size();) {
    status = r[at + 4];
    at += 4 + (r[at] | r[at + 1] << 8 | r[at + 2] << 16 | size_t{r[at + 3]} << 24);
  }
  return status;
}

Bytes hello_frame(const std::string& token) {
  StoreRequest r;
  r.token = token;
  return encode_store_request(r);
}

// A port nobody listens on right now.
int free_port() { return TcpStoreServer("127.0.0.1", 0, kToken).port(); }

class TcpStoreTest : public ::testing::TestWithParam<const char*> {
 protected:
  std::unique_ptr<TcpStore> connect(const TcpStoreServer& s, std::string token = kToken) {
    return std::make_unique<TcpStore>("127.0.0.1", s.port(), std::move(token), 5s);
  }
};

TEST_P(TcpStoreTest, PortZeroPicksAFreePort) {
  TcpStoreServer a(GetParam(), 0, kToken), b(GetParam(), 0, kToken);
  EXPECT_GT(a.port(), 0);
  EXPECT_GT(b.port(), 0);
  EXPECT_NE(a.port(), b.port());
  EXPECT_ERROR_HAS(TcpStoreServer(GetParam(), a.port(), kToken), "store: cannot listen on");
}

TEST_P(TcpStoreTest, WrongTokenIsRejectedWhileRightTokenWorks) {
  TcpStoreServer server(GetParam(), 0, kToken);
  auto good = connect(server);
  good->set("k", to_bytes("v"));
  EXPECT_ERROR_HAS(
      connect(server, "guess"),
      fmt::format("store: connection rejected by 127.0.0.1:{} (wrong job token)", server.port()));
  EXPECT_ERROR_HAS(connect(server, ""), "(wrong job token)");
  EXPECT_EQ(to_string(good->get("k", 1s)), "v");
  EXPECT_EQ(to_string(connect(server)->get("k", 1s)), "v");
}

TEST_P(TcpStoreTest, OversizedKeyOrValueIsRefusedBeforeSending) {
  TcpStoreServer server(GetParam(), 0, kToken);
  TcpStoreOptions opts;
  opts.limits = {16, 100};
  TcpStore s("127.0.0.1", server.port(), kToken, 5s, opts);
  EXPECT_ERROR_HAS(s.set(std::string(17, 'k'), {}), "a key of 17 bytes is over the 16-byte limit");
  EXPECT_ERROR_HAS(s.set("k", Bytes(101)), "a value of 101 bytes is over the 100-byte limit");
  EXPECT_ERROR_HAS(s.wait({"ok", std::string(20, 'w')}, 1s), "WAIT of keys 'ok', 'wwww");
  s.set("k", Bytes(100));  // the connection is untouched
  EXPECT_EQ(s.get("k", 1s).size(), 100u);
}

TEST_P(TcpStoreTest, OversizedFrameClosesOnlyThatConnection) {
  TcpStoreServer server(GetParam(), 0, kToken, StoreLimits{64, 1024});
  auto big = connect(server);  // default (larger) client limits: the server is the judge here
  auto other = connect(server);
  EXPECT_ERROR_HAS(big->set("k", Bytes(4096)),
                   "the server closed the connection: frame of 4106 bytes is over the 1152-byte "
                   "limit");
  EXPECT_ERROR_HAS(big->set("k", {}), "the connection was closed after an earlier error");
  EXPECT_ERROR_HAS(connect(server)->get(std::string(65, 'k'), 1s), "key of 65 bytes is over");
  other->set("k", Bytes(1024));
  EXPECT_EQ(connect(server)->get("k", 1s).size(), 1024u);
}

// What one client holds and what the store holds are bounded: a SET or ADD past either is an
// error for that request only, and replacing or deleting keys gives the room back.
TEST_P(TcpStoreTest, ClientAndStoreBytesAreCapped) {
  StoreLimits limits{64, 1024};
  limits.max_client_bytes = 3000;
  limits.max_store_bytes = 5000;
  TcpStoreServer server(GetParam(), 0, kToken, limits);
  auto a = connect(server), b = connect(server), c = connect(server);
  a->set("a1", Bytes(1000));
  a->set("a2", Bytes(1000));
  a->set("a1", Bytes(1000));  // its own key again: still 2004 bytes
  EXPECT_ERROR_HAS(a->set("a3", Bytes(1000)),
                   "would hold 3006 bytes, over the limit of 3000 per client");
  EXPECT_FALSE(a->check({"a3"}));
  EXPECT_EQ(a->add("n", 5), 5);  // the connection is still usable: 2004 + 9 bytes
  EXPECT_ERROR_HAS(a->set("a3", Bytes(990)), "over the limit of 3000 per client");
  b->set("b1", Bytes(1000));
  b->set("b2", Bytes(1000));
  EXPECT_ERROR_HAS(c->set("c1", Bytes(1000)),
                   "the store would hold 5019 bytes, over its limit of 5000");
  EXPECT_TRUE(a->remove("a2"));
  c->set("c1", Bytes(1000));
  EXPECT_EQ(b->get("c1", 1s).size(), 1000u);
  // b overwrites a key a wrote: the bytes move to b.
  b->set("a1", Bytes(10));
  a->set("a3", Bytes(1000));
  EXPECT_ERROR_HAS(b->set("b3", Bytes(1000)), "would hold 3018 bytes");
}

TEST_P(TcpStoreTest, GarbageAndSilentConnectionsDoNotDisturbTheServer) {
  TcpStoreServer server(GetParam(), 0, kToken);
  auto good = connect(server);
  std::vector<Bytes> attacks = {
      {0xff, 0xff, 0xff, 0xff},                            // a 4 GiB frame, before HELLO
      {0x00, 0x00, 0x00, 0x00},                            // an empty frame
      {'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P'},  // wrong protocol altogether
  };
  StoreRequest set;
  set.op = StoreOp::kSet;
  set.keys = {"k"};
  attacks.push_back(encode_store_request(set));  // a request before HELLO
  Bytes twice = hello_frame(kToken);
  const Bytes h = hello_frame(kToken);
  twice.insert(twice.end(), h.begin(), h.end());
  attacks.push_back(twice);  // HELLO twice
  for (const Bytes& a : attacks) {
    RawConn raw(server.port());
    ASSERT_TRUE(raw.ok());
    raw.send(a);
    EXPECT_EQ(last_status(raw.read_to_end()), 4);  // PROTOCOL, then EOF (not a 5 s timeout)
  }
  std::vector<std::unique_ptr<RawConn>> silent;
  for (int i = 0; i < 50; ++i) silent.push_back(std::make_unique<RawConn>(server.port()));
  {
    RawConn partial(server.port());
    partial.send({0x10, 0x00, 0x00, 0x00, 0x01});  // half a frame, then gone
  }
  good->set("still", to_bytes("here"));
  EXPECT_EQ(to_string(connect(server)->get("still", 1s)), "here");
}

TEST_P(TcpStoreTest, ClientConnectingBeforeTheServerStartsRetries) {
  const int port = free_port();
  std::string err;
  std::thread client([&] {
    err = error_of([&] {
      TcpStore s("127.0.0.1", port, kToken, 20s);
      s.set("early", to_bytes("bird"));
    });
  });
  std::this_thread::sleep_for(300ms);
  TcpStoreServer server(GetParam(), port, kToken);
  client.join();
  EXPECT_EQ(err, "(no error)");
  EXPECT_EQ(to_string(connect(server)->get("early", 1s)), "bird");
}

TEST_P(TcpStoreTest, ConnectTimeoutNamesTheEndpoint) {
  const int port = free_port();
  EXPECT_ERROR_HAS(TcpStore("127.0.0.1", port, kToken, 200ms),
                   fmt::format("store: could not connect to 127.0.0.1:{} within 200 ms", port));
}

TEST_P(TcpStoreTest, SilentServerIsAnIoTimeoutNotAHang) {
  // A listening socket nobody serves: the kernel accepts the connection, nothing answers.
  int port = 0;
  const int fd = testing::bind_loopback(0, 4, &port);
  ASSERT_GE(fd, 0);
  TcpStoreOptions opts;
  opts.io_timeout = 200ms;
  EXPECT_ERROR_HAS(TcpStore("127.0.0.1", port, kToken, 1s, opts),
                   "failed: no response within 200 ms");
  ::close(fd);
}

TEST_P(TcpStoreTest, ServerShutdownWakesAWaitingClient) {
  auto server = std::make_unique<TcpStoreServer>(GetParam(), 0, kToken);
  auto s = connect(*server);
  std::string err;
  const auto start = Clock::now();
  std::thread waiter([&] { err = error_of([&] { s->get("never", 60s); }); });
  std::this_thread::sleep_for(100ms);
  server.reset();
  waiter.join();
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_NE(err.find("GET of key 'never' on 127.0.0.1:"), std::string::npos) << err;
  EXPECT_NE(err.find("connection closed by the server"), std::string::npos) << err;
}

TEST_P(TcpStoreTest, RemoveLargeValuesAndSharedClient) {
  TcpStoreServer server(GetParam(), 0, kToken);
  auto s = connect(server);
  s->set("gone", to_bytes("x"));
  EXPECT_TRUE(s->remove("gone"));
  EXPECT_FALSE(s->check({"gone"}));
  EXPECT_FALSE(s->remove("gone"));
  Bytes big(16u << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  s->set("big", big);
  EXPECT_EQ(connect(server)->get("big", 5s), big);
  std::vector<std::thread> threads;  // one client shared by several threads
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) s->add("shared", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(s->add("shared", 0), 400);
}

INSTANTIATE_TEST_SUITE_P(store, TcpStoreTest, ::testing::Values("127.0.0.1", "0.0.0.0"),
                         [](const auto& info) {
                           return std::string(info.param) == "0.0.0.0" ? "any" : "loopback";
                         });

// ---- Protocol ----------------------------------------------------------------------------------

struct Sample {
  const char* name;
  StoreRequest req;
};

std::vector<Sample> samples() {
  auto make = [](StoreOp op, std::vector<std::string> keys) {
    StoreRequest r;
    r.op = op;
    r.keys = std::move(keys);
    return r;
  };
  std::vector<Sample> out;
  StoreRequest hello;
  hello.token = kToken;
  out.push_back({"hello", hello});
  StoreRequest set = make(StoreOp::kSet, {"rank/0"});
  set.value = {1, 2, 3, 0, 255};
  out.push_back({"set", set});
  out.push_back({"set_empty", make(StoreOp::kSet, {""})});
  StoreRequest get = make(StoreOp::kGet, {"rank/1"});
  get.timeout_ms = 1500;
  out.push_back({"get", get});
  StoreRequest add = make(StoreOp::kAdd, {"n"});
  add.delta = -5;
  out.push_back({"add", add});
  StoreRequest wait = make(StoreOp::kWait, {"a", "bb", "ccc"});
  wait.timeout_ms = UINT64_MAX;
  out.push_back({"wait", wait});
  out.push_back({"check_none", make(StoreOp::kCheck, {})});
  out.push_back({"delete", make(StoreOp::kDelete, {"k"})});
  return out;
}

class StoreProtocol : public ::testing::TestWithParam<Sample> {};

TEST_P(StoreProtocol, RoundTripsAndWaitsForWholeFrames) {
  const StoreRequest& want = GetParam().req;
  Bytes frame = encode_store_request(want);
  StoreRequest got;
  ASSERT_EQ(parse_store_request(frame.data(), frame.size(), {}, got), frame.size());
  EXPECT_EQ(got.op, want.op);
  EXPECT_EQ(got.keys, want.keys);
  EXPECT_EQ(got.value, want.value);
  EXPECT_EQ(got.token, want.token);
  EXPECT_EQ(got.delta, want.delta);
  EXPECT_EQ(got.timeout_ms, want.timeout_ms);
  for (size_t n = 0; n < frame.size(); ++n) {
    EXPECT_EQ(parse_store_request(frame.data(), n, {}, got), 0u) << "prefix of " << n;
  }
  const size_t one = frame.size();
  frame.insert(frame.end(), frame.begin(), frame.end());  // two frames back to back
  EXPECT_EQ(parse_store_request(frame.data(), frame.size(), {}, got), one);
}

// The deterministic stand-in for libFuzzer: mutations of each valid frame, alone and followed by
// a valid frame, through the fuzz entry point (which aborts on a broken invariant).
TEST_P(StoreProtocol, MutationsOnlyEverThrowKilnErrors) {
  const Bytes base = encode_store_request(GetParam().req);
  std::mt19937_64 rng(std::hash<std::string>{}(GetParam().name));
  int rejected = 0, total = 0;
  auto run = [&](const Bytes& b) {
    ++total;
    try {
      LLVMFuzzerTestOneInput(b.data(), b.size());
      StoreRequest r;
      parse_store_request(b.data(), b.size(), {}, r);
    } catch (const Error&) {
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "a non-kiln exception escaped: " << e.what();
    }
  };
  for (size_t n = 0; n <= base.size(); ++n) run(Bytes(base.begin(), base.begin() + n));
  for (uint32_t len : {0u, 1u, 4u, 5u, 1151u, 1152u, 1153u, 1u << 31, UINT32_MAX}) {
    Bytes b = base;
    for (int i = 0; i < 4; ++i) b[i] = static_cast<uint8_t>(len >> (8 * i));
    run(b);
  }
  for (int i = 0; i < 600; ++i) {
    Bytes b = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % b.size();
      switch (rng() % 4) {
        case 0:
          b[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 1:
          b[at] = static_cast<uint8_t>(rng());
          break;
        case 2:
          b[at] = static_cast<uint8_t>(rng() % 2 ? 0xff : 0x00);
          break;
        default:
          b.erase(b.begin() + static_cast<ptrdiff_t>(at));
          break;
      }
      if (b.empty()) break;
    }
    run(b);
    b.insert(b.end(), base.begin(), base.end());
    run(b);
  }
  for (int i = 0; i < 200; ++i) {
    Bytes b(rng() % 64);
    for (auto& x : b) x = static_cast<uint8_t>(rng());
    run(b);
  }
  EXPECT_GT(total, 1400);
  EXPECT_GT(rejected, 0);
}

INSTANTIATE_TEST_SUITE_P(store, StoreProtocol, ::testing::ValuesIn(samples()),
                         [](const auto& info) { return std::string(info.param.name); });

struct BadFrame {
  const char* name;
  Bytes bytes;
  const char* error;
};

Bytes frame_of(std::initializer_list<uint8_t> body) {
  Bytes b(4 + body.size());
  b[0] = static_cast<uint8_t>(body.size());
  std::copy(body.begin(), body.end(), b.begin() + 4);
  return b;
}

std::vector<BadFrame> bad_frames() {
  Bytes trailing = encode_store_request(samples()[5].req);
  trailing.push_back(0);
  trailing[0] += 1;
  return {
      {"empty", {0, 0, 0, 0}, "store: empty frame"},
      {"over_bound", {0x81, 0x04, 0x00, 0x00}, "frame of 1153 bytes is over the 1152-byte limit"},
      {"unknown_op", frame_of({9}), "store: unknown op 9"},
      {"bad_magic", frame_of({1, 'H', 'T', 'T', 'P', 1, 0, 0, 0, 0, 0, 0, 0}),
       "not a kiln store client"},
      {"truncated_key", frame_of({2, 5, 0, 0, 0, 'a'}), "frame ends inside the key"},
      {"long_key", frame_of({7, 65, 0, 0, 0}), "key of 65 bytes is over the 64-byte limit"},
      {"long_value", frame_of({2, 0, 0, 0, 0, 0x01, 0x04, 0, 0}), "value of 1025 bytes is over"},
      {"key_count", frame_of({6, 0xff, 0xff, 0, 0, 0, 0, 0, 0}), "key count 65535 does not fit"},
      {"trailing", trailing, "1 bytes left over"},
  };
}

class StoreProtocolRejects : public ::testing::TestWithParam<BadFrame> {};

TEST_P(StoreProtocolRejects, WithAClearError) {
  const BadFrame& f = GetParam();
  StoreRequest r;
  EXPECT_ERROR_HAS(parse_store_request(f.bytes.data(), f.bytes.size(), StoreLimits{64, 1024}, r),
                   f.error);
}

INSTANTIATE_TEST_SUITE_P(store, StoreProtocolRejects, ::testing::ValuesIn(bad_frames()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kiln
