// limiter-gateway (examples/http_gateway.cc), the HTTP gateway the compose stack runs, against
// a real limiterd: admitted requests get 200, the rest 429 with Retry-After, bad requests 400,
// bad flags a message and exit 2, SIGTERM a clean stop.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <memory>
#include <sstream>
#include <string>

#include "common/subprocess.h"
#include "test/integration/node_process.h"
#include "test/support/build_paths.h"

namespace limiter {
namespace {

using testing::RunningNode;
using testing::StartNode;
using testing::WriteTempFile;

const char* kPolicies = R"(
policies:
  - {name: login, algorithm: fixed_window, limit: 5, window: 1h, class: security}
  - {name: tenant, algorithm: gcra, limit: 100, window: 1h, class: contract}
  - {name: api_key, algorithm: token_bucket, limit: 100, window: 1h, class: contract,
     parent: tenant}
)";

struct Gateway {
  std::unique_ptr<Subprocess> process;
  int port = -1;
};

// Starts limiter-gateway on a free port in front of `node`; the deadline is long, so that a
// loaded machine does not turn a slow answer into a fallback.
Gateway StartGateway(const std::string& node, const std::string& policies,
                     const std::string& policy) {
  Gateway g;
  Result<std::unique_ptr<Subprocess>> p =
      Subprocess::Start({testing::GatewayBin(), "--listen", "127.0.0.1:0", "--policy-file",
                         policies, "--members", node, "--policy", policy, "--deadline-ms", "5000"});
  EXPECT_TRUE(p.ok()) << p.error();
  if (!p.ok()) return g;
  g.process = std::move(p).value();
  Result<std::string> line = g.process->ReadLine(20'000);
  EXPECT_TRUE(line.ok()) << line.error();
  if (!line.ok()) return g;
  // "limiter-gateway listening on 127.0.0.1:PORT policy NAME"
  const size_t colon = line->find(':', line->find("on "));
  const size_t space = line->find(' ', colon);
  g.port = std::stoi(line->substr(colon + 1, space - colon - 1));
  return g;
}

class HttpGateway : public ::testing::Test {
 protected:
  void SetUp() override {
    policies_ = WriteTempFile("gateway_policies.yaml", kPolicies);
    node_ = StartNode({"--policies", policies_, "--threads", "1"});
    ASSERT_FALSE(node_.listen.empty());
  }
  std::string policies_;
  RunningNode node_;
};

TEST_F(HttpGateway, AdmitsUpToTheLimitThenAnswers429WithRetryAfter) {
  Gateway g = StartGateway(node_.listen, policies_, "login");
  ASSERT_GT(g.port, 0);
  httplib::Client http("127.0.0.1", g.port);
  httplib::Result health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const httplib::Headers alice = {{"X-Api-Key", "alice"}};
  for (int i = 0; i < 5; ++i) {
    httplib::Result r = http.Get("/api/login", alice);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << i;
    EXPECT_EQ(r->get_header_value("X-Limiter-Source"), "store");
  }
  httplib::Result over = http.Get("/api/login", alice);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->status, 429);
  EXPECT_FALSE(over->get_header_value("Retry-After").empty());
  // Another key has its own limit.
  httplib::Result bob = http.Get("/api/login", {{"X-Api-Key", "bob"}});
  ASSERT_TRUE(bob);
  EXPECT_EQ(bob->status, 200);
  // SIGTERM: a clean stop.
  g.process->Signal(SIGTERM);
  EXPECT_EQ(g.process->Wait(20'000), 0);
}

TEST_F(HttpGateway, BadRequestsGet400AndAMessage) {
  Gateway g = StartGateway(node_.listen, policies_, "api_key");
  ASSERT_GT(g.port, 0);
  httplib::Client http("127.0.0.1", g.port);
  httplib::Result no_key = http.Get("/api/orders");
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 400);
  EXPECT_NE(no_key->body.find("X-Api-Key"), std::string::npos) << no_key->body;
  // api_key nests under tenant: without X-Tenant the library says what is missing.
  httplib::Result no_tenant = http.Get("/api/orders", {{"X-Api-Key", "k"}});
  ASSERT_TRUE(no_tenant);
  EXPECT_EQ(no_tenant->status, 400);
  EXPECT_NE(no_tenant->body.find("tenant"), std::string::npos) << no_tenant->body;
  httplib::Result ok = http.Get("/api/orders", {{"X-Api-Key", "k"}, {"X-Tenant", "acme"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST(HttpGatewayStartup, BadFlagsAreAMessageAndExitTwo) {
  const std::string policies = WriteTempFile("gateway_bad_policies.yaml", kPolicies);
  Result<std::unique_ptr<Subprocess>> p =
      Subprocess::Start({"/bin/sh", "-c",
                         testing::GatewayBin() + " --listen nowhere --policy-file " + policies +
                             " --members 127.0.0.1:1 2>&1"});
  ASSERT_TRUE(p.ok()) << p.error();
  Result<std::string> line = (*p)->ReadLine(20'000);
  ASSERT_TRUE(line.ok()) << line.error();
  EXPECT_EQ(*line, "limiter-gateway: --listen 'nowhere' is not HOST:PORT");
  EXPECT_EQ((*p)->Wait(20'000), 2);
  p = Subprocess::Start({"/bin/sh", "-c",
                         testing::GatewayBin() +
                             " --listen 127.0.0.1:0 --policy-file /nonexistent.yaml --members "
                             "127.0.0.1:1 2>&1"});
  ASSERT_TRUE(p.ok()) << p.error();
  line = (*p)->ReadLine(20'000);
  ASSERT_TRUE(line.ok()) << line.error();
  EXPECT_NE(line->find("/nonexistent.yaml"), std::string::npos) << *line;
  EXPECT_EQ((*p)->Wait(20'000), 1);
}

}  // namespace
}  // namespace limiter
