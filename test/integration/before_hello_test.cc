// Before the hello, and after a secret is gone: connections that never prove anything hold a
// bounded share of a real limiterd's slots for a bounded time (over the node and per source),
// TLS handshakes likewise, replies that nobody reads are bounded over the whole node, and a
// session whose secret was removed ends. Each case asserts the bound and that an honest
// gateway is served meanwhile; waits are loops with generous bounds, no timing is asserted.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "protocol/frame_codec.h"
#include "protocol/node_access.h"
#include "protocol/node_connection.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"
#include "test/integration/admin_page.h"
#include "test/integration/node_process.h"
#include "test/integration/raw_socket.h"
#include "test/integration/test_certificates.h"
#include "test/support/wait.h"

namespace limiter {
namespace {

using testing::AdminMetric;
using testing::ClosedByNode;
using testing::ConnectFrom;
using testing::PortOf;
using testing::RunningNode;
using testing::Socket;
using testing::StartNode;
using testing::WriteTempFile;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

const std::string kSecret = "before-hello-secret-0123456789ab";
const std::string kNext = "before-hello-next-0123456789abcd";
const char* kPolicies = R"(
policies:
  - {name: api, algorithm: token_bucket, limit: 1000000000, window: 1s, class: contract}
)";

NodeAccess WithSecret(const std::string& secret) {
  NodeAccess a;
  a.secret = secret;
  return a;
}

// A CHECK on `c`, answered Ok.
bool Check(NodeConnection& c) {
  RequestBuilder b;
  b.Check(1, "api", "probe");
  if (!c.Send(b.Finish()).ok()) return false;
  Result<const wire::Reply*> r = c.Receive();
  return r.ok() && (*r)->ops() && (*r)->ops()->size() == 1 &&
         (*r)->ops()->Get(0)->status() == wire::Status::Ok;
}

// Waits (up to 20 s) until the metric reaches `at_least`; its last value.
int64_t WaitMetric(const std::string& admin, const std::string& name, int64_t at_least) {
  int64_t v = 0;
  testing::WaitUntil([&] {
    v = AdminMetric(admin, name);
    return v >= at_least;
  });
  return v;
}

TEST(BeforeTheHello, SilentSocketsHoldABoundedShareForABoundedTime) {
  RunningNode node =
      StartNode({"--policies", WriteTempFile("before_policies.yaml", kPolicies), "--threads", "1",
                 "--secret-file", WriteTempFile("before_secret", kSecret + "\n"),
                 "--max-connections", "300", "--auth-timeout-ms", "1000"});
  ASSERT_FALSE(node.listen.empty());
  const int port = PortOf(node.listen);
  // 300 silent sockets from five other addresses: at most a quarter of max_connections (75)
  // wait for their hello at once; each newer one takes the place of the oldest.
  std::vector<Socket> silent;
  for (int i = 0; i < 300; ++i) {
    Socket s = ConnectFrom("127.0.0." + std::to_string(2 + i % 5), port);
    ASSERT_TRUE(s.ok()) << i << ": " << std::strerror(errno);
    silent.push_back(std::move(s));
  }
  EXPECT_EQ(WaitMetric(node.admin, "limiter_preauth_evictions_total", 225), 225);
  EXPECT_EQ(AdminMetric(node.admin, "limiter_connections_preauth"), 75);
  // A gateway with the secret gets in at once: the other slots are kept for sessions.
  Result<std::unique_ptr<NodeConnection>> gateway =
      NodeConnection::Connect(node.listen, 5000, WithSecret(kSecret));
  ASSERT_TRUE(gateway.ok()) << gateway.error();
  EXPECT_TRUE(Check(**gateway));
  // The gateway took one oldest's place too; the rest are closed at the auth timeout, not the
  // idle timeout (60 s).
  EXPECT_EQ(AdminMetric(node.admin, "limiter_preauth_evictions_total"), 226);
  EXPECT_EQ(WaitMetric(node.admin, "limiter_auth_timeouts_total", 74), 74);
  EXPECT_EQ(AdminMetric(node.admin, "limiter_connections_preauth"), 0);
  int closed = 0;
  for (const Socket& s : silent) closed += ClosedByNode(s, 100);
  EXPECT_EQ(closed, 300);
  EXPECT_TRUE(Check(**gateway));  // an authenticated session is no pre-auth one
}

TEST(BeforeTheHello, OneSourceHoldsAtMostItsShare) {
  RunningNode node =
      StartNode({"--policies", WriteTempFile("before_policies.yaml", kPolicies), "--threads", "1",
                 "--secret-file", WriteTempFile("before_secret", kSecret + "\n"),
                 "--max-preauth-per-source", "10"});
  ASSERT_FALSE(node.listen.empty());
  std::vector<Socket> silent;
  for (int i = 0; i < 30; ++i) silent.push_back(ConnectFrom("127.0.0.9", PortOf(node.listen)));
  EXPECT_EQ(WaitMetric(node.admin, "limiter_connections_refused_per_source_total", 20), 20);
  EXPECT_EQ(AdminMetric(node.admin, "limiter_connections_preauth"), 10);
  // Another source is not held back by that one.
  Result<std::unique_ptr<NodeConnection>> gateway =
      NodeConnection::Connect(node.listen, 5000, WithSecret(kSecret));
  ASSERT_TRUE(gateway.ok()) << gateway.error();
  EXPECT_TRUE(Check(**gateway));
}

TEST(BeforeTheHello, StalledTlsHandshakesFromOneSourceLeaveRoomForOthers) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("limiter_before_tls_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ASSERT_TRUE(testing::MakeCa(dir, "ca") && testing::MakeCert(dir, "ca", "node") &&
              testing::MakeCert(dir, "ca", "gateway"))
      << "the openssl CLI could not make the certificates";
  const auto file = [&](const std::string& n) { return (dir / n).string(); };
  RunningNode node =
      StartNode({"--policies", WriteTempFile("before_policies.yaml", kPolicies), "--threads", "1",
                 "--secret-file", WriteTempFile("before_secret", kSecret + "\n"), "--tls-cert",
                 file("node.pem"), "--tls-key", file("node.key"), "--tls-client-ca", file("ca.pem"),
                 "--max-tls-handshakes", "50", "--auth-timeout-ms", "2000"});
  ASSERT_FALSE(node.listen.empty());
  // 50 sockets from one source each send a ClientHello's first byte and stall.
  std::vector<Socket> stalled;
  for (int i = 0; i < 50; ++i) {
    Socket s = ConnectFrom("127.0.0.7", PortOf(node.listen));
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s.Send({0x16}));
    stalled.push_back(std::move(s));
  }
  EXPECT_EQ(WaitMetric(node.admin, "limiter_tls_handshakes_refused_total", 34), 34);
  EXPECT_EQ(AdminMetric(node.admin, "limiter_tls_handshakes_in_progress"), 16);
  // A real handshake from elsewhere is not refused meanwhile.
  NodeAccess access = WithSecret(kSecret);
  Result<std::shared_ptr<asio::ssl::context>> ctx = MakeClientTlsContext(
      TlsOptions{file("gateway.pem"), file("gateway.key"), file("ca.pem"), {}});
  ASSERT_TRUE(ctx.ok()) << ctx.error();
  access.tls = *ctx;
  Result<std::unique_ptr<NodeConnection>> gateway =
      NodeConnection::Connect(node.listen, 5000, access);
  ASSERT_TRUE(gateway.ok()) << gateway.error();
  EXPECT_TRUE(Check(**gateway));
  EXPECT_EQ(AdminMetric(node.admin, "limiter_tls_handshakes_refused_total"), 34);
  // And the stalled ones end at the auth timeout.
  EXPECT_GE(WaitMetric(node.admin, "limiter_auth_timeouts_total", 16), 16);
  fs::remove_all(dir);
}

