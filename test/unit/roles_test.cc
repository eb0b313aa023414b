// Roles: a gateway holds the gateway secret and may only ask about keys; a node proves the peer
// secret, speaking for one member, and alone may change member lists, hand keys over and
// report region demand. Driven frame by frame through Node::HandleFrame with real sessions,
// as a connection would: what a gateway holding the secret tries, and what a peer may not do
// for another member.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/member_list.h"
#include "protocol/auth.h"
#include "protocol/frame_codec.h"
#include "protocol/handshake.h"
#include "protocol/key_id.h"
#include "protocol/request_builder.h"
#include "protocol/ring.h"
#include "protocol/rules.h"
#include "protocol/state_transfer.h"
#include "protocol/wire.h"
#include "server/config.h"
#include "server/node.h"
#include "test/support/node_harness.h"
#include "test/support/policies.h"

namespace limiter {
namespace {

const std::string kGateway = "gateway-secret-0123456789abcdef";
const std::string kPeer = "peer-secret-0123456789abcdef";
const std::string kNextPeer = "next-peer-secret-0123456789ab";

const char* kPolicies = R"(
policies:
  - {name: login, algorithm: token_bucket, limit: 5, window: 1m, class: security, mode: strict}
  - {name: api, algorithm: token_bucket, limit: 100, window: 1s, class: contract}
)";

const std::vector<std::string> kTwo = {"a:1", "b:1"};

class Roles : public ::testing::Test {
 protected:
  static NodeOptions Options() {
    NodeOptions o;
    o.name = o.self = "a:1";
    o.members = kTwo;
    o.generation = 1;
    o.secrets = auth::Secrets{{kGateway}};
    o.peer_secrets = auth::Secrets{{kPeer, kNextPeer}};
    return o;
  }

  struct Connection {
    Session session;
    Node::AfterFrame after = Node::AfterFrame::kContinue;
  };

  const wire::Reply& Send(Connection& c, std::span<const uint8_t> body) {
    const wire::Reply& r = node_.Send(c.session, body);
    c.after = node_.after();
    return r;
  }
  static std::string ErrorOf(const wire::Reply& r) { return testing::ErrorOf(r); }

  // A connection through the whole handshake; a failure names why.
  Connection Open(ClientHandshake h) {
    Connection c;
    c.session = node_->authenticator().NewSession();
    RequestBuilder b;
    h.BuildNonceHello(b, "test");
    const wire::Reply& challenge = Send(c, b.Finish());
    EXPECT_EQ(c.after, Node::AfterFrame::kContinue) << ErrorOf(challenge);
    if (Status s = h.BuildProofHello(challenge, b, "test"); !s.ok()) ADD_FAILURE() << s.error();
    const wire::Reply& proved = Send(c, b.Finish());
    EXPECT_EQ(c.after, Node::AfterFrame::kContinue) << ErrorOf(proved);
    if (Status s = h.CheckNode(proved); !s.ok()) ADD_FAILURE() << s.error();
    return c;
  }
  Connection Gateway() { return Open(ClientHandshake(kGateway, "a:1")); }
  Connection Peer(const std::string& name, const std::string& secret = kPeer) {
    return Open(ClientHandshake::ForPeer(kGateway, secret, name, "a:1"));
  }
  // The reason a handshake fails (the error frame that closes the connection), or "".
  std::string Refusal(ClientHandshake h) {
    Connection c;
    c.session = node_->authenticator().NewSession();
    RequestBuilder b;
    h.BuildNonceHello(b, "test");
    const wire::Reply& challenge = Send(c, b.Finish());
    if (Status s = h.BuildProofHello(challenge, b, "test"); !s.ok()) return s.error();
    const wire::Reply& proved = Send(c, b.Finish());
    if (c.after == Node::AfterFrame::kClose) return ErrorOf(proved);
    return "";
  }

