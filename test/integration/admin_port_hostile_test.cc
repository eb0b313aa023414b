// Hostile crowds against the admin port (server/admin_port.h) in this process: slow clients
// by the hundred, from many loopback addresses or the probe's own, that must starve no probe;
// the per-source and overall caps, which make room by closing the oldest slow connection;
// random and mutated requests. Waits are bounded loops; nothing asserts how fast anything was.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <random>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "server/admin_port.h"
#include "test/integration/admin_port_harness.h"

namespace limiter {
namespace {

using namespace std::chrono_literals;
using testing::AdminPortFixture;
using testing::CapOptions;
using testing::HttpResponse;
using testing::kProbe;
using testing::RawHttpClient;
using testing::Served;
using testing::Slow;
using testing::WaitUntil;

using AdminPortHostileTest = AdminPortFixture;

// Clients that each open a connection and trickle a request header at a byte per second,
// reconnecting as soon as the port closes them: they hold every connection they can.
// Thread-safety: Connect from any thread; the rest from the thread that made them.
class SlowClients {
 public:
  SlowClients(uint16_t port, std::vector<std::string> sources, int count) : port_(port) {
    clients_.resize(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) clients_[i].source = sources[i % sources.size()];
    for (Client& c : clients_) Open(c);  // all at once, before any probe
    thread_ = std::thread([this] { Run(); });
  }
  ~SlowClients() { Stop(); }

  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    clients_.clear();
  }
  int64_t closes() const { return closes_; }      // by the port, as the clients saw them
  int64_t answered() const { return answered_; }  // bytes back: the port must say nothing
  // Whether every client has been closed at least once.
  bool EachClosed() const { return each_closed_; }

  // A connection from `source` whose `request` has reached the port, made while no slow
  // client connects. Until its request arrives, a connection cannot be told from a slow one:
  // newcomers in that gap may close it, as the port promises. On a busy machine the gap can
  // last milliseconds (the connecting thread descheduled), as long as the slow clients take to
  // reconnect past the caps; what is under test is what comes after, however fast they come
  // back.
  RawHttpClient Connect(const std::string& source, std::string_view request)
      LIMITER_EXCLUDES(opening_) {
    MutexLock lock(opening_);
    RawHttpClient c(port_, source);
    EXPECT_TRUE(c.ok() && c.Send(request)) << "cannot connect from " << source << " and send";
    EXPECT_TRUE(WaitUntil([&] { return c.Delivered() || c.ClosedNow(); }));
    return c;
  }

 private:
  struct Client {
    std::string source;
    std::unique_ptr<RawHttpClient> connection;
    std::chrono::steady_clock::time_point last_byte;
    size_t sent = 0;
    int64_t closes = 0;
  };

  void Open(Client& c) LIMITER_EXCLUDES(opening_) {
    MutexLock lock(opening_);
    c.connection = std::make_unique<RawHttpClient>(port_, c.source);
    c.sent = 0;
    Trickle(c, std::chrono::steady_clock::now());
  }

  void Trickle(Client& c, std::chrono::steady_clock::time_point now) {
    static constexpr std::string_view kHeader = "GET /healthz HTTP/1.1\r\nX-Slow: ";
    const char byte = c.sent < kHeader.size() ? kHeader[c.sent] : 'a';
    c.connection->Send(std::string_view(&byte, 1));
    ++c.sent;
    c.last_byte = now;
  }

  void Run() {
    while (!stop_) {
      const auto now = std::chrono::steady_clock::now();
      bool each = true;
      for (Client& c : clients_) {
        if (!c.connection->ok() || c.connection->ClosedNow()) {
          if (!c.connection->unread().empty()) ++answered_;
          ++c.closes;
          ++closes_;
          Open(c);
        } else if (now - c.last_byte >= 1s) {
          Trickle(c, now);
        }
        each = each && c.closes > 0;
      }
      each_closed_ = each;
      std::this_thread::sleep_for(20ms);  // the clients' pace, not a wait for the port
    }
  }

