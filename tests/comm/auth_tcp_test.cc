// kiln's authenticated Gloo transport (src/kiln/comm/auth_tcp/): a group forms and its
// collectives are exact while hostile threads connect to its listeners and send junk, a wrong
// MAC, nothing at all, or a flood of connections; a rank with another token cannot join; and
// the same junk connection that the authenticated listener shrugs off breaks Gloo's own tcp
// transport (the test has teeth). The groups here call Gloo's algorithms directly on the
// transport, every rank a thread, over Gloo's HashStore.
#include <arpa/inet.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "common/rank_threads.h"
#include "kiln/base/error.h"
#include "kiln/comm/auth_tcp/address.h"
#include "kiln/comm/auth_tcp/device.h"
#include "kiln/comm/auth_tcp/handshake.h"
#include "kiln/comm/auth_tcp/socket_io.h"
#include "kiln/comm/gloo_communicator.h"
#include "kiln/comm/pair_auth.h"

namespace kiln {
namespace {

using std::chrono::milliseconds;
using Device = auth_tcp::Device;

const std::string kToken = "auth-tcp-test-token-0123456789";

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

gloo::transport::tcp::attr loopback_attr() {
  gloo::transport::tcp::attr a;
  auto& in = reinterpret_cast<sockaddr_in&>(a.ai_addr);
  in.sin_family = AF_INET;
  in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.ai_family = AF_INET;
  a.ai_addrlen = sizeof(sockaddr_in);
  return a;
}

// A connected socket to `to`, or -1.
int dial(const sockaddr_storage& to) {
  std::string err;
  return auth_tcp::connect_until(to, auth_tcp::Clock::now() + milliseconds(2000), &err);
}

std::vector<uint8_t> random_bytes(std::mt19937& rng, size_t n) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// True when the listener closed the connection (EOF or reset) within two seconds.
bool closed_by_listener(int fd) {
  auth_tcp::set_io_timeout(fd, milliseconds(2000));
  uint8_t b[256];
  while (true) {
    const ssize_t n = ::recv(fd, b, sizeof b, 0);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) return true;
    if (n < 0) return false;  // timed out: still open
  }
}

// What a hostile process on the network does to a listener, over and over until `stop`:
// random bytes; a well-formed hello for a real context with a wrong MAC; connections that
// stay silent; a burst of connections beyond the listener's pending-handshake cap.
struct Attacker {
  std::atomic<bool> stop{false};
  std::atomic<int> junk{0}, wrong_mac{0}, wrong_mac_rejected{0}, floods{0};
  std::vector<std::thread> threads;

  void start(const std::vector<sockaddr_storage>& listeners, int max_pending) {
    threads.emplace_back([this, listeners] { send_junk(listeners); });
    threads.emplace_back([this, listeners] { send_wrong_macs(listeners); });
    threads.emplace_back([this, listeners, max_pending] { flood(listeners, max_pending); });
  }
  void finish() {
    stop = true;
    for (auto& t : threads) t.join();
  }

  void send_junk(const std::vector<sockaddr_storage>& listeners) {
    std::mt19937 rng(1);
    while (!stop) {
      for (const auto& l : listeners) {
        const int fd = dial(l);
        if (fd < 0) continue;
        const auto b = random_bytes(rng, 64 + rng() % 200);
        auth_tcp::write_full(fd, b.data(), b.size());
        ::close(fd);
        ++junk;
      }
      std::this_thread::sleep_for(milliseconds(2));
    }
  }

  // A hello for context 1 (each device's first), rank 1 to rank 0, then a random "MAC".
  void send_wrong_macs(const std::vector<sockaddr_storage>& listeners) {
    std::mt19937 rng(2);
    while (!stop) {
      const int fd = dial(listeners[0]);
      if (fd < 0) continue;
      auth_tcp::Hello h{1, 1, 0, auth_tcp::random_nonce()};
      const auto hello = auth_tcp::encode_hello(h);
      uint8_t challenge[auth_tcp::kChallengeBytes];
      auth_tcp::set_io_timeout(fd, milliseconds(2000));
      if (auth_tcp::write_full(fd, hello.data(), hello.size()) &&
          auth_tcp::read_full(fd, challenge, sizeof challenge)) {
        const auto mac = random_bytes(rng, auth_tcp::kProofBytes);
        auth_tcp::write_full(fd, mac.data(), mac.size());
        ++wrong_mac;
        if (closed_by_listener(fd)) ++wrong_mac_rejected;
      }
      ::close(fd);
    }
  }