  // One op's reply (status, error) of a peer frame.
  std::pair<wire::Status, std::string> Op(Connection& c, std::span<const uint8_t> body) {
    const wire::Reply& r = Send(c, body);
    if (!r.ops() || r.ops()->size() != 1) return {wire::Status::BadRequest, "no op: " + ErrorOf(r)};
    const wire::OpReply* o = r.ops()->Get(0);
    return {o->status(), o->error() ? o->error()->str() : std::string()};
  }
  std::vector<uint8_t> Change(bool leaving, const std::string& who, uint64_t generation) {
    flatbuffers::FlatBufferBuilder fbb;
    const auto name = fbb.CreateString(who);
    const auto peer =
        wire::CreatePeer(fbb, 0, generation, 0, leaving ? name : 0, leaving ? 0 : name);
    const auto body = FinishPeerRequest(fbb, wire::OpType::Members, peer);
    return {body.begin(), body.end()};
  }
  std::vector<uint8_t> WholeList(const std::vector<std::string>& list, uint64_t generation) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<flatbuffers::Offset<flatbuffers::String>> names;
    for (const std::string& m : list) names.push_back(fbb.CreateString(m));
    const auto peer = wire::CreatePeer(fbb, fbb.CreateVector(names), generation);
    const auto body = FinishPeerRequest(fbb, wire::OpType::Members, peer);
    return {body.begin(), body.end()};
  }
  // A HANDOFF from `from` carrying `key` of `login` spent to nothing.
  std::vector<uint8_t> SpentLogin(const std::string& from, const std::string& key, bool done) {
    const Policy& login = policies_.policies()[0];
    KeyLimiter state(login.algorithm);
    EXPECT_TRUE(state.Decide(login.rate, clock_.NowMs(), 5).allowed);
    std::vector<int64_t> fields;
    ExportState(state, clock_.NowMs(), fields);
    const KeyId id = protocol::LimitId(login, key, {});
    flatbuffers::FlatBufferBuilder fbb;
    const auto record = wire::CreateKeyRecord(fbb, id.lo, id.hi, 0, fbb.CreateVector(fields), 0, 0);
    const auto keys = fbb.CreateVector(std::vector{record});
    const auto h =
        wire::CreateHandoff(fbb, fbb.CreateString(from), 2, node_->policy_table().digest(),
                            KeyIdSeedDigest(), clock_.NowMs(), keys, 0, done);
    const auto body = FinishPeerRequest(fbb, wire::OpType::Handoff, wire::CreatePeer(fbb, 0, 0, h));
    return {body.begin(), body.end()};
  }
  // Whether login `key` still admits a request here (by a gateway's CHECK).
  bool LoginAllowed(const std::string& key) {
    Connection g = Gateway();
    RequestBuilder b;
    b.Check(9, "login", key);
    const wire::Reply& r = Send(g, b.Finish());
    return r.ops() && r.ops()->Get(0)->status() == wire::Status::Ok && r.ops()->Get(0)->allowed();
  }
  int64_t Stat(const std::string& name) { return node_.Stat(name); }
  // A login key this node owns under `list`, never owned by b:1 under kTwo when `not_b`.
  std::string KeyOwnedBy(const std::vector<std::string>& list, const std::string& owner,
                         bool owned_by_b_before) {
    const Ring ring(list), before(kTwo);
    for (int i = 0;; ++i) {
      const std::string k = "user-" + std::to_string(i);
      if (ring.Owner(k) == owner && (before.Owner(k) == "b:1") == owned_by_b_before) return k;
    }
  }

  const PolicySet policies_ = testing::Policies(kPolicies, "roles.yaml");
  testing::NodeHarness node_{policies_, Options(), 5'000'000};
  ManualClock& clock_ = node_.clock();
};

