// Trust boundaries on real limiterd processes: a gateway holding the gateway secret (and, with
// mutual TLS, a gateway certificate) cannot change the member list, inject key state or drain
// a node; the peer secret's holders, and node certificates, can do what nodes do. Each case
// asserts the refusal and that the node goes on serving as before.
#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/member_list.h"
#include "limiter/client/client.h"
#include "protocol/auth.h"
#include "protocol/key_id.h"
#include "protocol/node_access.h"
#include "protocol/node_connection.h"
#include "protocol/request_builder.h"
#include "protocol/ring.h"
#include "protocol/rules.h"
#include "protocol/state_transfer.h"
#include "protocol/wire.h"
#include "test/integration/admin_page.h"
#include "test/integration/node_process.h"
#include "test/integration/test_certificates.h"
#include "test/support/ctl_runner.h"
#include "test/support/policies.h"

namespace limiter {
namespace {

using testing::AdminMetric;
using testing::RunningNode;
using testing::WriteTempFile;
namespace fs = std::filesystem;

const std::string kGatewaySecret = "roles-gateway-secret-0123456789ab";
const std::string kPeerSecret = "roles-peer-secret-0123456789abcd";
const char* kPolicies = R"(
policies:
  - {name: login, algorithm: gcra, limit: 5, window: 1m, class: security, mode: strict}
  - {name: api, algorithm: token_bucket, limit: 100, window: 1s, class: contract}
)";

// POST /drain with an Authorization header (none when empty): the status, -1 without answer.
int PostDrain(const std::string& admin, const std::string& authorization) {
  const size_t colon = admin.rfind(':');
  httplib::Client http(admin.substr(0, colon), std::stoi(admin.substr(colon + 1)));
  http.set_connection_timeout(2, 0);
  http.set_read_timeout(2, 0);
  httplib::Headers headers;
  if (!authorization.empty()) headers.emplace("Authorization", authorization);
  const httplib::Result r = http.Post("/drain", headers, "", "text/plain");
  return r ? r->status : -1;
}

class RolesCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    policies_ = WriteTempFile("roles_policies.yaml", kPolicies);
    secret_ = WriteTempFile("roles_secret", kGatewaySecret + "\n");
    peer_ = WriteTempFile("roles_peer_secret", kPeerSecret + "\n");
    seed_ = WriteTempFile("roles_key_seed", "roles-key-seed-0123456789abcdef\n");
    for (int i = 0; i < 2; ++i) {
      addresses_.push_back("127.0.0.1:" + std::to_string(testing::PickFreePort()));
    }
    const std::string members = addresses_[0] + "," + addresses_[1];
    for (const std::string& a : addresses_) {
      nodes_.push_back(testing::Launch({"--listen",
                                        a,
                                        "--admin",
                                        "127.0.0.1:0",
                                        "--members",
                                        members,
                                        "--self",
                                        a,
                                        "--policies",
                                        policies_,
                                        "--threads",
                                        "1",
                                        "--generation",
                                        "1",
                                        "--secret-file",
                                        secret_,
                                        "--peer-secret-file",
                                        peer_,
                                        "--key-seed-file",
                                        seed_,
                                        "--handoff-deadline-ms",
                                        "3000"}));
      ASSERT_FALSE(nodes_.back().listen.empty());
    }
    for (const RunningNode& n : nodes_) testing::WaitReady(n);
  }

  std::unique_ptr<NodeConnection> Connect(const std::string& address, NodeAccess access) {
    Result<std::unique_ptr<NodeConnection>> c = NodeConnection::Connect(address, 5000, access);
    EXPECT_TRUE(c.ok()) << c.error();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  static NodeAccess Gateway() {
    NodeAccess a;
    a.secret = kGatewaySecret;
    return a;
  }
  // One op's status and error.
  static std::pair<wire::Status, std::string> One(NodeConnection& c,
                                                  std::span<const uint8_t> body) {
    if (Status s = c.Send(body); !s.ok()) return {wire::Status::BadRequest, s.error()};
    Result<const wire::Reply*> r = c.Receive();
    if (!r) return {wire::Status::BadRequest, r.error()};
    if (!(*r)->ops() || (*r)->ops()->size() != 1) {
      return {wire::Status::BadRequest, (*r)->error() ? (*r)->error()->str() : "no op"};
    }
    const wire::OpReply* o = (*r)->ops()->Get(0);
    return {o->status(), o->error() ? o->error()->str() : ""};
  }
  static std::vector<uint8_t> Joining(const std::string& who, uint64_t generation) {
    flatbuffers::FlatBufferBuilder fbb;
    const auto peer = wire::CreatePeer(fbb, 0, generation, 0, 0, fbb.CreateString(who));
    const auto body = FinishPeerRequest(fbb, wire::OpType::Members, peer);
    return {body.begin(), body.end()};
  }
  static std::vector<uint8_t> Leaving(const std::string& who, uint64_t generation) {
    flatbuffers::FlatBufferBuilder fbb;
    const auto peer = wire::CreatePeer(fbb, 0, generation, 0, fbb.CreateString(who));
    const auto body = FinishPeerRequest(fbb, wire::OpType::Members, peer);
    return {body.begin(), body.end()};
  }

  std::string policies_, secret_, peer_, seed_;
  std::vector<std::string> addresses_;
  std::vector<RunningNode> nodes_;
};