// Frames of many CHECKs written as fast as the socket takes them, never reading a reply.
void FloodWithoutReading(int fd) {
  RequestBuilder b;
  for (int i = 0; i < 8000; ++i)
    b.Check(static_cast<uint64_t>(i), "api", "k" + std::to_string(i % 64));
  const std::span<const uint8_t> body = b.Finish();
  std::vector<uint8_t> frame;
  AppendFrame(frame, body);
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  size_t sent = 0;
  for (const auto until = Clock::now() + std::chrono::seconds(4); Clock::now() < until;) {
    const ssize_t n = ::send(fd, frame.data() + sent % frame.size(),
                             frame.size() - sent % frame.size(), MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } else {
      return;  // closed by the node
    }
  }
}

TEST(ReplyBudget, ConnectionsThatNeverReadAreBoundedOverTheNode) {
  RunningNode node =
      testing::Launch({"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--policies",
                       WriteTempFile("before_policies.yaml", kPolicies), "--threads", "1",
                       "--secret-file", WriteTempFile("before_secret", kSecret + "\n"),
                       "--reply-budget-bytes", std::to_string(16 << 20)},
                      testing::WithoutAsanQuarantine());
  ASSERT_FALSE(node.listen.empty());
  const int64_t before = testing::ResidentBytes(node.process->pid());
  std::vector<std::unique_ptr<NodeConnection>> readers;
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) {
    Result<std::unique_ptr<NodeConnection>> c =
        NodeConnection::Connect(node.listen, 5000, WithSecret(kSecret));
    ASSERT_TRUE(c.ok()) << c.error();
    fds.push_back((*c)->TakeDescriptor());
    readers.push_back(std::move(c).value());
  }
  std::vector<std::thread> flood;
  for (int fd : fds) flood.emplace_back([fd] { FloodWithoutReading(fd); });
  for (std::thread& t : flood) t.join();
  // The largest of those that do not read are closed until the node holds its budget.
  EXPECT_GE(WaitMetric(node.admin, "limiter_reply_budget_closes_total", 1), 1);
  const int64_t buffered = AdminMetric(node.admin, "limiter_reply_buffered_bytes");
  const int64_t grown = testing::ResidentBytes(node.process->pid()) - before;
  std::printf(
      "20 connections that never read: %lld bytes of replies buffered (budget %d), "
      "RSS grew by %lld KiB, %lld closed\n",
      static_cast<long long>(buffered), 16 << 20, static_cast<long long>(grown / 1024),
      static_cast<long long>(AdminMetric(node.admin, "limiter_reply_budget_closes_total")));
  // A connection holds at most 8 MiB of replies beyond the budget's check (its last frame).
  EXPECT_LE(buffered, (16 << 20) + (8 << 20) + (2 << 20));
  EXPECT_LT(grown, int64_t{112} << 20);  // was about 228 MiB without a node-wide bound
  // An honest gateway is served all along.
  Result<std::unique_ptr<NodeConnection>> gateway =
      NodeConnection::Connect(node.listen, 5000, WithSecret(kSecret));
  ASSERT_TRUE(gateway.ok()) << gateway.error();
  EXPECT_TRUE(Check(**gateway));
  for (int fd : fds) ::close(fd);
}