  // Silent connections, a burst of them twice the cap, held open, then replaced.
  void flood(const std::vector<sockaddr_storage>& listeners, int max_pending) {
    while (!stop) {
      std::vector<int> held;
      for (const auto& l : listeners) {
        for (int i = 0; i < 2 * max_pending; ++i) {
          const int fd = dial(l);
          if (fd >= 0) held.push_back(fd);
        }
      }
      ++floods;
      // Held past the listener's handshake deadline, so some are dropped for their silence.
      for (int i = 0; i < 50 && !stop; ++i) std::this_thread::sleep_for(milliseconds(10));
      for (int fd : held) ::close(fd);
    }
  }
};

// Forms a group of `world` over `devices` (rank r on devices[r]) and checks all-reduce,
// all-gather, broadcast and barrier results exactly, `rounds` times.
void run_group(const std::vector<std::shared_ptr<gloo::transport::Device>>& devices,
               milliseconds timeout, int rounds) {
  const int world = static_cast<int>(devices.size());
  gloo::rendezvous::HashStore store;
  testing::run_rank_threads(world, [&](int rank) {
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
    ctx->setTimeout(timeout);
    auto dev = devices[rank];
    ctx->connectFullMesh(store, dev);
    const size_t n = 100003;
    for (int round = 0; round < rounds; ++round) {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i + rank * 3 + round) % 17);
      gloo::AllreduceOptions ar(ctx);
      ar.setOutput(x.data(), n);
      ar.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
      gloo::allreduce(ar);
      for (size_t i = 0; i < n; i += 101) {
        float want = 0;
        for (int r = 0; r < world; ++r) want += static_cast<float>((i + r * 3 + round) % 17);
        ASSERT_EQ(x[i], want) << "all-reduce element " << i << " round " << round;
      }
      std::vector<int32_t> mine(1000, rank * 1000 + round), all(1000 * world);
      gloo::AllgatherOptions ag(ctx);
      ag.setInput(mine.data(), mine.size());
      ag.setOutput(all.data(), all.size());
      gloo::allgather(ag);
      for (int r = 0; r < world; ++r) ASSERT_EQ(all[r * 1000 + 999], r * 1000 + round);
      std::vector<int32_t> b(5000, rank == round % world ? 7 + round : -1);
      gloo::BroadcastOptions bo(ctx);
      bo.setOutput(b.data(), b.size());
      bo.setRoot(round % world);
      gloo::broadcast(bo);
      ASSERT_EQ(b[4999], 7 + round);
      gloo::BarrierOptions bar(ctx);
      gloo::barrier(bar);
    }
  });
}

std::vector<std::shared_ptr<gloo::transport::Device>> auth_devices(
    int world, const std::string& token, auth_tcp::ListenerLimits limits) {
  std::vector<std::shared_ptr<gloo::transport::Device>> d;
  for (int r = 0; r < world; ++r)
    d.push_back(std::make_shared<Device>(loopback_attr(), token, limits));
  return d;
}