TEST_F(RolesCluster, AGatewayCannotJoinItsOwnListenerAndTakeKeys) {
  // The try from the issue: a gateway connection announces its own listener joining, at a
  // generation minutes ahead; nodes would hand it keys and a 5/min limit would pass 20 of 20.
  const std::string fake = "127.0.0.1:" + std::to_string(testing::PickFreePort());
  const uint64_t ahead = WallClockGeneration() + 5 * 60 * 1000;
  for (const RunningNode& n : nodes_) {
    auto c = Connect(n.listen, Gateway());
    ASSERT_NE(c, nullptr);
    const auto [status, why] = One(*c, Joining(fake, ahead));
    EXPECT_EQ(status, wire::Status::Forbidden) << why;
    EXPECT_EQ(AdminMetric(n.admin, "limiter_membership_members"), 2);
    EXPECT_EQ(AdminMetric(n.admin, "limiter_peer_ops_refused_total"), 1);
  }
  client::Options o;
  o.members = addresses_;
  o.members_generation = 1;
  o.policy_file = policies_;
  o.secret_file = secret_;
  o.deadline = std::chrono::milliseconds(500);
  Result<std::unique_ptr<client::Client>> created = client::Client::Create(o);
  ASSERT_TRUE(created.ok()) << created.error();
  std::unique_ptr<client::Client> client = std::move(created).value();
  int allowed = 0;
  for (int i = 0; i < 20; ++i) allowed += client->Decide({"login", "victim"}).allowed;
  EXPECT_EQ(allowed, 5);
}