TEST_F(Roles, AGatewayHoldingTheSecretCannotChangeTheMemberList) {
  Connection g = Gateway();
  EXPECT_FALSE(g.session.peer);
  const uint64_t ahead = WallClockGeneration() + 60'000;
  const auto [joined, why] = Op(g, Change(false, "evil:1", ahead));
  EXPECT_EQ(joined, wire::Status::Forbidden);
  EXPECT_NE(why.find("did not prove the peer credential"), std::string::npos) << why;
  EXPECT_EQ(Op(g, Change(true, "b:1", ahead)).first, wire::Status::Forbidden);
  EXPECT_EQ(Op(g, WholeList({"a:1", "evil:1"}, ahead)).first, wire::Status::Forbidden);
  EXPECT_EQ(node_->membership()->ring.members(), kTwo);
  EXPECT_EQ(node_->membership()->generation, 1u);
  EXPECT_EQ(Stat("peer_refusals"), 3);
  // Asking for the list is a gateway's too (the client library does when a node is down).
  RequestBuilder b;
  b.Members(1);
  const wire::Reply& r = Send(g, b.Finish());
  ASSERT_TRUE(r.ops());
  EXPECT_EQ(r.ops()->Get(0)->status(), wire::Status::Ok);
  EXPECT_EQ(r.ops()->Get(0)->members()->size(), 2u);
  // And the connection goes on serving its own ops.
  EXPECT_TRUE(LoginAllowed("someone"));
}

TEST_F(Roles, AGatewayCannotInjectKeyStateNorEndAWait) {
  Connection g = Gateway();
  const std::string key = KeyOwnedBy({"a:1", "b:1"}, "a:1", false);
  const auto [status, why] = Op(g, SpentLogin("b:1", key, /*done=*/true));
  EXPECT_EQ(status, wire::Status::Forbidden) << why;
  EXPECT_EQ(node_->store().keys(), 0);
  EXPECT_TRUE(LoginAllowed(key));  // no targeted lockout
}

TEST_F(Roles, APeerSpeaksOnlyForTheMemberItProved) {
  Connection b = Peer("b:1");
  EXPECT_TRUE(b.session.peer);
  EXPECT_EQ(b.session.peer_name, "b:1");
  const uint64_t generation = WallClockGeneration();
  // b cannot announce a's leave, nor another's join, nor hand keys over as someone else.
  const auto [other, why] = Op(b, Change(false, "c:1", generation));
  EXPECT_EQ(other, wire::Status::Forbidden);
  EXPECT_NE(why.find("speaks for c:1"), std::string::npos) << why;
  EXPECT_EQ(Op(b, SpentLogin("c:1", "user-1", false)).first, wire::Status::Forbidden);
  EXPECT_EQ(node_->membership()->ring.members(), kTwo);
  // Its own leave is applied.
  EXPECT_EQ(Op(b, Change(true, "b:1", generation)).first, wire::Status::Ok);
  EXPECT_EQ(node_->membership()->ring.members(), std::vector<std::string>{"a:1"});
}

TEST_F(Roles, AHandOffIsTakenOnlyForSlotsThisNodeGainsFromTheSender) {
  Connection b = Peer("b:1");
  ASSERT_EQ(Op(b, Change(true, "b:1", WallClockGeneration())).first, wire::Status::Ok);
  // a now owns every slot. A key that was b's comes with b's state; one that was always a's
  // is refused: b cannot lock a key out that it never held.
  const std::string was_b = KeyOwnedBy({"a:1"}, "a:1", true);
  const std::string was_a = KeyOwnedBy({"a:1"}, "a:1", false);
  const auto [took, note] = Op(b, SpentLogin("b:1", was_b, false));
  EXPECT_EQ(took, wire::Status::Ok) << note;
  EXPECT_FALSE(LoginAllowed(was_b));
  const auto [refused, why] = Op(b, SpentLogin("b:1", was_a, false));
  EXPECT_EQ(refused, wire::Status::Ok);  // the batch is answered; the key is not taken
  EXPECT_NE(why.find("not one this node gains from b:1"), std::string::npos) << why;
  EXPECT_TRUE(LoginAllowed(was_a));
  // A member this node never listed hands nothing.
  Connection x = Peer("x:1");
  const auto [stranger, reason] = Op(x, SpentLogin("x:1", was_a, false));
  EXPECT_EQ(stranger, wire::Status::Forbidden);
  EXPECT_NE(reason.find("not a member"), std::string::npos) << reason;
}

