// The cluster secret: its sources, the proofs, split tokens, and a node's handshake and frame
// bounds driven frame by frame through Node::HandleFrame with a session.
#include "protocol/auth.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "protocol/handshake.h"
#include "protocol/request_builder.h"
#include "protocol/ring.h"
#include "protocol/rules.h"
#include "protocol/wire.h"
#include "server/node.h"
#include "test/support/node_harness.h"
#include "test/support/policies.h"

namespace limiter {
namespace {

const std::string kCurrent = "current-secret-0123456789abcdef";
const std::string kNext = "next-secret-0123456789abcdef";
const std::string kWrong = "wrong-secret-0123456789abcdef";

std::string WriteTempFile(const std::string& name, const std::string& text) {
  const std::string path =
      ::testing::TempDir() + "/limiter_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path) << text;
  return path;
}

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

TEST(Secrets, OneOrTwoPerFileEachLongEnough) {
  Result<auth::Secrets> two = auth::ParseSecrets("  " + kCurrent + "\n\n" + kNext + "\r\n", "f");
  ASSERT_TRUE(two.ok()) << two.error();
  EXPECT_EQ(two->values, (std::vector<std::string>{kCurrent, kNext}));

  Result<auth::Secrets> shorter = auth::ParseSecrets("short\n", "secret.txt");
  ASSERT_FALSE(shorter.ok());
  EXPECT_NE(shorter.error().find("secret.txt:1"), std::string::npos) << shorter.error();
  EXPECT_NE(shorter.error().find("at least 16"), std::string::npos) << shorter.error();

  Result<auth::Secrets> three = auth::ParseSecrets(kCurrent + "\n" + kNext + "\n" + kWrong, "f");
  ASSERT_FALSE(three.ok());
  EXPECT_NE(three.error().find("f:3"), std::string::npos) << three.error();

  EXPECT_FALSE(auth::ParseSecrets("\n \n", "empty").ok());
  EXPECT_FALSE(auth::ParseSecrets(std::string(2000, 'x'), "long").ok());
  EXPECT_FALSE(auth::LoadSecretFile("/nonexistent/secret").ok());
}

// Restores an environment variable on destruction.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Secrets, AFlagFirstThenTheFileVariableThenTheSecretVariable) {
  const std::string file = WriteTempFile("auth_secret", kNext + "\n");
  ScopedEnv no_file("LIMITER_SECRET_FILE", nullptr);
  ScopedEnv secret("LIMITER_SECRET", kCurrent.c_str());
  ScopedEnv next("LIMITER_SECRET_NEXT", nullptr);

  Result<auth::SecretSource> from_env = auth::FindSecrets("");
  ASSERT_TRUE(from_env.ok()) << from_env.error();
  EXPECT_EQ(from_env->secrets.values, std::vector<std::string>{kCurrent});
  EXPECT_TRUE(from_env->file.empty());

  Result<auth::SecretSource> from_flag = auth::FindSecrets(file);
  ASSERT_TRUE(from_flag.ok()) << from_flag.error();
  EXPECT_EQ(from_flag->secrets.values, std::vector<std::string>{kNext});
  EXPECT_EQ(from_flag->file, file);

  {
    ScopedEnv file_var("LIMITER_SECRET_FILE", file.c_str());
    Result<auth::SecretSource> s = auth::FindSecrets("");
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->secrets.values, std::vector<std::string>{kNext});
  }
  {
    ScopedEnv with_next("LIMITER_SECRET_NEXT", kNext.c_str());
    Result<auth::SecretSource> s = auth::FindSecrets("");
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->secrets.values, (std::vector<std::string>{kCurrent, kNext}));
  }
  {
    ScopedEnv bad("LIMITER_SECRET", "short");
    EXPECT_FALSE(auth::FindSecrets("").ok());
  }
  ScopedEnv none("LIMITER_SECRET", nullptr);
  Result<auth::SecretSource> nothing = auth::FindSecrets("");
  ASSERT_TRUE(nothing.ok());
  EXPECT_TRUE(nothing->secrets.empty());
}