  const uint16_t port_;
  std::vector<Client> clients_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> closes_{0};
  std::atomic<int64_t> answered_{0};
  std::atomic<bool> each_closed_{false};
  Mutex opening_;  // held while a connection is made and sends its first bytes
  std::thread thread_;
};

std::vector<std::string> LoopbackSources(int first, int count) {
  std::vector<std::string> out;
  for (int i = first; i < first + count; ++i) out.push_back("127.0.0." + std::to_string(i));
  return out;
}

// 15 probes from 127.0.0.1 while `count` slow clients hold what they can from `sources`:
// every probe whose request has arrived is answered however many slow clients reconnect after
// it, and the slow ones are closed by the request timeout or to make room, never answered,
// never refused.
void ProbesAmongSlowClients(uint16_t port, AdminPort& admin, std::vector<std::string> sources,
                            int count) {
  SlowClients slow(port, std::move(sources), count);
  int answered = 0;
  for (int i = 0; i < 15; ++i) {
    RawHttpClient probe = slow.Connect("127.0.0.1", kProbe);
    const std::optional<HttpResponse> r = probe.Read(10s);
    EXPECT_TRUE(r && r->status == 200) << "probe " << i << " failed";
    answered += r && r->status == 200;
    std::this_thread::sleep_for(50ms);  // probes spread over the slow clients' lives
  }
  EXPECT_EQ(answered, 15);
  EXPECT_TRUE(WaitUntil([&] { return slow.EachClosed(); })) << "a slow client was never closed";
  slow.Stop();
  EXPECT_TRUE(WaitUntil([&] { return admin.stats().open == 0; }));
  const AdminPortStats s = admin.stats();
  EXPECT_EQ(slow.answered(), 0);
  EXPECT_EQ(s.refused_cap + s.refused_per_source, 0u);
  EXPECT_GE(s.request_timeouts + s.slow_clients_closed, static_cast<uint64_t>(slow.closes()));
  std::cout << count << " slow clients: " << slow.closes() << " closed, " << s.request_timeouts
            << " by the request timeout, " << s.slow_clients_closed << " to make room\n";
}

TEST_F(AdminPortHostileTest, SixteenSlowClientsStarveNoProbe) {
  AdminPort& admin = StartPort();
  ProbesAmongSlowClients(port_number_, admin, LoopbackSources(2, 16), 16);
}

TEST_F(AdminPortHostileTest, SixteenSlowClientsOnTheProbesOwnAddressStarveNoProbe) {
  AdminPort& admin = StartPort();
  ProbesAmongSlowClients(port_number_, admin, {"127.0.0.1"}, 16);
}

TEST_F(AdminPortHostileTest, TwoHundredSlowClientsFrom25AddressesStarveNoProbe) {
  AdminPort& admin = StartPort();
  ProbesAmongSlowClients(port_number_, admin, LoopbackSources(2, 25), 200);
}

TEST_F(AdminPortHostileTest, TwoHundredSlowClientsWithTheProbesAddressAmongThemStarveNoProbe) {
  AdminPort& admin = StartPort();
  ProbesAmongSlowClients(port_number_, admin, LoopbackSources(1, 25), 200);
}

TEST_F(AdminPortHostileTest, AtThePerSourceCapTheNewConnectionIsRefusedWhenNoneOfTheSourcesIsSlow) {
  StartPort(CapOptions(64, 3));
  std::vector<RawHttpClient> kept;
  for (int i = 0; i < 3; ++i) kept.push_back(Served(port_number_, "127.0.0.2"));
  RawHttpClient fourth = Connect("127.0.0.2");
  fourth.Send(kProbe);
  EXPECT_FALSE(fourth.Read());
  EXPECT_TRUE(fourth.closed());
  EXPECT_EQ(fourth.unread(), "");
  EXPECT_TRUE(WaitUntil([&] { return port_->stats().refused_per_source == 1; }));
  EXPECT_EQ(Exchange(kProbe, "127.0.0.3").status, 200);  // another source is not held up
  for (RawHttpClient& c : kept) {                        // and the kept ones were not touched
    ASSERT_TRUE(c.Send(kProbe));
    EXPECT_TRUE(c.Read());
  }
  EXPECT_EQ(port_->stats().slow_clients_closed, 0u);
}

TEST_F(AdminPortHostileTest, AtThePerSourceCapTheOldestSlowConnectionOfThatSourceMakesRoom) {
  StartPort(CapOptions(64, 3));
  RawHttpClient other_source = Slow(port_number_, "127.0.0.3");  // the oldest of all
  RawHttpClient served = Served(port_number_, "127.0.0.2");
  RawHttpClient slow1 = Slow(port_number_, "127.0.0.2");
  RawHttpClient slow2 = Slow(port_number_, "127.0.0.2");
  const HttpResponse r = Exchange(kProbe, "127.0.0.2");
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(slow1.WaitClosed());
  EXPECT_EQ(port_->stats().slow_clients_closed, 1u);
  EXPECT_FALSE(slow2.ClosedNow());
  EXPECT_FALSE(other_source.ClosedNow());
  ASSERT_TRUE(served.Send(kProbe));
  EXPECT_TRUE(served.Read());
  EXPECT_EQ(port_->stats().refused_per_source, 0u);
}

TEST_F(AdminPortHostileTest,
       AtTheConnectionCapTheOldestSlowConnectionMakesRoomElseTheNewOneIsRefused) {
  StartPort(CapOptions(3, 8));
  RawHttpClient a = Served(port_number_, "127.0.0.2");
  RawHttpClient slow = Slow(port_number_, "127.0.0.3");
  RawHttpClient b = Served(port_number_, "127.0.0.4");
  RawHttpClient c = Served(port_number_, "127.0.0.5");  // evicts `slow`
  EXPECT_TRUE(slow.WaitClosed());
  EXPECT_EQ(port_->stats().slow_clients_closed, 1u);
  RawHttpClient refused = Connect("127.0.0.6");
  refused.Send(kProbe);
  EXPECT_FALSE(refused.Read());
  EXPECT_TRUE(WaitUntil([&] { return port_->stats().refused_cap == 1; }));
  for (RawHttpClient* kept : {&a, &b, &c}) {
    ASSERT_TRUE(kept->Send(kProbe));
    EXPECT_TRUE(kept->Read());
  }
  EXPECT_EQ(port_->stats().open, 3);
}

// Random and mutated requests over real sockets, 16 connections at a time, each sent in
// random pieces and ended by a half-close: every answer is a well-formed status line with a
// status the port gives, and afterwards the port serves a probe and holds nothing. The seed
// is printed and LIMITER_ADMIN_FUZZ_SEED replays it; LIMITER_ADMIN_FUZZ_ROUNDS runs longer
// (each round is 16 requests).
TEST_F(AdminPortHostileTest, RandomAndMutatedRequestsGetWellFormedAnswersAndLeaveNothingOpen) {
  StartPort(CapOptions(64, 64));
  const char* rounds_env = std::getenv("LIMITER_ADMIN_FUZZ_ROUNDS");
  const int rounds = rounds_env ? std::atoi(rounds_env) : 25;
  const char* seed_env = std::getenv("LIMITER_ADMIN_FUZZ_SEED");
  const uint32_t seed = seed_env ? static_cast<uint32_t>(std::strtoul(seed_env, nullptr, 10))
                                 : std::random_device{}();
  std::cout << "seed " << seed << ", " << rounds << " rounds\n";
  std::mt19937 rng(seed);
  const std::vector<std::string> corpus = {
      std::string(kProbe),
      "GET /metrics HTTP/1.1\r\nHost: n\r\nAccept: */*\r\n\r\n",
      "HEAD /healthz HTTP/1.0\r\n\r\n",
      "POST /echo?a=b HTTP/1.1\r\nAuthorization: Bearer t\r\nContent-Length: 4\r\n\r\nbody",
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nwiki\r\n0\r\n\r\n",
      "POST /echo HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
      std::string(kProbe) + std::string(kProbe) + "GET /nope HTTP/1.1\r\n\r\n",
      "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n",
      "GET /healthz HTTP/1.1\r\nX-Big: " + std::string(8200, 'h') + "\r\n\r\n",
      "POST /echo HTTP/1.1\r\nContent-Length: 4090\r\n\r\n" + std::string(4090, 'b'),
      "POST /echo HTTP/1.1\r\nContent-Length: 4097\r\n\r\n" + std::string(4097, 'b'),
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + std::string(2048, 'c') +
          "\r\n7f0\r\n" + std::string(2032, 'd') + "\r\n0\r\n\r\n",
  };
  const std::string specials = std::string("\r\n\0: \t;0123456789abcdefxX%?/", 27);
  const auto mutate = [&](std::string s) {
    const int edits = std::uniform_int_distribution<int>(0, 6)(rng);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t at = std::uniform_int_distribution<size_t>(0, s.size() - 1)(rng);
      switch (std::uniform_int_distribution<int>(0, 5)(rng)) {
        case 0:
          s[at] = static_cast<char>(rng());
          break;
        case 1:
          s.insert(at, 1, specials[rng() % specials.size()]);
          break;
        case 2:
          s.erase(at, std::uniform_int_distribution<size_t>(1, 16)(rng));
          break;
        case 3:
          s.insert(at, s.substr(at, std::uniform_int_distribution<size_t>(1, 64)(rng)));
          break;
        case 4:
          s.insert(at, corpus[rng() % corpus.size()]);
          break;
        case 5:
          s.resize(at);
          break;
      }
    }
    return s;
  };
  const std::vector<int> allowed = {100, 200, 400, 404, 405, 413, 431};
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::pair<RawHttpClient, std::string>> batch;
    for (int i = 0; i < 16; ++i) {
      std::string request =
          rng() % 8 == 0 ? std::string(rng() % 512, '\0') : mutate(corpus[rng() % corpus.size()]);
      for (char& c : request) {
        if (c == '\0' && rng() % 2) c = static_cast<char>(rng());
      }
      batch.emplace_back(Connect(), request);
    }
    for (auto& [c, request] : batch) {
      for (size_t at = 0; at < request.size();) {
        const size_t n = std::min(request.size() - at, size_t{1} + rng() % 200);
        if (!c.Send(std::string_view(request).substr(at, n))) break;
        at += n;
      }
      c.ShutdownWrite();
    }
    for (auto& [c, request] : batch) {
      ASSERT_TRUE(c.WaitClosed()) << "seed " << seed << ": left open after\n" << request;
      const std::string& out = c.unread();
      if (out.empty()) continue;
      ASSERT_GE(out.size(), 13u) << "seed " << seed << ": " << out;
      ASSERT_EQ(out.substr(0, 9), "HTTP/1.1 ") << "seed " << seed << ": " << out;
      const int status = std::atoi(out.substr(9, 3).c_str());
      EXPECT_NE(std::find(allowed.begin(), allowed.end(), status), allowed.end())
          << "seed " << seed << ": " << status << " for\n"
          << request;
    }
  }
  for (const int status : allowed) std::cout << status << ": " << port_->responses(status) << "  ";
  std::cout << "\n";
  EXPECT_EQ(Exchange(kProbe).status, 200);
  EXPECT_TRUE(WaitUntil([&] { return port_->stats().open == 0; }));
}

}  // namespace
}  // namespace limiter