TEST_F(Roles, OneSecretsProofNeverPassesForTheOthers) {
  // The peer secret used as a gateway's, the gateway secret as a peer's: both refused.
  EXPECT_NE(Refusal(ClientHandshake(kPeer, "a:1")).find("does not match the cluster secret"),
            std::string::npos);
  EXPECT_NE(Refusal(ClientHandshake::ForPeer(kGateway, kGateway, "b:1", "a:1"))
                .find("does not match the peer secret"),
            std::string::npos);
  // The next peer secret (rotation) is a peer's too.
  EXPECT_TRUE(Peer("b:1", kNextPeer).session.peer);
  EXPECT_EQ(Stat("auth_failures"), 2);
}

TEST_F(Roles, APeerNamesTheSameMemberInBothHellos) {
  Connection c;
  c.session = node_->authenticator().NewSession();
  const auth::Nonce nonce = auth::RandomNonce();
  RequestBuilder b;
  b.Hello("test", nonce, {}, "b:1");
  const wire::Reply& challenge = Send(c, b.Finish());
  ASSERT_TRUE(challenge.hello() && challenge.hello()->challenge());
  const auth::Bytes ch(challenge.hello()->challenge()->data(),
                       challenge.hello()->challenge()->size());
  const auth::Mac proof = auth::PeerProof(kPeer, ch, nonce, "c:1");
  b.Clear();
  b.Hello("test", nonce, {}, "c:1", proof);
  const wire::Reply& r = Send(c, b.Finish());
  EXPECT_EQ(c.after, Node::AfterFrame::kClose);
  EXPECT_NE(ErrorOf(r).find("same member in both hellos"), std::string::npos) << ErrorOf(r);
  EXPECT_FALSE(c.session.peer);
}

TEST_F(Roles, ARemovedSecretEndsTheSessionsThatProvedIt) {
  Connection old = Peer("b:1", kNextPeer);
  Connection gateway = Gateway();
  ASSERT_TRUE(node_->authenticator().SetPeerSecrets(auth::Secrets{{kPeer}}).ok());
  EXPECT_FALSE(node_->authenticator().SessionValid(old.session));
  EXPECT_TRUE(node_->authenticator().SessionValid(gateway.session));
  RequestBuilder b;
  b.Members(1);
  const wire::Reply& r = Send(old, b.Finish());
  EXPECT_EQ(old.after, Node::AfterFrame::kClose);
  EXPECT_NE(ErrorOf(r).find("no longer accepted"), std::string::npos) << ErrorOf(r);
  EXPECT_EQ(Stat("sessions_revoked"), 1);
  b.Clear();
  b.Check(1, "api", "k");
  EXPECT_TRUE(Send(gateway, b.Finish()).ops()->Get(0)->allowed());
  EXPECT_TRUE(Peer("b:1").session.peer);  // the current one still opens
}

TEST_F(Roles, ARotationThatWouldMakeAGatewayAPeerIsRefused) {
  const Status peer = node_->authenticator().SetPeerSecrets(auth::Secrets{{kGateway}});
  ASSERT_FALSE(peer.ok());
  EXPECT_NE(peer.error().find("also a gateway secret"), std::string::npos) << peer.error();
  const Status gateway = node_->authenticator().SetSecrets(auth::Secrets{{kNextPeer}});
  ASSERT_FALSE(gateway.ok());
  // The node keeps what it had.
  EXPECT_TRUE(Peer("b:1").session.peer);
  EXPECT_FALSE(Gateway().session.peer);
  EXPECT_NE(Refusal(ClientHandshake::ForPeer(kGateway, kGateway, "b:1", "a:1")), "");
}

TEST_F(Roles, TheAdminTokenIsThePeerSecretsOnly) {
  EXPECT_TRUE(node_->authenticator().AdminTokenValid(auth::AdminToken(kPeer)));
  EXPECT_TRUE(node_->authenticator().AdminTokenValid(auth::AdminToken(kNextPeer)));
  EXPECT_FALSE(node_->authenticator().AdminTokenValid(auth::AdminToken(kGateway)));
  EXPECT_FALSE(node_->authenticator().AdminTokenValid(""));
  EXPECT_FALSE(
      node_->authenticator().AdminTokenValid(kPeer));  // the secret itself is not the token
  EXPECT_NE(auth::AdminToken(kPeer), auth::AdminToken(kNextPeer));
  EXPECT_EQ(auth::AdminToken(kPeer).size(), 64u);
}