TEST(Proofs, OnlyTheSecretOverThisChallengeAndNonceMatches) {
  const auth::Nonce challenge = auth::RandomNonce();
  const auth::Nonce nonce = auth::RandomNonce();
  EXPECT_NE(challenge, nonce);
  const auth::Secrets node{{kCurrent, kNext}};
  EXPECT_EQ(
      auth::MatchClientProof(node, challenge, nonce, auth::ClientProof(kCurrent, challenge, nonce)),
      0);
  EXPECT_EQ(
      auth::MatchClientProof(node, challenge, nonce, auth::ClientProof(kNext, challenge, nonce)),
      1);
  EXPECT_EQ(
      auth::MatchClientProof(node, challenge, nonce, auth::ClientProof(kWrong, challenge, nonce)),
      -1);
  // Replayed on another challenge, or with the roles swapped: no match.
  const auth::Nonce other = auth::RandomNonce();
  EXPECT_EQ(
      auth::MatchClientProof(node, other, nonce, auth::ClientProof(kCurrent, challenge, nonce)),
      -1);
  EXPECT_EQ(
      auth::MatchClientProof(node, challenge, nonce, auth::NodeProof(kCurrent, challenge, nonce)),
      -1);
  const auth::Mac proof = auth::ClientProof(kCurrent, challenge, nonce);
  EXPECT_EQ(auth::MatchClientProof(node, challenge, nonce, auth::Bytes(proof.data(), 31)), -1);
  EXPECT_EQ(auth::MatchClientProof(node, challenge, nonce, {}), -1);
}

TEST(SplitTokens, BindTheSplitAndLapse) {
  const auth::Secrets secrets{{kCurrent}};
  const int64_t now = 1'700'000'000'000;
  const auth::SplitToken t = auth::MakeSplitToken(kCurrent, "api", "hot", 4, 77, now + 2000);
  EXPECT_TRUE(auth::CheckSplitToken(secrets, t, "api", "hot", 4, 77, now, 1000).ok());
  EXPECT_TRUE(auth::CheckSplitToken(secrets, t, "api", "hot", 4, 77, now + 2900, 1000).ok());
  EXPECT_FALSE(auth::CheckSplitToken(secrets, t, "api", "hot", 4, 77, now + 3100, 1000).ok());
  EXPECT_FALSE(auth::CheckSplitToken(secrets, t, "api", "cold", 4, 77, now, 1000).ok());
  EXPECT_FALSE(auth::CheckSplitToken(secrets, t, "other", "hot", 4, 77, now, 1000).ok());
  EXPECT_FALSE(auth::CheckSplitToken(secrets, t, "api", "hot", 8, 77, now, 1000).ok());
  EXPECT_FALSE(auth::CheckSplitToken(secrets, t, "api", "hot", 4, 78, now, 1000).ok());
  EXPECT_FALSE(
      auth::CheckSplitToken(auth::Secrets{{kWrong}}, t, "api", "hot", 4, 77, now, 1000).ok());
  EXPECT_TRUE(
      auth::CheckSplitToken(auth::Secrets{{kWrong, kCurrent}}, t, "api", "hot", 4, 77, now, 1000)
          .ok());
  EXPECT_FALSE(auth::CheckSplitToken(secrets, {}, "api", "hot", 4, 77, now, 1000).ok());
  EXPECT_FALSE(
      auth::CheckSplitToken(secrets, auth::Bytes(t.data(), 10), "api", "hot", 4, 77, now, 1000)
          .ok());
  // A later expiry written into the token breaks its MAC.
  auth::SplitToken extended = t;
  extended[3] ^= 1;
  EXPECT_FALSE(auth::CheckSplitToken(secrets, extended, "api", "hot", 4, 77, now, 1000).ok());
}

const char* kPolicies = R"(
policies:
  - {name: api, algorithm: token_bucket, limit: 100, window: 1s, class: contract}
)";

// A node that requires the secret, and one connection's session to it.
class AuthNodeTest : public ::testing::Test {
 protected:
  void Start(NodeOptions options) {
    harness_ = std::make_unique<testing::NodeHarness>(policies_, std::move(options));
    node_ = &harness_->node();
    session_ = node_->authenticator().NewSession();
  }
  void SetUp() override {
    NodeOptions o;
    o.secrets = auth::Secrets{{kCurrent, kNext}};
    Start(o);
  }