TEST_F(RolesCluster, AGatewayCannotLockAKeyOutWithAForgedHandOff) {
  const PolicySet p = testing::Policies(kPolicies, "roles");
  ASSERT_FALSE(p.policies().empty());
  const Policy& login = p.policies()[0];
  KeyLimiter spent(login.algorithm);
  ASSERT_TRUE(spent.Decide(login.rate, 1'000'000, 5).allowed);
  std::vector<int64_t> fields;
  ExportState(spent, 1'000'000, fields);
  const std::string key = "never-used";
  const Ring ring(addresses_);
  const std::string& owner = ring.Owner(key);
  const std::string& other = owner == addresses_[0] ? addresses_[1] : addresses_[0];
  // Ids carry the ring slot and the cluster's seed, which the gateway would not know; it
  // sends the id its own process makes, and the frame is refused before any id is read.
  const KeyId id = protocol::LimitId(login, key, {});
  flatbuffers::FlatBufferBuilder fbb;
  const auto rec = wire::CreateKeyRecord(fbb, id.lo, id.hi, 0, fbb.CreateVector(fields));
  const auto h = wire::CreateHandoff(fbb, fbb.CreateString(other), 2, 0, 0, 0,
                                     fbb.CreateVector(std::vector{rec}), 0, true);
  const auto body = FinishPeerRequest(fbb, wire::OpType::Handoff, wire::CreatePeer(fbb, 0, 0, h));
  auto c = Connect(owner, Gateway());
  ASSERT_NE(c, nullptr);
  const auto [status, why] = One(*c, body);
  EXPECT_EQ(status, wire::Status::Forbidden);
  EXPECT_NE(why.find("did not prove the peer credential"), std::string::npos) << why;
  // The key is as fresh as it was.
  RequestBuilder b;
  b.Check(1, "login", key);
  EXPECT_EQ(One(*c, b.Finish()).first, wire::Status::Ok);
  const RunningNode& n = owner == nodes_[0].listen ? nodes_[0] : nodes_[1];
  EXPECT_EQ(AdminMetric(n.admin, "limiter_handoff_keys_received_total"), 0);
}

TEST_F(RolesCluster, ThePeerSecretsHolderSpeaksForItselfOnly) {
  NodeAccess peer;
  peer.secret = kGatewaySecret;
  peer.peer_secret = kPeerSecret;
  peer.peer_name = "127.0.0.1:1";  // not a member
  auto c = Connect(nodes_[0].listen, peer);
  ASSERT_NE(c, nullptr);
  const uint64_t now = WallClockGeneration();
  const auto [other, why] = One(*c, Leaving(addresses_[1], now));
  EXPECT_EQ(other, wire::Status::Forbidden);
  EXPECT_NE(why.find("speaks for " + addresses_[1]), std::string::npos) << why;
  // Its own leave (of a list it is not in) is taken and changes nothing.
  EXPECT_EQ(One(*c, Leaving("127.0.0.1:1", now)).first, wire::Status::Ok);
  EXPECT_EQ(AdminMetric(nodes_[0].admin, "limiter_membership_members"), 2);
  // A wrong peer secret does not open a connection at all.
  peer.peer_secret = "another-peer-secret-0123456789";
  EXPECT_FALSE(NodeConnection::Connect(nodes_[0].listen, 5000, peer).ok());
}

