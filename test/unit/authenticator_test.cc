// The Authenticator alone, with no Node: the role each proof gives a session, the refusals of a
// hello that breaks the handshake, what a gateway session may not do, rotation that ends the
// sessions of a removed secret, and the split tokens.
#include "server/authenticator.h"

#include <gtest/gtest.h>

#include <vector>

#include "protocol/frame_codec.h"
#include "protocol/handshake.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"

namespace limiter {
namespace {

constexpr const char* kGateway = "gateway-secret-0123456789abcdef0123";
constexpr const char* kNextGateway = "gateway-secret-next-0123456789abcdef";
constexpr const char* kPeer = "peer-secret-0123456789abcdef01234567";

Authenticator::Options WithSecrets(std::vector<std::string> gateway,
                                   std::vector<std::string> peer) {
  Authenticator::Options o;
  o.node_name = "a:1";
  o.max_frame_bytes = 1 << 20;
  o.secrets = auth::Secrets{std::move(gateway)};
  o.peer_secrets = auth::Secrets{std::move(peer)};
  return o;
}

// One connection's side of the handshake against an Authenticator.
class Connection {
 public:
  Connection(Authenticator& a, ClientHandshake h)
      : auth_(a), handshake_(std::move(h)), session_(a.NewSession()) {}

  // One hello; the result of Authenticate, and the reply it wrote (if any) in reply().
  Result<Authenticator::Step> Hello(RequestBuilder& b) {
    const std::span<const uint8_t> body = b.Finish();
    request_.assign(body.begin(), body.end());
    const wire::Request* r = VerifiedRequest(request_, aligned_);
    EXPECT_NE(r, nullptr);
    out_.clear();
    node_proof_.reset();
    return auth_.Authenticate(session_, *r, out_, node_proof_);
  }
  const wire::Reply* reply() {
    const FrameResult f = DecodeFrame(out_, 1 << 20);
    if (f.status != FrameStatus::kFrame) return nullptr;
    return VerifiedReply(f.body, reply_aligned_);
  }
  // The whole handshake: empty when the authenticator accepted the proof (and gave a node proof
  // the client accepts), else why not.
  std::string Run() {
    RequestBuilder b;
    handshake_.BuildNonceHello(b, "test");
    Result<Authenticator::Step> first = Hello(b);
    if (!first) return first.error();
    if (*first != Authenticator::Step::kAnswered) return "no challenge";
    const wire::Reply* challenge = reply();
    if (challenge == nullptr) return "no challenge frame";
    if (Status s = handshake_.BuildProofHello(*challenge, b, "test"); !s.ok()) return s.error();
    Result<Authenticator::Step> second = Hello(b);
    if (!second) return second.error();
    if (*second != Authenticator::Step::kProceed || !node_proof_) return "no node proof";
    return "";
  }
  Session& session() { return session_; }

