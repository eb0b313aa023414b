// limiterd's start-up checks (server/startup.h), each fed the mistake it is there to catch: the
// error says what is wrong in the words limiterd prints, and the first mistake in the checks'
// order is the one named. The secrets come from files here; the environment's variables for
// them are cleared for each test and put back after.
#include "server/startup.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "protocol/auth.h"
#include "protocol/key_id.h"

namespace limiter {
namespace {

const char* kPolicies = R"(
policies:
  - {name: api, algorithm: token_bucket, limit: 100, window: 1s, class: contract}
  - {name: partner, algorithm: gcra, limit: 120, window: 1s, burst: 12, class: contract,
     scope: global}
)";
const std::string kGateway = "gateway-secret-0123456789abcdef";
const std::string kPeer = "peer-secret-0123456789abcdef";
const std::string kSeed = "key-seed-0123456789abcdef";

const char* const kSecretVariables[] = {
    "LIMITER_SECRET",      "LIMITER_SECRET_FILE",      "LIMITER_SECRET_NEXT",
    "LIMITER_PEER_SECRET", "LIMITER_PEER_SECRET_FILE", "LIMITER_PEER_SECRET_NEXT",
    "LIMITER_KEY_SEED",    "LIMITER_KEY_SEED_FILE",
};

class StartupTest : public ::testing::Test {
 protected:
  StartupTest() {
    for (const char* name : kSecretVariables) {
      if (const char* value = std::getenv(name)) saved_.emplace_back(name, value);
      ::unsetenv(name);
    }
  }
  ~StartupTest() override {
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
    for (const std::string& path : files_) std::remove(path.c_str());
  }

  // A file in the temp dir holding `text`; removed after the test.
  std::string File(const std::string& name, const std::string& text) {
    const std::string path =
        ::testing::TempDir() + "/limiter_startup_" + std::to_string(::getpid()) + "_" + name;
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }

  // A standalone node on loopback with a good policy file: it starts.
  NodeConfig Config() {
    NodeConfig c;
    c.policies_path = File("policies.yaml", kPolicies);
    c.server.listen = "127.0.0.1:7450";
    return c;
  }

  // Why `config` does not start ("" when it does).
  static std::string Refusal(NodeConfig config) {
    const Result<Startup> s = CheckStartup(std::move(config));
    return s.ok() ? "" : s.error();
  }