TEST(RolesWithoutSecrets, ANodeThatAuthenticatesNobodyTrustsEveryPeerAsBefore) {
  NodeOptions o;
  o.self = "a:1";
  o.members = kTwo;
  o.generation = 1;
  testing::NodeHarness h(kPolicies, o, 1000);
  Node& node = h.node();
  EXPECT_TRUE(node.authenticator().trusts_everyone());
  Session s = node.authenticator().NewSession();
  EXPECT_TRUE(s.authenticated);
  EXPECT_TRUE(s.peer);
  EXPECT_FALSE(node.authenticator().AdminTokenValid(auth::AdminToken(kPeer)));
}

TEST(Credentials, APeerSecretOfItsOwnIsNeededByANodeOfACluster) {
  NodeConfig c;
  const auth::Secrets gateway{{kGateway}}, peer{{kPeer}};
  EXPECT_TRUE(CheckCredentials(c, gateway, {}).ok());  // standalone: no peers
  c.node.members = kTwo;
  const Status missing = CheckCredentials(c, gateway, {});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("needs a peer credential"), std::string::npos) << missing.error();
  EXPECT_TRUE(CheckCredentials(c, gateway, peer).ok());
  const Status same = CheckCredentials(c, gateway, auth::Secrets{{kPeer, kGateway}});
  ASSERT_FALSE(same.ok());
  EXPECT_NE(same.error().find("also a gateway secret"), std::string::npos) << same.error();
  // Client certificates authenticate gateways too; a peer CA is then the peer credential.
  c.server.tls.ca_file = "ca.pem";
  EXPECT_FALSE(CheckCredentials(c, {}, {}).ok());
  c.server.tls.peer_ca_file = "peer-ca.pem";
  EXPECT_TRUE(CheckCredentials(c, {}, {}).ok());
  // A node that authenticates nobody (loopback, or --insecure) trusts its peers as before.
  NodeConfig open;
  open.node.members = kTwo;
  EXPECT_TRUE(CheckCredentials(open, {}, {}).ok());
}

TEST(Credentials, TheKeySeedIsOneValueAndEachKindHasItsOwnVariables) {
  ::setenv("LIMITER_KEY_SEED", "seed-0123456789abcdef", 1);
  ::setenv("LIMITER_PEER_SECRET", kPeer.c_str(), 1);
  Result<auth::SecretSource> seed = auth::FindSecrets("", auth::SecretKind::kKeySeed);
  ASSERT_TRUE(seed.ok()) << seed.error();
  EXPECT_EQ(seed->secrets.values, std::vector<std::string>{"seed-0123456789abcdef"});
  Result<auth::SecretSource> peer = auth::FindSecrets("", auth::SecretKind::kPeer);
  ASSERT_TRUE(peer.ok()) << peer.error();
  EXPECT_EQ(peer->secrets.values, std::vector<std::string>{kPeer});
  EXPECT_EQ(peer->description, "$LIMITER_PEER_SECRET");
  Result<auth::SecretSource> gateway = auth::FindSecrets("", auth::SecretKind::kGateway);
  ASSERT_TRUE(gateway.ok());
  EXPECT_TRUE(gateway->secrets.empty());  // the peer's variables are not the gateway's
  ::setenv("LIMITER_KEY_SEED", "seed-0123456789abcdef\nsecond-0123456789abcdef", 1);
  Result<auth::SecretSource> two = auth::FindSecrets("", auth::SecretKind::kKeySeed);
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.error().find("one value, never two"), std::string::npos) << two.error();
  ::unsetenv("LIMITER_KEY_SEED");
  ::unsetenv("LIMITER_PEER_SECRET");
}

}  // namespace
}  // namespace limiter