TEST(AuthTcp, FormsAndComputesExactlyUnderAttack) {
  ::signal(SIGPIPE, SIG_IGN);
  auth_tcp::ListenerLimits limits;
  limits.handshake_deadline = milliseconds(300);  // silent connections are dropped quickly
  limits.max_pending = 8;
  auto warnings = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(100000);
  spdlog::default_logger()->sinks().push_back(warnings);
  for (int world : {2, 4}) {
    const auto devices = auth_devices(world, kToken, limits);
    std::vector<sockaddr_storage> listeners;
    for (const auto& d : devices) listeners.push_back(static_cast<Device&>(*d).listen_address());
    Attacker attack;
    attack.start(listeners, static_cast<int>(limits.max_pending));
    // The attack is under way before the group's first connection.
    while (attack.junk < 2 * world || attack.floods < 1)
      std::this_thread::sleep_for(milliseconds(5));
    run_group(devices, milliseconds(20000), 8);
    // Long enough under attack for silent connections to pass their deadline.
    while (attack.floods < 3) run_group(devices, milliseconds(20000), 4);
    attack.finish();
    EXPECT_GT(attack.wrong_mac, 0) << "the wrong-MAC attacker never got a challenge";
    EXPECT_EQ(attack.wrong_mac_rejected.load(), attack.wrong_mac.load())
        << "a listener kept a connection with a wrong MAC open";
    // The devices still serve new groups after the attack.
    run_group(devices, milliseconds(20000), 2);
  }
  spdlog::default_logger()->sinks().pop_back();
  // Each kind of attack was seen and rejected, with a warning naming the peer's address.
  std::string log;
  for (const auto& line : warnings->last_formatted()) log += line;
  EXPECT_HAS(log, "gloo auth: rejected a connection from 127.0.0.1:");
  EXPECT_HAS(log, "it did not send a kiln pair hello");
  EXPECT_HAS(log, "its MAC does not match");
  EXPECT_HAS(log, "stayed silent past the 300 ms handshake deadline");
  EXPECT_HAS(log, "handshakes were pending at once");
}