TEST_F(RolesCluster, DrainingTakesThePeerSecretsTokenFromLoopbackToo) {
  const RunningNode& n = nodes_[0];
  EXPECT_EQ(PostDrain(n.admin, ""), 401);
  EXPECT_EQ(PostDrain(n.admin, "Bearer " + auth::AdminToken(kGatewaySecret)), 403);
  EXPECT_EQ(PostDrain(n.admin, "Bearer " + kPeerSecret), 403);
  EXPECT_EQ(PostDrain(n.admin, "Basic " + auth::AdminToken(kPeerSecret)), 401);
  EXPECT_EQ(AdminMetric(n.admin, "limiter_admin_actions_refused_total"), 4);
  EXPECT_TRUE(testing::Ready(n.admin));
  // limiterctl without the peer secret cannot either.
  testing::CtlOutcome refused = testing::RunCtl({"drain", "--admin", n.admin});
  EXPECT_EQ(refused.status, 2);
  EXPECT_NE(refused.err.find("no peer secret"), std::string::npos) << refused.err;
  // With it: the node leaves, handing its keys over, and exits cleanly.
  testing::CtlOutcome drained =
      testing::RunCtl({"drain", "--admin", n.admin, "--peer-secret-file", peer_});
  EXPECT_EQ(drained.status, 0) << drained.err;
  const std::optional<int> status = n.process->Wait(20'000);
  ASSERT_TRUE(status.has_value()) << "the drained node did not exit";
  EXPECT_EQ(*status, 0);
  EXPECT_EQ(AdminMetric(nodes_[1].admin, "limiter_membership_members"), 1);
}

TEST(RolesFlags, ABadSecretSetupStopsTheNodeWithOneMessage) {
  const std::string policies = WriteTempFile("roles_flag_policies.yaml", kPolicies);
  const std::string secret = WriteTempFile("roles_flag_secret", kGatewaySecret + "\n");
  const std::string both =
      WriteTempFile("roles_flag_both", kPeerSecret + "\n" + kGatewaySecret + "\n");
  const std::string self = "127.0.0.1:" + std::to_string(testing::PickFreePort());
  const std::vector<std::string> cluster = {"--listen",   self,     "--admin",       "",
                                            "--policies", policies, "--members",     self,
                                            "--self",     self,     "--secret-file", secret};
  auto [status, line] = testing::RunToExit(cluster);
  EXPECT_EQ(status, 1);
  EXPECT_NE(line.find("needs a peer credential"), std::string::npos) << line;
  std::vector<std::string> same = cluster;
  same.insert(same.end(), {"--peer-secret-file", both});
  std::tie(status, line) = testing::RunToExit(same);
  EXPECT_EQ(status, 1);
  EXPECT_NE(line.find("also a gateway secret"), std::string::npos) << line;
  // Flags are held to the config file's ranges.
  std::tie(status, line) = testing::RunToExit(
      {"--listen", "127.0.0.1:0", "--policies", policies, "--frame-timeout-ms", "999999999"});
  EXPECT_NE(status, 0);
  EXPECT_NE(line.find("--frame-timeout-ms"), std::string::npos) << line;
}

// Mutual TLS with a CA of node certificates: a gateway with its certificate (and the gateway
// secret) is a gateway whatever member it names; a node certificate is a peer.
class RolesTls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::path(::testing::TempDir()) / ("limiter_roles_tls_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    made_ = testing::MakeCa(dir_, "gateways") && testing::MakeCa(dir_, "nodes") &&
            testing::MakeCert(dir_, "nodes", "node") &&
            testing::MakeCert(dir_, "gateways", "gateway");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string File(const std::string& name) { return (dir_ / name).string(); }

  NodeAccess With(const std::string& cert, const std::string& peer_name) {
    NodeAccess a;
    a.secret = kGatewaySecret;
    a.peer_name = peer_name;
    Result<std::shared_ptr<asio::ssl::context>> ctx = MakeClientTlsContext(
        TlsOptions{File(cert + ".pem"), File(cert + ".key"), File("nodes.pem"), {}});
    EXPECT_TRUE(ctx.ok()) << ctx.error();
    if (ctx.ok()) a.tls = *ctx;
    return a;
  }

  static inline fs::path dir_;
  static inline bool made_ = false;
};

TEST_F(RolesTls, AGatewayCertificateIsNoNodesWhateverItClaims) {
  ASSERT_TRUE(made_) << "the openssl CLI could not make the certificates in " << dir_;
  const std::string policies = WriteTempFile("roles_tls_policies.yaml", kPolicies);
  const std::string secret = WriteTempFile("roles_tls_secret", kGatewaySecret + "\n");
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    addresses.push_back("127.0.0.1:" + std::to_string(testing::PickFreePort()));
  }
  const std::string members = addresses[0] + "," + addresses[1];
  std::vector<RunningNode> nodes;
  for (const std::string& a : addresses) {
    // No peer secret: the node certificate is the peer credential.
    nodes.push_back(testing::Launch({"--listen",
                                     a,
                                     "--admin",
                                     "127.0.0.1:0",
                                     "--members",
                                     members,
                                     "--self",
                                     a,
                                     "--policies",
                                     policies,
                                     "--threads",
                                     "1",
                                     "--secret-file",
                                     secret,
                                     "--tls-cert",
                                     File("node.pem"),
                                     "--tls-key",
                                     File("node.key"),
                                     "--tls-client-ca",
                                     File("gateways.pem"),
                                     "--tls-peer-ca",
                                     File("nodes.pem"),
                                     "--handoff-deadline-ms",
                                     "3000"}));
    ASSERT_FALSE(nodes.back().listen.empty());
  }
  for (const RunningNode& n : nodes) testing::WaitReady(n);
  const uint64_t now = WallClockGeneration();
  Result<std::unique_ptr<NodeConnection>> gateway =
      NodeConnection::Connect(addresses[0], 5000, With("gateway", "127.0.0.1:1"));
  ASSERT_TRUE(gateway.ok()) << gateway.error();
  const auto [refused, why] = [&] {
    flatbuffers::FlatBufferBuilder fbb;
    const auto peer = wire::CreatePeer(fbb, 0, now, 0, fbb.CreateString("127.0.0.1:1"));
    EXPECT_TRUE((*gateway)->Send(FinishPeerRequest(fbb, wire::OpType::Members, peer)).ok());
    Result<const wire::Reply*> r = (*gateway)->Receive();
    EXPECT_TRUE(r.ok() && (*r)->ops());
    const wire::OpReply* o = (*r)->ops()->Get(0);
    return std::pair{o->status(), o->error() ? o->error()->str() : ""};
  }();
  EXPECT_EQ(refused, wire::Status::Forbidden) << why;
  // The same from a connection with the node certificate is a peer's.
  Result<std::unique_ptr<NodeConnection>> node =
      NodeConnection::Connect(addresses[0], 5000, With("node", "127.0.0.1:1"));
  ASSERT_TRUE(node.ok()) << node.error();
  flatbuffers::FlatBufferBuilder fbb;
  const auto peer = wire::CreatePeer(fbb, 0, now, 0, fbb.CreateString("127.0.0.1:1"));
  EXPECT_TRUE((*node)->Send(FinishPeerRequest(fbb, wire::OpType::Members, peer)).ok());
  Result<const wire::Reply*> r = (*node)->Receive();
  ASSERT_TRUE(r.ok() && (*r)->ops());
  EXPECT_EQ((*r)->ops()->Get(0)->status(), wire::Status::Ok);
  // And the nodes hand keys to each other over it: one leaves, the other takes its keys.
  RequestBuilder b;
  // "login" (5 a minute): a spent unit keeps the key's state from being fresh for 12 s, so
  // it is handed over (a fresh state is not; "api" refills a unit in 10 ms).
  for (int i = 0; i < 20; ++i) b.Check(static_cast<uint64_t>(i), "login", "k" + std::to_string(i));
  Result<std::unique_ptr<NodeConnection>> g0 =
      NodeConnection::Connect(addresses[0], 5000, With("gateway", ""));
  ASSERT_TRUE(g0.ok()) << g0.error();
  EXPECT_TRUE((*g0)->Send(b.Finish()).ok());
  Result<const wire::Reply*> checked = (*g0)->Receive();
  ASSERT_TRUE(checked.ok() && (*checked)->ops()) << (checked.ok() ? "no ops" : checked.error());
  int held = 0;  // the keys node 0 owns: the others are WrongOwner
  for (const wire::OpReply* o : *(*checked)->ops()) held += o->status() == wire::Status::Ok;
  ASSERT_GT(held, 0) << "node 0 owns none of the 20 keys";
  nodes[0].process->Signal(SIGTERM);
  ASSERT_TRUE(nodes[0].process->Wait(20'000).has_value());
  EXPECT_EQ(AdminMetric(nodes[1].admin, "limiter_peer_ops_refused_total"), 0);
  EXPECT_GT(AdminMetric(nodes[1].admin, "limiter_handoff_keys_received_total"), 0);
}

}  // namespace
}  // namespace limiter