 private:
  Authenticator& auth_;
  ClientHandshake handshake_;
  Session session_;
  std::vector<uint8_t> request_;
  std::vector<uint64_t> aligned_, reply_aligned_;
  std::vector<uint8_t> out_;
  std::optional<auth::Mac> node_proof_;
};

TEST(Authenticator, AGatewaySecretGivesTheGatewayRoleAndThePeerSecretThePeerRole) {
  Authenticator a(WithSecrets({kGateway}, {kPeer}));
  EXPECT_FALSE(a.trusts_everyone());
  Connection gateway(a, ClientHandshake(kGateway, "a:1"));
  EXPECT_FALSE(gateway.session().authenticated);
  EXPECT_EQ(a.FrameLimit(gateway.session()), kMaxHelloFrameBytes);
  EXPECT_EQ(gateway.Run(), "");
  EXPECT_TRUE(gateway.session().authenticated);
  EXPECT_FALSE(gateway.session().peer);
  EXPECT_EQ(a.FrameLimit(gateway.session()), 1u << 20);

  Connection peer(a, ClientHandshake::ForPeer(kGateway, kPeer, "b:1", "a:1"));
  EXPECT_EQ(peer.Run(), "");
  EXPECT_TRUE(peer.session().peer);
  EXPECT_EQ(peer.session().peer_name, "b:1");
}

TEST(Authenticator, AGatewayMayNotActAsAPeerAndAPeerSpeaksOnlyForItself) {
  Authenticator a(WithSecrets({kGateway}, {kPeer}));
  Connection gateway(a, ClientHandshake(kGateway, "a:1"));
  ASSERT_EQ(gateway.Run(), "");
  const Status refused = a.MayActAsPeer(&gateway.session(), "MEMBERS", nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().find("is for nodes only"), std::string::npos) << refused.error();

  Connection peer(a, ClientHandshake::ForPeer(kGateway, kPeer, "b:1", "a:1"));
  ASSERT_EQ(peer.Run(), "");
  const std::string self = "b:1", other = "c:1";
  EXPECT_TRUE(a.MayActAsPeer(&peer.session(), "HANDOFF", &self).ok());
  const Status for_other = a.MayActAsPeer(&peer.session(), "HANDOFF", &other);
  ASSERT_FALSE(for_other.ok());
  EXPECT_NE(for_other.error().find("speaks only for itself"), std::string::npos);
}

TEST(Authenticator, AWrongSecretIsRefusedAndTheNodeProvesNothing) {
  Authenticator a(WithSecrets({kGateway}, {kPeer}));
  Connection wrong(a, ClientHandshake("not-the-secret-0123456789abcdef", "a:1"));
  EXPECT_NE(wrong.Run().find("does not match the cluster secret"), std::string::npos);
  EXPECT_FALSE(wrong.session().authenticated);
  // The gateway secret does not prove the peer role.
  Connection posing(a, ClientHandshake::ForPeer(kGateway, kGateway, "b:1", "a:1"));
  EXPECT_NE(posing.Run().find("does not match the peer secret"), std::string::npos);
  EXPECT_FALSE(posing.session().peer);
}

TEST(Authenticator, AHelloThatBreaksTheHandshakeIsRefusedWithWhy) {
  Authenticator a(WithSecrets({kGateway}, {}));
  RequestBuilder b;
  {
    Connection c(a, ClientHandshake(kGateway, "a:1"));
    b.Clear();
    b.Check(1, "api", "k");  // no hello at all
    Result<Authenticator::Step> s = c.Hello(b);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().find("start the connection with a hello"), std::string::npos);
  }
  {
    Connection c(a, ClientHandshake(kGateway, "a:1"));
    b.Clear();
    b.Hello("test", std::vector<uint8_t>(5, 1));  // a nonce of 5 bytes
    Result<Authenticator::Step> s = c.Hello(b);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().find("hello.nonce must be"), std::string::npos) << s.error();
  }
  {
    Connection c(a, ClientHandshake(kGateway, "a:1"));
    const std::vector<uint8_t> nonce(auth::kNonceBytes, 7);
    b.Clear();
    b.Hello("test", nonce);
    b.Check(1, "api", "k");  // ops before the challenge is answered
    Result<Authenticator::Step> s = c.Hello(b);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().find("ops before authentication"), std::string::npos) << s.error();
  }
  {
    Connection c(a, ClientHandshake(kGateway, "a:1"));
    const std::vector<uint8_t> nonce(auth::kNonceBytes, 7);
    b.Clear();
    b.Hello("test", nonce);
    ASSERT_TRUE(c.Hello(b).ok());
    b.Clear();
    b.Hello("test", nonce);  // a second challenge
    Result<Authenticator::Step> s = c.Hello(b);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().find("one challenge only"), std::string::npos) << s.error();
  }
  {
    Connection c(a, ClientHandshake(kGateway, "a:1"));
    const std::vector<uint8_t> nonce(auth::kNonceBytes, 7);
    const std::vector<uint8_t> proof(32, 1);
    b.Clear();
    b.Hello("test", nonce, proof);  // a proof with no challenge before it
    Result<Authenticator::Step> s = c.Hello(b);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().find("without a challenge"), std::string::npos) << s.error();
  }
  {
    Connection c(a, ClientHandshake(kGateway, "a:1"));
    b.Clear();
    b.Hello("test", std::vector<uint8_t>(auth::kNonceBytes, 7), {}, std::string(65, 'm'));
    Result<Authenticator::Step> s = c.Hello(b);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.error().find("hello.peer_name"), std::string::npos) << s.error();
  }
}