  // One frame on the session; the reply is kept until the next call.
  const wire::Reply& Send(RequestBuilder& b) {
    const wire::Reply& r = harness_->Send(session_, b);
    after_ = harness_->after();
    return r;
  }
  const wire::Reply& Send(std::span<const uint8_t> body) {
    const wire::Reply& r = harness_->Send(session_, body);
    after_ = harness_->after();
    return r;
  }
  static std::string ErrorOf(const wire::Reply& r) { return testing::ErrorOf(r); }
  int64_t Stat(const std::string& name) { return harness_->Stat(name); }

  // The whole handshake with `secret`; empty when the node accepted it and proved itself.
  std::string Handshake(const std::string& secret) {
    ClientHandshake h(secret, "node");
    RequestBuilder b;
    h.BuildNonceHello(b, "test");
    const wire::Reply& challenge = Send(b);
    if (after_ == Node::AfterFrame::kClose) return "closed: " + ErrorOf(challenge);
    if (Status s = h.BuildProofHello(challenge, b, "test"); !s.ok()) return s.error();
    b.Check(1, "api", "k");
    const wire::Reply& proved = Send(b);
    if (after_ == Node::AfterFrame::kClose) return "closed: " + ErrorOf(proved);
    if (Status s = h.CheckNode(proved); !s.ok()) return s.error();
    if (!proved.ops() || proved.ops()->size() != 1 || !proved.ops()->Get(0)->allowed()) {
      return "the CHECK beside the proof was not answered";
    }
    return "";
  }

  const PolicySet policies_ = testing::Policies(kPolicies, "auth.yaml");
  std::unique_ptr<testing::NodeHarness> harness_;
  Node* node_ = nullptr;
  Session session_;
  Node::AfterFrame after_ = Node::AfterFrame::kContinue;
};

TEST_F(AuthNodeTest, TheCurrentOrTheNextSecretOpensTheConnection) {
  EXPECT_FALSE(session_.authenticated);
  EXPECT_EQ(node_->authenticator().FrameLimit(session_), kMaxHelloFrameBytes);
  EXPECT_EQ(Handshake(kCurrent), "");
  EXPECT_TRUE(session_.authenticated);
  EXPECT_EQ(node_->authenticator().FrameLimit(session_), kDefaultMaxFrameBytes);
  RequestBuilder b;
  b.Check(2, "api", "k");
  EXPECT_TRUE(Send(b).ops()->Get(0)->allowed());  // later frames need no hello

  session_ = node_->authenticator().NewSession();
  EXPECT_EQ(Handshake(kNext), "");
}

TEST_F(AuthNodeTest, AWrongSecretIsRefusedWithOneErrorAndTheConnectionCloses) {
  const std::string why = Handshake(kWrong);
  EXPECT_NE(why.find("closed"), std::string::npos) << why;
  EXPECT_NE(why.find("does not match the cluster secret"), std::string::npos) << why;
  EXPECT_FALSE(session_.authenticated);
  EXPECT_EQ(Stat("auth_failures"), 1);
}

TEST_F(AuthNodeTest, OpsWithoutAHelloAreRefusedAndNothingIsCharged) {
  RequestBuilder b;
  b.Check(1, "api", "k", {}, 100);
  const wire::Reply& r = Send(b);
  EXPECT_EQ(after_, Node::AfterFrame::kClose);
  EXPECT_NE(ErrorOf(r).find("requires the cluster secret"), std::string::npos) << ErrorOf(r);
  EXPECT_EQ(r.ops(), nullptr);
  // The key is untouched: an authenticated peer still has all 100.
  session_ = node_->authenticator().NewSession();
  ASSERT_EQ(Handshake(kCurrent), "");
  b.Check(2, "api", "k", {}, 99);  // the handshake's CHECK took 1
  EXPECT_TRUE(Send(b).ops()->Get(0)->allowed());
}

