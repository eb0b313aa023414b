// TLS and mutual TLS on the data port of a real limiterd. The test makes its own CA and
// certificates with the openssl CLI: a client with a certificate from the cluster's CA is
// served; one without a certificate, one with a certificate from another CA, one that does
// not trust the node's CA and one speaking plain TCP are all refused.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <tuple>

#include "common/subprocess.h"
#include "protocol/node_access.h"
#include "protocol/node_connection.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"
#include "test/integration/admin_page.h"
#include "test/integration/node_process.h"
#include "test/integration/test_certificates.h"
#include "test/support/ctl_runner.h"
#include "test/support/wait.h"

namespace limiter {
namespace {

using testing::AdminMetric;
using testing::MakeCa;
using testing::MakeCert;
using testing::RunningNode;
using testing::StartNode;
using testing::WriteTempFile;

namespace fs = std::filesystem;

const std::string kSecret = "tls-test-secret-0123456789abcdef";

class Tls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(::testing::TempDir()) / ("limiter_tls_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    made_ = MakeCa(dir_, "ca") && MakeCa(dir_, "rogue") && MakeCert(dir_, "ca", "node") &&
            MakeCert(dir_, "ca", "gateway") && MakeCert(dir_, "rogue", "intruder");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void SetUp() override {
    ASSERT_TRUE(made_) << "the openssl CLI could not make the test certificates in " << dir_;
    const std::string secret = WriteTempFile("tls_secret", kSecret + "\n");
    node_ = StartNode({"--policies", WriteTempFile("tls_policies.yaml", R"(
policies:
  - {name: api, algorithm: token_bucket, limit: 100, window: 1h, class: contract}
)"),
                       "--threads", "1", "--secret-file", secret, "--tls-cert", File("node.pem"),
                       "--tls-key", File("node.key"), "--tls-client-ca", File("ca.pem")});
    ASSERT_FALSE(node_.listen.empty());
  }

  static std::string File(const std::string& name) { return (dir_ / name).string(); }

  int64_t Metric(const std::string& name) { return AdminMetric(node_.admin, name); }

  // Connects with this CA and (optionally) this client certificate; then a CHECK.
  std::string Try(const std::string& ca, const std::string& cert) {
    return TryAt(node_.listen, ca, cert);
  }
  std::string TryAt(const std::string& address, const std::string& ca, const std::string& cert) {
    TlsOptions tls;
    tls.ca_file = File(ca + ".pem");
    if (!cert.empty()) {
      tls.cert_file = File(cert + ".pem");
      tls.key_file = File(cert + ".key");
    }
    NodeAccess access;
    access.secret = kSecret;
    Result<std::shared_ptr<asio::ssl::context>> ctx = MakeClientTlsContext(tls);
    if (!ctx) return "context: " + ctx.error();
    access.tls = *ctx;
    Result<std::unique_ptr<NodeConnection>> c = NodeConnection::Connect(address, 10'000, access);
    if (!c) return c.error();
    RequestBuilder b;
    b.Check(1, "api", "k");
    if (Status s = (*c)->Send(b.Finish()); !s.ok()) return s.error();
    Result<const wire::Reply*> r = (*c)->Receive();
    if (!r) return r.error();
    if (!(*r)->ops() || (*r)->ops()->size() != 1 || !(*r)->ops()->Get(0)->allowed()) {
      return "the CHECK was not allowed";
    }
    return "";
  }

  static inline fs::path dir_;
  static inline bool made_ = false;
  RunningNode node_;
};

TEST_F(Tls, AClientWithACertificateFromTheClusterCaIsServed) {
  EXPECT_EQ(Try("ca", "gateway"), "");
}

TEST_F(Tls, AClientWithoutACertificateIsRefused) {
  const std::string why = Try("ca", "");
  EXPECT_FALSE(why.empty());
  // And the node goes on serving the others.
  EXPECT_EQ(Try("ca", "gateway"), "");
}

TEST_F(Tls, ACertificateFromAnotherCaIsRefused) {
  EXPECT_FALSE(Try("ca", "intruder").empty());
  EXPECT_EQ(Try("ca", "gateway"), "");
}

TEST_F(Tls, AClientThatDoesNotTrustTheNodesCaRefusesIt) {
  const std::string why = Try("rogue", "gateway");
  EXPECT_NE(why.find("certificate"), std::string::npos) << why;
}

TEST_F(Tls, RefusedHandshakesAreCounted) {
  EXPECT_EQ(Metric("limiter_tls_handshake_failures_total"), 0);
  EXPECT_FALSE(Try("ca", "").empty());
  EXPECT_FALSE(Try("ca", "intruder").empty());
  // The node may see the first failure only once the client has gone: wait for both.
  int64_t failures = 0;
  testing::WaitUntil([&] {
    failures = Metric("limiter_tls_handshake_failures_total");
    return failures >= 2;
  });
  EXPECT_EQ(failures, 2);
}

TEST_F(Tls, LimiterctlAndTheClientLibraryCheckOverMutualTls) {
  const std::string secret = WriteTempFile("tls_ctl_secret", kSecret + "\n");
  const std::string policies = WriteTempFile("tls_ctl_policies.yaml", R"(
policies:
  - {name: api, algorithm: token_bucket, limit: 100, window: 1h, class: contract}
)");
  // One node, CHECKs straight to it (NodeConnection).
  testing::CtlOutcome o =
      testing::RunCtl({"check", "--server", node_.listen, "--policy", "api", "--key", "ctl", "-n",
                       "3", "--secret-file", secret, "--tls-ca", File("ca.pem"), "--tls-cert",
                       File("gateway.pem"), "--tls-key", File("gateway.key"), "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  EXPECT_EQ(nlohmann::json::parse(o.out)["allowed"], 3);
  // Through the gateway library (its asio transport), with leases.
  o = testing::RunCtl({"check",
                       "--cluster",
                       node_.listen,
                       "--policy-file",
                       policies,
                       "--policy",
                       "api",
                       "--key",
                       "lib",
                       "-n",
                       "150",
                       "--deadline-ms",
                       "5000",
                       "--secret-file",
                       secret,
                       "--tls-ca",
                       File("ca.pem"),
                       "--tls-cert",
                       File("gateway.pem"),
                       "--tls-key",
                       File("gateway.key"),
                       "--json"});
  ASSERT_EQ(o.status, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["allowed"], 100) << o.out;
  EXPECT_EQ(j["by_source"]["fallback"], 0) << o.out;
  // Without a client certificate the library's calls fail, and it says so.
  o = testing::RunCtl({"check", "--server", node_.listen, "--policy", "api", "--key", "ctl",
                       "--secret-file", secret, "--tls-ca", File("ca.pem")});
  EXPECT_EQ(o.status, 1);
  EXPECT_FALSE(o.err.empty());
}

// A connection to `address` (127.0.0.1:port) that has sent `bytes`; -1 on failure.
int ConnectAndSend(const std::string& address, const std::string& bytes) {
  const size_t colon = address.rfind(':');
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
    ::close(fd);
    return -1;
  }
  timeval wait{50, 0};  // past any bound below: a read that times out was never closed
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  return fd;
}

// Whether the node closed `fd` (a read sees the end) rather than leaving it open.
bool ClosedByTheNode(int fd) {
  char byte = 0;
  const ssize_t n = ::recv(fd, &byte, 1, 0);
  ::close(fd);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

TEST_F(Tls, StalledHandshakesAreBoundedInNumberAndTime) {
  RunningNode slow = StartNode(
      {"--policies",
       WriteTempFile("tls_slow_policies.yaml",
                     "policies:\n  - {name: api, "
                     "algorithm: token_bucket, limit: 100, window: 1h, class: "
                     "contract}\n"),
       "--threads", "1", "--auth-timeout-ms", "500", "--max-tls-handshakes", "1", "--secret-file",
       WriteTempFile("tls_slow_secret", kSecret + "\n"), "--tls-cert", File("node.pem"),
       "--tls-key", File("node.key"), "--tls-client-ca", File("ca.pem")});
  ASSERT_FALSE(slow.listen.empty());
  // Silent connections hold no handshake: a client still gets through.
  const int silent = ConnectAndSend(slow.listen, "");
  ASSERT_GE(silent, 0);
  EXPECT_EQ(TryAt(slow.listen, "ca", "gateway"), "");
  // The first byte of a ClientHello begins a handshake that never ends: it holds the one
  // slot, so the next connection to begin one is closed.
  const int stalled = ConnectAndSend(slow.listen, std::string(1, '\x16'));
  ASSERT_GE(stalled, 0);
  testing::WaitUntil(
      [&] { return AdminMetric(slow.admin, "limiter_tls_handshakes_in_progress") >= 1; });
  ASSERT_EQ(AdminMetric(slow.admin, "limiter_tls_handshakes_in_progress"), 1);
  EXPECT_TRUE(ClosedByTheNode(ConnectAndSend(slow.listen, std::string(1, '\x16'))));
  EXPECT_EQ(AdminMetric(slow.admin, "limiter_tls_handshakes_refused_total"), 1);
  // The stalled one is closed at the auth timeout (the idle one is 60 s, past the read's
  // own bound), and its slot is free again; so is the silent one, which never began.
  EXPECT_TRUE(ClosedByTheNode(stalled));
  EXPECT_TRUE(ClosedByTheNode(silent));
  EXPECT_EQ(AdminMetric(slow.admin, "limiter_auth_timeouts_total"), 2);
  EXPECT_EQ(AdminMetric(slow.admin, "limiter_frame_timeouts_total"), 0);
  EXPECT_EQ(AdminMetric(slow.admin, "limiter_tls_handshake_failures_total"), 1);
  EXPECT_EQ(AdminMetric(slow.admin, "limiter_tls_handshakes_in_progress"), 0);
  EXPECT_EQ(TryAt(slow.listen, "ca", "gateway"), "");
}

TEST_F(Tls, BadTlsFilesStopTheNodeWithOneMessageNamingThem) {
  const std::string policies = WriteTempFile("tls_bad_policies.yaml",
                                             "policies:\n  - {name: api, algorithm: token_bucket, "
                                             "limit: 1, window: 1s, class: contract}\n");
  const std::vector<std::string> base = {"--listen", "127.0.0.1:0", "--admin",
                                         "",         "--policies",  policies};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.insert(args.end(), more.begin(), more.end());
    return testing::RunToExit(args);
  };
  auto [status, out] = with({"--tls-cert", File("missing.pem"), "--tls-key", File("node.key")});
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("missing.pem"), std::string::npos) << out;
  std::tie(status, out) = with({"--tls-cert", File("node.pem")});
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("--tls-key"), std::string::npos) << out;
  std::tie(status, out) = with({"--tls-cert", File("node.pem"), "--tls-key", File("gateway.key")});
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("gateway.key"), std::string::npos) << out;
  std::tie(status, out) = with({"--tls-cert", File("node.pem"), "--tls-key", File("node.key"),
                                "--tls-client-ca", File("node.key")});
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("node.key"), std::string::npos) << out;
  std::tie(status, out) = with({"--tls-client-ca", File("ca.pem")});
  EXPECT_EQ(status, 1);
  EXPECT_NE(out.find("--tls-cert"), std::string::npos) << out;
}

TEST_F(Tls, PlainTcpIsRefused) {
  NodeAccess plain;
  plain.secret = kSecret;
  Result<std::unique_ptr<NodeConnection>> c = NodeConnection::Connect(node_.listen, 5000, plain);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(Try("ca", "gateway"), "");
}

}  // namespace
}  // namespace limiter