// Gloo's own tcp transport, same junk: a connection that reaches a pair's listener before its
// peer does is taken as the peer, and the pair fails. Shows the attack above is a real one.
TEST(AuthTcp, TheSameJunkBreaksGlooTcp) {
  ::signal(SIGPIPE, SIG_IGN);
  auto attempt = [](bool authenticated) {
    std::shared_ptr<gloo::transport::Device> dev[2];
    for (int r = 0; r < 2; ++r) {
      dev[r] = authenticated ? std::make_shared<Device>(loopback_attr(), kToken)
                             : gloo::transport::tcp::CreateDevice(loopback_attr());
    }
    std::shared_ptr<gloo::transport::Context> ctx[2];
    std::vector<char> addr[2];
    for (int r = 0; r < 2; ++r) {
      ctx[r] = dev[r]->createContext(r, 2);
      ctx[r]->setTimeout(milliseconds(2000));
      addr[r] = ctx[r]->createPair(1 - r)->address().bytes();
    }
    // The hostile connection comes first, to both sides' listeners.
    std::mt19937 rng(3);
    std::vector<int> hostile;
    for (int r = 0; r < 2; ++r) {
      const sockaddr_storage l = authenticated
                                     ? auth_tcp::decode_address(addr[r]).listener
                                     : gloo::transport::tcp::Address(addr[r]).getSockaddr();
      const int fd = dial(l);
      EXPECT_GE(fd, 0);
      const auto b = random_bytes(rng, 64);
      auth_tcp::write_full(fd, b.data(), b.size());
      hostile.push_back(fd);
    }
    std::this_thread::sleep_for(milliseconds(100));
    std::string errors[2];
    std::vector<std::thread> t;
    for (int r = 0; r < 2; ++r) {
      t.emplace_back([&, r] {
        try {
          ctx[r]->getPair(1 - r)->connect(addr[1 - r]);
          std::vector<int32_t> out(1000, r), in(1000, -1);
          auto send = ctx[r]->createUnboundBuffer(out.data(), out.size() * 4);
          auto recv = ctx[r]->createUnboundBuffer(in.data(), in.size() * 4);
          send->send(1 - r, 5);
          recv->recv(1 - r, 5);
          send->waitSend(milliseconds(2000));
          recv->waitRecv(milliseconds(2000));
          if (in[999] != 1 - r) errors[r] = "wrong data";
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
    for (auto& th : t) th.join();
    for (int fd : hostile) ::close(fd);
    return errors[0] + errors[1];
  };
  const std::string tcp = attempt(false);
  EXPECT_NE(tcp, "") << "Gloo's tcp transport survived a junk connection: this test lost its teeth";
  std::fprintf(stderr, "gloo tcp with a junk connection first: %s\n", tcp.c_str());
  EXPECT_EQ(attempt(true), "");
}

// A rank with another token: neither side accepts the other, and everyone fails at the timeout
// naming the rank it was waiting for.
TEST(AuthTcp, ARankWithTheWrongTokenCannotJoin) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      GlooOptions o;
      o.timeout = milliseconds(1500);
      o.same_host_shm = false;
      o.authenticate = PairAuth::kOn;
      o.pair_token = r == 2 ? "another-jobs-token-0123456789" : kToken;
      try {
        make_gloo_communicator(store, r, 3, o);
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r : {0, 1}) {
    EXPECT_HAS(errors[r], "gloo rendezvous of group world, rank " + std::to_string(r) + " of 3");
    EXPECT_HAS(errors[r], "gloo-tcp+auth");
    EXPECT_HAS(errors[r], "for rank 2 to connect");
  }
  EXPECT_HAS(errors[2], "rank 2 could not connect to rank 0");
  EXPECT_HAS(errors[2], "the listener's MAC does not match");
}

// The unbound-buffer semantics Gloo's algorithms rely on, on the transport itself: messages
// that arrive before their receive is posted wait for it; a receive from a set of ranks takes
// any of them, and messages of one pair and slot match in issue order; abortWaitRecv makes a
// wait return false and the receive stays posted; a wait past its timeout throws
// gloo::IoException.
TEST(AuthTcp, UnboundBufferSemantics) {
  const auto devices = auth_devices(3, kToken, {});
  gloo::rendezvous::HashStore store;
  std::atomic<bool> done{false};
  testing::run_rank_threads(3, [&](int rank) {
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, 3);
    ctx->setTimeout(milliseconds(10000));
    auto dev = devices[rank];
    ctx->connectFullMesh(store, dev);
    gloo::BarrierOptions bar(ctx);
    if (rank != 0) {
      int32_t msgs[2] = {rank * 10, rank * 10 + 1};
      auto out = ctx->createUnboundBuffer(msgs, sizeof msgs);
      out->send(0, 9, 0, 4);
      out->send(0, 9, 4, 4);
      out->waitSend();
      out->waitSend();
      gloo::barrier(bar);
      gloo::barrier(bar);  // rank 0 aborted its wait meanwhile
      if (rank == 2) {
        int32_t late = 55;
        auto b = ctx->createUnboundBuffer(&late, 4);
        b->send(0, 55);
        b->waitSend();
      }
      gloo::barrier(bar);
      while (!done) std::this_thread::sleep_for(milliseconds(5));
      return;
    }
    // Both peers' messages are buffered before any receive is posted.
    std::this_thread::sleep_for(milliseconds(200));
    int32_t got[4] = {-1, -1, -1, -1};
    auto in = ctx->createUnboundBuffer(got, sizeof got);
    for (int i = 0; i < 4; ++i) in->recv(std::vector<int>{1, 2}, 9, i * 4, 4);
    std::vector<int> from;
    for (int i = 0; i < 4; ++i) {
      int r = -1;
      ASSERT_TRUE(in->waitRecv(&r, milliseconds(5000)));
      from.push_back(r);
    }
    std::vector<int32_t> seen(got, got + 4);
    for (int r : {1, 2}) {
      const auto first = std::find(seen.begin(), seen.end(), r * 10);
      const auto second = std::find(seen.begin(), seen.end(), r * 10 + 1);
      ASSERT_TRUE(first != seen.end() && second != seen.end()) << "from rank " << r;
      EXPECT_LT(first, second) << "rank " << r << "'s messages out of issue order";
      EXPECT_EQ(std::count(from.begin(), from.end(), r), 2);
    }
    gloo::barrier(bar);
    int32_t late = -1;
    auto b = ctx->createUnboundBuffer(&late, 4);
    b->recv(2, 55);
    std::thread aborter([&] {
      std::this_thread::sleep_for(milliseconds(50));
      b->abortWaitRecv();
    });
    EXPECT_FALSE(b->waitRecv(milliseconds(5000)));
    aborter.join();
    gloo::barrier(bar);
    int r = -1;
    EXPECT_TRUE(b->waitRecv(&r, milliseconds(5000)));
    EXPECT_EQ(r, 2);
    EXPECT_EQ(late, 55);
    gloo::barrier(bar);
    int32_t never = 0;
    auto n = ctx->createUnboundBuffer(&never, 4);
    n->recv(1, 77);
    try {
      n->waitRecv(milliseconds(100));
      ADD_FAILURE() << "a receive nobody sends completed";
    } catch (const gloo::IoException& e) {
      EXPECT_HAS(std::string(e.what()), "timed out after 100 ms");
    }
    done = true;
  });
}

TEST(AuthTcp, OnWithoutATokenIsAnError) {
  GlooOptions o;
  o.authenticate = PairAuth::kOn;
  try {
    make_gloo_communicator(std::make_shared<MemoryStore>(), 0, 1, o);
    FAIL() << "no token";
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "dist.authenticate_pairs is on but rank 0");
  }
  // auto without a token is Gloo's own transport.
  o.authenticate = PairAuth::kAuto;
  EXPECT_EQ(make_gloo_communicator(std::make_shared<MemoryStore>(), 0, 1, o)->transport(),
            "gloo-tcp lo 127.0.0.1");
}

TEST(AuthTcp, Policy) {
  const std::string key = "dist.authenticate_pairs";
  EXPECT_EQ(parse_named(kPairAuthNames, "auto", key), PairAuth::kAuto);
  EXPECT_EQ(parse_named(kPairAuthNames, "on", key), PairAuth::kOn);
  EXPECT_EQ(parse_named(kPairAuthNames, "off", key), PairAuth::kOff);
  try {
    parse_named(kPairAuthNames, "yes", key);
    FAIL();
  } catch (const Error& e) {
    EXPECT_HAS(std::string(e.what()), "dist.authenticate_pairs: 'yes' is not one of auto, on, off");
  }
  EXPECT_TRUE(pairs_authenticate(PairAuth::kAuto, true));
  EXPECT_FALSE(pairs_authenticate(PairAuth::kAuto, false));
  EXPECT_TRUE(pairs_authenticate(PairAuth::kOn, false));
  EXPECT_FALSE(pairs_authenticate(PairAuth::kOff, true));
}

TEST(AuthTcp, HandshakeMacsBindRoleNoncesAndRanks) {
  const auth_tcp::Hello h{7, 3, 1, auth_tcp::random_nonce()};
  const auth_tcp::Nonce n = auth_tcp::random_nonce();
  const auto l = auth_tcp::pair_mac(kToken, auth_tcp::Role::kListener, h, n);
  EXPECT_TRUE(auth_tcp::mac_matches(l, l.data()));
  EXPECT_FALSE(auth_tcp::mac_matches(
      l, auth_tcp::pair_mac(kToken, auth_tcp::Role::kConnector, h, n).data()));
  EXPECT_FALSE(auth_tcp::mac_matches(
      l, auth_tcp::pair_mac("other", auth_tcp::Role::kListener, h, n).data()));
  auth_tcp::Hello other = h;
  other.from_rank = 2;
  EXPECT_FALSE(auth_tcp::mac_matches(
      l, auth_tcp::pair_mac(kToken, auth_tcp::Role::kListener, other, n).data()));
  EXPECT_FALSE(auth_tcp::mac_matches(
      l,
      auth_tcp::pair_mac(kToken, auth_tcp::Role::kListener, h, auth_tcp::random_nonce()).data()));
  const auto bytes = auth_tcp::encode_hello(h);
  const auto back = auth_tcp::decode_hello(bytes.data());
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->context_id, 7u);
  EXPECT_EQ(back->from_rank, 3u);
  EXPECT_EQ(back->nonce, h.nonce);
  uint8_t junk[auth_tcp::kHelloBytes] = {1, 2, 3};
  EXPECT_FALSE(auth_tcp::decode_hello(junk).has_value());
}

}  // namespace
}  // namespace kiln