TEST_F(AuthNodeTest, EveryMalformedHandshakeIsRefused) {
  const auth::Nonce nonce = auth::RandomNonce();
  struct Case {
    std::string name;
    std::function<void(RequestBuilder&)> build;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"a hello without a nonce", [](RequestBuilder& b) { b.Hello("x"); }, "hello.nonce"},
      {"a short nonce", [&](RequestBuilder& b) { b.Hello("x", auth::Bytes(nonce.data(), 8)); },
       "hello.nonce"},
      {"ops beside the nonce",
       [&](RequestBuilder& b) {
         b.Hello("x", nonce);
         b.Check(1, "api", "k");
       },
       "ops before authentication"},
      {"a proof without a challenge",
       [&](RequestBuilder& b) {
         const auth::Mac proof = auth::ClientProof(kCurrent, nonce, nonce);
         b.Hello("x", nonce, proof);
       },
       "without a challenge"},
  };
  for (const Case& c : cases) {
    session_ = node_->authenticator().NewSession();
    RequestBuilder b;
    c.build(b);
    const wire::Reply& r = Send(b);
    EXPECT_EQ(after_, Node::AfterFrame::kClose) << c.name;
    EXPECT_NE(ErrorOf(r).find(c.expected), std::string::npos) << c.name << ": " << ErrorOf(r);
    EXPECT_FALSE(session_.authenticated) << c.name;
  }
  // Not a Request at all, before authentication: closed too.
  session_ = node_->authenticator().NewSession();
  const std::vector<uint8_t> junk = {1, 2, 3, 4, 5, 6, 7, 8};
  Send(junk);
  EXPECT_EQ(after_, Node::AfterFrame::kClose);
}

TEST_F(AuthNodeTest, AProofForAnotherNonceOrASecondChallengeIsRefused) {
  RequestBuilder b;
  const auth::Nonce nonce = auth::RandomNonce();
  b.Hello("x", nonce);
  const wire::Reply& challenge = Send(b);
  ASSERT_EQ(after_, Node::AfterFrame::kContinue);
  ASSERT_NE(challenge.hello(), nullptr);
  ASSERT_NE(challenge.hello()->challenge(), nullptr);
  // No member list before authentication.
  EXPECT_EQ(challenge.hello()->members(), nullptr);
  auth::Nonce c{};
  ASSERT_EQ(challenge.hello()->challenge()->size(), c.size());
  std::copy(challenge.hello()->challenge()->begin(), challenge.hello()->challenge()->end(),
            c.begin());
  Session copy = session_;

  b.Hello("x", nonce);  // asks again
  EXPECT_NE(ErrorOf(Send(b)).find("one challenge only"), std::string::npos);
  EXPECT_EQ(after_, Node::AfterFrame::kClose);

  session_ = copy;
  const auth::Nonce other = auth::RandomNonce();
  b.Hello("x", other, auth::ClientProof(kCurrent, c, other));
  EXPECT_NE(ErrorOf(Send(b)).find("differs"), std::string::npos);
  EXPECT_EQ(after_, Node::AfterFrame::kClose);
}

TEST_F(AuthNodeTest, RotationDropsTheOldSecretOnlyWhenTheNodeIsToldTo) {
  ASSERT_TRUE(node_->authenticator().SetSecrets(auth::Secrets{{kNext}}).ok());
  EXPECT_NE(Handshake(kCurrent).find("does not match"), std::string::npos);
  session_ = node_->authenticator().NewSession();
  EXPECT_EQ(Handshake(kNext), "");
  ASSERT_TRUE(node_->authenticator()
                  .SetSecrets(auth::Secrets{})
                  .ok());  // ignored: a node never drops its secret
  session_ = node_->authenticator().NewSession();
  EXPECT_FALSE(session_.authenticated);
  EXPECT_EQ(Handshake(kNext), "");
}

TEST_F(AuthNodeTest, AClientRefusesANodeWithoutTheSecret) {
  Start(NodeOptions{});  // no secret: sessions start authenticated
  EXPECT_TRUE(session_.authenticated);
  const std::string why = Handshake(kCurrent);
  EXPECT_NE(why.find("does not ask for the cluster secret"), std::string::npos) << why;
}

// --- Bounds on one frame ---

class FrameBoundsTest : public AuthNodeTest {
 protected:
  void SetUp() override {
    NodeOptions o;
    o.max_ops_per_frame = 100;
    o.max_inspects_per_frame = 4;
    o.max_reply_bytes = 64 * 1024;
    Start(o);
  }
};