TEST(Authenticator, RemovingASecretEndsTheSessionsThatProvedItOnly) {
  Authenticator a(WithSecrets({kGateway, kNextGateway}, {kPeer}));
  Connection old(a, ClientHandshake(kGateway, "a:1"));
  ASSERT_EQ(old.Run(), "");
  Connection next(a, ClientHandshake(kNextGateway, "a:1"));
  ASSERT_EQ(next.Run(), "");
  Connection peer(a, ClientHandshake::ForPeer(kGateway, kPeer, "b:1", "a:1"));
  ASSERT_EQ(peer.Run(), "");
  ASSERT_TRUE(a.SetSecrets(auth::Secrets{{kNextGateway}}).ok());
  EXPECT_FALSE(a.SessionValid(old.session()));
  EXPECT_FALSE(a.SessionValid(old.session()));  // and stays so
  EXPECT_TRUE(a.SessionValid(next.session()));
  EXPECT_TRUE(a.SessionValid(peer.session()));
  EXPECT_EQ(a.current_secret(), kNextGateway);
  // An empty set is ignored: a node never drops its secret.
  EXPECT_TRUE(a.SetSecrets(auth::Secrets{}).ok());
  EXPECT_EQ(a.current_secret(), kNextGateway);
}

TEST(Authenticator, ASecretSetThatWouldMakeAGatewayAPeerIsRefused) {
  Authenticator a(WithSecrets({kGateway}, {kPeer}));
  const Status peer = a.SetPeerSecrets(auth::Secrets{{kGateway}});
  ASSERT_FALSE(peer.ok());
  EXPECT_NE(peer.error().find("also a gateway secret"), std::string::npos) << peer.error();
  EXPECT_FALSE(a.SetSecrets(auth::Secrets{{kPeer}}).ok());
  EXPECT_EQ(a.current_secret(), kGateway);
  EXPECT_EQ(a.current_peer_secret(), kPeer);
}

TEST(Authenticator, TheAdminTokenIsThePeerSecretsOnly) {
  Authenticator a(WithSecrets({kGateway}, {kPeer}));
  EXPECT_TRUE(a.AdminTokenValid(auth::AdminToken(kPeer)));
  EXPECT_FALSE(a.AdminTokenValid(auth::AdminToken(kGateway)));
  EXPECT_FALSE(a.AdminTokenValid(kPeer));  // the secret itself is not the token
  EXPECT_FALSE(a.AdminTokenValid(""));
  Authenticator none(WithSecrets({kGateway}, {}));
  EXPECT_FALSE(none.AdminTokenValid(auth::AdminToken(kPeer)));
}

TEST(Authenticator, WithNoCredentialEverySessionIsAPeer) {
  Authenticator a(WithSecrets({}, {}));
  EXPECT_TRUE(a.trusts_everyone());
  const Session s = a.NewSession();
  EXPECT_TRUE(s.authenticated);
  EXPECT_TRUE(s.peer);
  EXPECT_TRUE(a.MayActAsPeer(&s, "MEMBERS", nullptr).ok());
  EXPECT_FALSE(a.SignSplit("api", "hot", 4, 7, 1000).has_value());  // nothing to sign with
}

TEST(Authenticator, ASplitTokenItSignedIsValidAndAnyOtherIsForged) {
  Authenticator a(WithSecrets({kGateway}, {kPeer}));
  const std::optional<auth::SplitToken> t = a.SignSplit("api", "hot", 4, 7, 60'000);
  ASSERT_TRUE(t.has_value());
  EXPECT_TRUE(a.CheckSplitToken(*t, "api", "hot", 4, 7).status.ok());
  const Authenticator::TokenCheck other_split = a.CheckSplitToken(*t, "api", "hot", 8, 7);
  EXPECT_FALSE(other_split.status.ok());
  EXPECT_FALSE(other_split.lapsed) << "forged";
  EXPECT_NE(other_split.status.error(), "");
  auth::SplitToken changed = *t;
  changed[0] ^= 1;
  const Authenticator::TokenCheck altered = a.CheckSplitToken(changed, "api", "hot", 4, 7);
  EXPECT_FALSE(altered.status.ok());
  EXPECT_FALSE(altered.lapsed) << "forged";
  // One that lapsed long ago (valid for -1 h) was made by this cluster: lapsed, not forged.
  const std::optional<auth::SplitToken> old = a.SignSplit("api", "hot", 4, 7, -3'600'000);
  ASSERT_TRUE(old.has_value());
  const Authenticator::TokenCheck lapsed = a.CheckSplitToken(*old, "api", "hot", 4, 7);
  EXPECT_FALSE(lapsed.status.ok());
  EXPECT_TRUE(lapsed.lapsed);
}

}  // namespace
}  // namespace limiter