TEST(Rotation, ASessionOfARemovedSecretEnds) {
  const std::string file = WriteTempFile("before_rotating_secret", kSecret + "\n" + kNext + "\n");
  RunningNode node =
      StartNode({"--policies", WriteTempFile("before_policies.yaml", kPolicies), "--threads", "1",
                 "--secret-file", file, "--secret-reload-ms", "50"});
  ASSERT_FALSE(node.listen.empty());
  Result<std::unique_ptr<NodeConnection>> old_one =
      NodeConnection::Connect(node.listen, 5000, WithSecret(kSecret));
  ASSERT_TRUE(old_one.ok()) << old_one.error();
  Result<std::unique_ptr<NodeConnection>> idle_old =
      NodeConnection::Connect(node.listen, 5000, WithSecret(kSecret));
  ASSERT_TRUE(idle_old.ok()) << idle_old.error();
  Result<std::unique_ptr<NodeConnection>> new_one =
      NodeConnection::Connect(node.listen, 5000, WithSecret(kNext));
  ASSERT_TRUE(new_one.ok()) << new_one.error();
  ASSERT_TRUE(Check(**old_one));
  std::ofstream(file) << kNext << "\n";  // step 3 of the README's rotation
  // The idle one is closed by the reaper; the busy one at its next frame at the latest.
  EXPECT_GE(WaitMetric(node.admin, "limiter_sessions_revoked_total", 1), 1);
  const Socket idle((*idle_old)->TakeDescriptor());
  EXPECT_TRUE(ClosedByNode(idle, 20'000));
  EXPECT_FALSE(Check(**old_one));
  EXPECT_EQ(AdminMetric(node.admin, "limiter_sessions_revoked_total"), 2);
  EXPECT_TRUE(Check(**new_one));
  EXPECT_FALSE(NodeConnection::Connect(node.listen, 5000, WithSecret(kSecret)).ok());
}

}  // namespace
}  // namespace limiter