TEST_F(FrameBoundsTest, OverABoundTheFrameIsRefusedWholeAndTheConnectionCloses) {
  struct Case {
    std::string name;
    std::function<void(RequestBuilder&)> build;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"101 ops",
       [](RequestBuilder& b) {
         for (int i = 0; i < 101; ++i) b.Check(static_cast<uint64_t>(i), "api", "k");
       },
       "at most 100"},
      {"STATS twice",
       [](RequestBuilder& b) {
         b.Check(1, "api", "k");
         b.Stats(2);
         b.Stats(3);
       },
       "STATS 2 times"},
      {"HOTKEYS twice",
       [](RequestBuilder& b) {
         b.Check(1, "api", "k");
         b.HotKeys(2);
         b.HotKeys(3);
       },
       "HOTKEYS 2 times"},
      {"five INSPECTs",
       [](RequestBuilder& b) {
         b.Check(1, "api", "k");
         for (int i = 0; i < 5; ++i) b.Inspect(static_cast<uint64_t>(2 + i), "api", "k");
       },
       "5 INSPECT"},
  };
  for (const Case& c : cases) {
    session_ = node_->authenticator().NewSession();
    RequestBuilder b;
    c.build(b);
    const wire::Reply& r = Send(b);
    EXPECT_EQ(after_, Node::AfterFrame::kClose) << c.name;
    EXPECT_EQ(r.ops(), nullptr) << c.name;
    EXPECT_NE(ErrorOf(r).find(c.expected), std::string::npos) << c.name << ": " << ErrorOf(r);
  }
  EXPECT_EQ(Stat("frames_refused"), 4);
  // Nothing in them was done: the CHECKs never charged "k".
  RequestBuilder b;
  b.Check(1, "api", "k", {}, 100);
  EXPECT_TRUE(Send(b).ops()->Get(0)->allowed());
  // At the bounds, the frame is served.
  for (int i = 0; i < 96; ++i) b.Check(static_cast<uint64_t>(i), "api", "j");
  b.Stats(97);
  b.HotKeys(98);
  b.Inspect(99, "api", "j");
  b.Inspect(100, "api", "k");
  const wire::Reply& full = Send(b);
  EXPECT_EQ(after_, Node::AfterFrame::kContinue);
  ASSERT_NE(full.ops(), nullptr);
  EXPECT_EQ(full.ops()->size(), 100u);
}

TEST_F(FrameBoundsTest, AReplyThatGrowsPastItsBoundIsCutOffWithAnError) {
  RequestBuilder b;
  const std::string key(250, 'k');
  for (int i = 0; i < 100; ++i) {
    b.Inspect(static_cast<uint64_t>(i), "api", key + std::to_string(i));
  }
  const wire::Reply& inspects = Send(b);  // INSPECT is bounded before the reply is
  EXPECT_EQ(after_, Node::AfterFrame::kClose);
  EXPECT_NE(ErrorOf(inspects).find("INSPECT"), std::string::npos);

  NodeOptions small;
  small.max_reply_bytes = 8192;
  Start(small);
  const std::string policy(200, 'p');  // each error names it: over 100 bytes a reply
  // The same error for every op is written once in the reply: far under the bound.
  for (int i = 0; i < 100; ++i) b.Check(static_cast<uint64_t>(i), policy, key);
  const wire::Reply& same = Send(b);
  ASSERT_EQ(after_, Node::AfterFrame::kContinue) << ErrorOf(same);
  ASSERT_NE(same.ops(), nullptr);
  EXPECT_EQ(same.ops()->size(), 100u);
  // A hundred different errors are not.
  for (int i = 0; i < 100; ++i) {
    b.Check(static_cast<uint64_t>(i), std::to_string(i) + policy, key);
  }
  const wire::Reply& r = Send(b);
  ASSERT_EQ(after_, Node::AfterFrame::kClose);
  EXPECT_EQ(r.ops(), nullptr);
  EXPECT_NE(ErrorOf(r).find("would exceed 8192 bytes"), std::string::npos) << ErrorOf(r);
  EXPECT_LE(harness_->reply_bytes().size(), 1024u);
}

// --- Ops on sub-buckets ---