 private:
  std::vector<std::pair<std::string, std::string>> saved_;
  std::vector<std::string> files_;
};

TEST_F(StartupTest, AStandaloneNodeOnLoopbackStartsWithItsPoliciesAndNoWarning) {
  const Result<Startup> s = CheckStartup(Config());
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(s->policies.policies().size(), 2u);
  EXPECT_TRUE(s->warnings.empty());
  EXPECT_TRUE(s->secret.secrets.empty());
  EXPECT_TRUE(s->peer_secret.secrets.empty());
  EXPECT_EQ(s->key_id_seed, auth::KeyIdSeedOf(""));
  EXPECT_FALSE(s->config.node.join_gate);
}

TEST_F(StartupTest, ANodeOfAClusterNamesItselfAmongItsMembers) {
  NodeConfig c = Config();
  c.node.members = {"10.0.0.1:7450", "10.0.0.2:7450"};
  EXPECT_EQ(Refusal(c), "a node in a cluster needs --self HOST:PORT (its own member entry)");
  NodeConfig dns = Config();
  dns.server.members_dns = "limiter.svc:7450";
  EXPECT_EQ(Refusal(dns), "a node in a cluster needs --self HOST:PORT (its own member entry)");
  c.node.self = "10.0.0.3:7450";
  EXPECT_EQ(Refusal(c), "--self 10.0.0.3:7450 is not in the member list");
  c.node.self = "10.0.0.2:7450";
  c.insecure = true;  // a member beyond loopback, with no secret
  const Result<Startup> s = CheckStartup(c);
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_TRUE(s->config.node.join_gate) << "a member waits for the keys it gains";
  c.node.handoff_deadline_ms = 0;
  EXPECT_FALSE(CheckStartup(c)->config.node.join_gate) << "no hand-off, nothing to wait for";
}

TEST_F(StartupTest, APolicyFileIsGivenAndLoads) {
  NodeConfig none = Config();
  none.policies_path.clear();
  EXPECT_EQ(Refusal(none), "no policy file: give --policies FILE or policies: in --config");
  NodeConfig missing = Config();
  missing.policies_path = "/nonexistent/policies.yaml";
  EXPECT_NE(Refusal(missing).find("/nonexistent/policies.yaml"), std::string::npos)
      << Refusal(missing);
  NodeConfig bad = Config();
  bad.policies_path = File("bad.yaml", "policies:\n  - {name: api, algorithm: nope}\n");
  const std::string why = Refusal(bad);
  EXPECT_NE(why.find(bad.policies_path), std::string::npos) << why;
  EXPECT_NE(why.find("nope"), std::string::npos) << why;
}

TEST_F(StartupTest, ThePoliciesKeyCapsFitTheNodesMaxKeys) {
  NodeConfig c = Config();
  c.policies_path = File("capped.yaml", R"(
policies:
  - {name: a, algorithm: gcra, limit: 1, window: 1s, class: contract, max_keys: 1500}
  - {name: b, algorithm: gcra, limit: 1, window: 1s, class: contract, max_keys: 600}
)");
  c.node.store.max_keys = 2000;
  EXPECT_EQ(Refusal(c), c.policies_path +
                            ": the policies' max_keys add up to 2100 (a: 1500, b: 600), more "
                            "than the node's max_keys of 2000");
  c.node.store.max_keys = 2100;
  EXPECT_EQ(Refusal(c), "");
}

TEST_F(StartupTest, TheRegionsAreChecked) {
  NodeConfig c = Config();
  c.node.regions.others.push_back({"eu", {"e:1"}, ""});
  EXPECT_EQ(Refusal(c), "regions: name this node's region (region) too");
  c.node.regions.region = "us";
  c.node.regions.others.push_back({"eu", {"e:2"}, ""});
  EXPECT_EQ(Refusal(c), "regions: 'eu' is named twice");
}

TEST_F(StartupTest, APeerSecretThatIsAlsoAGatewaySecretIsRefused) {
  NodeConfig c = Config();
  c.secret_file = File("gateway", kGateway + "\n");
  c.peer_secret_file = File("peer", kGateway + "\n");
  const std::string why = Refusal(c);
  EXPECT_EQ(why.find("the peer secret is also a gateway secret"), 0u) << why;
  c.peer_secret_file = File("peer", kPeer + "\n");
  EXPECT_EQ(Refusal(c), "");
}

TEST_F(StartupTest, AMemberThatAuthenticatesGatewaysNeedsAPeerCredential) {
  NodeConfig c = Config();
  c.node.members = {"127.0.0.1:7450", "127.0.0.1:7451"};
  c.node.self = "127.0.0.1:7450";
  c.secret_file = File("gateway", kGateway + "\n");
  EXPECT_NE(Refusal(c).find("needs a peer credential"), std::string::npos) << Refusal(c);
  c.peer_secret_file = File("peer", kPeer + "\n");
  const Result<Startup> s = CheckStartup(c);
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(s->config.node.secrets.values, std::vector<std::string>{kGateway});
  EXPECT_EQ(s->config.node.peer_secrets.values, std::vector<std::string>{kPeer});
  EXPECT_EQ(s->secret.file, c.secret_file);
  EXPECT_EQ(s->peer_secret.file, c.peer_secret_file);
  EXPECT_FALSE(s->config.node.peer_tls);
}

TEST_F(StartupTest, WithoutASecretOnlyLoopbackIsServedUnlessInsecure) {
  NodeConfig c = Config();
  c.server.listen = "0.0.0.0:7450";
  EXPECT_EQ(Refusal(c),
            "listening on 0.0.0.0:7450 without a cluster secret would trust every peer that "
            "reaches it; give --secret-file (or $LIMITER_SECRET_FILE / $LIMITER_SECRET), "
            "client certificates (--tls-client-ca), or --insecure");
  for (const char* beyond : {"[::]:7450", "10.1.2.3:7450", "limiter.example:7450", "nowhere"}) {
    c.server.listen = beyond;
    EXPECT_NE(Refusal(c).find("without a cluster secret"), std::string::npos) << beyond;
  }
  for (const char* loopback : {"127.0.0.1:7450", "127.9.9.9:1", "[::1]:7450", "localhost:7450"}) {
    c.server.listen = loopback;
    EXPECT_EQ(Refusal(c), "") << loopback;
  }
  c.server.listen = "0.0.0.0:7450";
  c.insecure = true;
  EXPECT_EQ(Refusal(c), "");
  c.insecure = false;
  c.server.tls.ca_file = "clients-ca.pem";  // client certificates authenticate gateways
  EXPECT_EQ(Refusal(c), "");
  c.server.tls.ca_file.clear();
  c.secret_file = File("gateway", kGateway + "\n");
  EXPECT_EQ(Refusal(c), "");
}

TEST_F(StartupTest, TheKeyIdSeedComesFromItsOwnFileElseFromTheGatewaySecretWithAWarning) {
  NodeConfig c = Config();
  c.secret_file = File("gateway", kGateway + "\n");
  const Result<Startup> derived = CheckStartup(c);
  ASSERT_TRUE(derived.ok()) << derived.error();
  EXPECT_EQ(derived->key_id_seed, auth::KeyIdSeedOf(kGateway));
  ASSERT_EQ(derived->warnings.size(), 1u);
  EXPECT_EQ(derived->warnings[0].find("no key-id seed (--key-seed-file, key_seed_file:, "
                                      "$LIMITER_KEY_SEED_FILE): it is derived from the first "
                                      "gateway secret"),
            0u)
      << derived->warnings[0];

  c.key_seed_file = File("seed", kSeed + "\n");
  const Result<Startup> own = CheckStartup(c);
  ASSERT_TRUE(own.ok()) << own.error();
  EXPECT_EQ(own->key_id_seed, auth::KeyIdSeedOf(kSeed));
  EXPECT_TRUE(own->warnings.empty());

  c.key_seed_file = "/nonexistent/key-seed";
  const std::string why = Refusal(c);
  EXPECT_NE(why.find("/nonexistent/key-seed"), std::string::npos) << why;
  c.key_seed_file = File("two-seeds", kSeed + "\n" + kGateway + "\n");
  EXPECT_NE(Refusal(c).find("one value, never two"), std::string::npos) << Refusal(c);
}

TEST_F(StartupTest, MissingSecretFilesAreNamed) {
  NodeConfig c = Config();
  c.secret_file = "/nonexistent/gateway-secret";
  EXPECT_NE(Refusal(c).find("/nonexistent/gateway-secret"), std::string::npos) << Refusal(c);
  c.secret_file.clear();
  c.peer_secret_file = "/nonexistent/peer-secret";
  EXPECT_NE(Refusal(c).find("/nonexistent/peer-secret"), std::string::npos) << Refusal(c);
  ::setenv("LIMITER_SECRET", "short", 1);  // the environment, when no file is given
  EXPECT_NE(Refusal(Config()).find("at least 16"), std::string::npos) << Refusal(Config());
}

TEST_F(StartupTest, TheFirstMistakeInTheChecksOrderIsTheOneNamed) {
  NodeConfig c = Config();
  c.node.members = {"10.0.0.1:7450"};
  c.policies_path.clear();
  c.server.listen = "0.0.0.0:7450";
  EXPECT_EQ(Refusal(c), "a node in a cluster needs --self HOST:PORT (its own member entry)");
  c.node.self = "10.0.0.1:7450";
  EXPECT_EQ(Refusal(c), "no policy file: give --policies FILE or policies: in --config");
  c.policies_path = Config().policies_path;
  EXPECT_NE(Refusal(c).find("without a cluster secret"), std::string::npos) << Refusal(c);
}

TEST_F(StartupTest, TheStoreOpensOnTheStartupsSeedAndRefusesADurablePolicyWithoutADataDir) {
  // This process has made key ids already: the startup's seed is the one it uses.
  NodeConfig c = Config();
  Result<Startup> s = CheckStartup(c);
  ASSERT_TRUE(s.ok()) << s.error();
  s->key_id_seed = KeyIdSeed();
  ManualClock clock(1000);
  Result<std::unique_ptr<DurableStore>> none = OpenNodeStore(*s, clock);
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_EQ(none->get(), nullptr) << "no policy is durable";

  c.policies_path = File("durable.yaml", R"(
policies:
  - {name: quota, algorithm: fixed_window, limit: 5, window: 1h, class: billing, durable: true}
)");
  Result<Startup> durable = CheckStartup(c);
  ASSERT_TRUE(durable.ok()) << durable.error();
  durable->key_id_seed = KeyIdSeed();
  const Result<std::unique_ptr<DurableStore>> refused = OpenNodeStore(*durable, clock);
  ASSERT_FALSE(refused.ok());
  // Without a data dir (or, in a build without RocksDB, at all): refused, naming the policy.
  EXPECT_NE(refused.error().find("policy 'quota'"), std::string::npos) << refused.error();
}

}  // namespace
}  // namespace limiter