class SubBucketForgeryTest : public AuthNodeTest {
 protected:
  // `self` among two members, so that some keys' owners are the other one.
  void StartMember(bool with_secret) {
    NodeOptions o;
    o.members = {"10.0.0.1:7450", "10.0.0.2:7450"};
    o.self = "10.0.0.1:7450";
    o.generation = 1;
    if (with_secret) o.secrets = auth::Secrets{{kCurrent}};
    Start(o);
    session_.authenticated = true;  // the handshake is tested above
    const Ring ring(o.members);
    // A key owned by the other member whose sub-bucket 0 lives here.
    for (int i = 0; remote_key_.empty(); ++i) {
      const std::string key = "hot" + std::to_string(i);
      std::string sub;
      protocol::AppendSubBucketRoutingKey(sub, key, 0);
      if (ring.Owner(key) == o.members[1] && ring.Owner(sub) == o.self) remote_key_ = key;
    }
  }
  const wire::OpReply& OnSub(const std::string& key, uint16_t k, uint32_t epoch,
                             auth::Bytes token) {
    RequestBuilder b;
    b.OnSubBucket(k, 0, epoch, token);
    b.Check(1, "api", key);
    return *Send(b).ops()->Get(0);
  }
  std::string remote_key_;
};

TEST_F(SubBucketForgeryTest, WithTheSecretOnlyATokenFromTheKeysOwnerOpensASubBucket) {
  StartMember(true);
  const uint32_t epoch = 1234;
  const int64_t later = UnixMs() + 2000;
  const auth::SplitToken good = auth::MakeSplitToken(kCurrent, "api", remote_key_, 4, epoch, later);
  EXPECT_EQ(OnSub(remote_key_, 4, epoch, good).status(), wire::Status::Ok);

  const auth::SplitToken forged = auth::MakeSplitToken(kWrong, "api", remote_key_, 4, epoch, later);
  const auth::SplitToken other_key = auth::MakeSplitToken(kCurrent, "api", "x", 4, epoch, later);
  const auth::SplitToken lapsed =
      auth::MakeSplitToken(kCurrent, "api", remote_key_, 4, epoch, UnixMs() - 5000);
  struct Case {
    std::string name;
    uint32_t epoch;
    auth::Bytes token;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{
           {"no token", epoch, {}, "carries no split_token"},
           {"another secret", epoch, forged, "not made for this split"},
           {"another key's", epoch, other_key, "not made for this split"},
           {"another epoch", epoch + 1, good, "not made for this split"},
       }) {
    const wire::OpReply& r = OnSub(remote_key_, 4, c.epoch, c.token);
    EXPECT_EQ(r.status(), wire::Status::BadRequest) << c.name;
    EXPECT_NE(r.error()->str().find(c.expected), std::string::npos)
        << c.name << ": " << r.error()->str();
  }
  EXPECT_EQ(Stat("split_refusals"), 4);
  // A token the owner made that has lapsed is a view out of date, not a forgery: SplitChanged
  // (nothing charged), and the gateway asks the key's owner for its split now.
  const wire::OpReply& late = OnSub(remote_key_, 4, epoch, lapsed);
  EXPECT_EQ(late.status(), wire::Status::SplitChanged);
  EXPECT_FALSE(late.allowed());
  EXPECT_EQ(late.split_k(), 0);
  EXPECT_NE(late.error()->str().find("lapsed"), std::string::npos) << late.error()->str();
  EXPECT_NE(late.error()->str().find("ask the key's owner"), std::string::npos);
  EXPECT_EQ(Stat("split_refusals"), 4);
  EXPECT_EQ(Stat("split_changed"), 1);
}

TEST_F(SubBucketForgeryTest, TheKeysOwnerAcceptsOnlyASplitItHas) {
  Start(NodeOptions{});  // standalone: it owns the key and all its sub-buckets
  session_.authenticated = true;
  // Never split: any split_k, index or epoch is a view out of date (nothing charged), and
  // the answer says the key is not split now (split_k 0).
  for (uint32_t epoch : {0u, 1u, 99u}) {
    const wire::OpReply& r = OnSub("never", 4, epoch, {});
    EXPECT_EQ(r.status(), wire::Status::SplitChanged);
    EXPECT_FALSE(r.allowed());
    EXPECT_EQ(r.split_k(), 0);
    EXPECT_NE(r.error()->str().find("it is not split now"), std::string::npos) << r.error()->str();
  }
  // Bad shapes are refused before that.
  EXPECT_EQ(OnSub("never", 3, 1, {}).status(), wire::Status::BadRequest);
  EXPECT_EQ(OnSub("never", 0, 1, {}).status(), wire::Status::Ok);  // 0: the key itself
}

}  // namespace
}  // namespace limiter
