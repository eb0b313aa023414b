// A real limiterd that requires the cluster secret, against peers that do not have it, forge
// ops, or ask for more than a frame may hold. Each case asserts the outcome: refused, bounded,
// and the node still serving everyone else.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "protocol/auth.h"
#include "protocol/frame_codec.h"
#include "protocol/node_connection.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"
#include "test/integration/node_process.h"
#include "test/support/wait.h"

namespace limiter {
namespace {

using testing::RunningNode;
using testing::StartNode;
using testing::WriteTempFile;

const std::string kSecret = "integration-secret-0123456789abcdef";
const std::string kNextSecret = "integration-next-secret-0123456789";

const char* kPolicies = R"(
policies:
  - {name: api, algorithm: token_bucket, limit: 100, window: 1h, class: contract,
     lease: {size: 10, ttl: 1h}}
  - {name: login, algorithm: gcra, limit: 5, window: 1h, class: security, mode: strict}
  - {name: hot, algorithm: token_bucket, limit: 100000, window: 1s, class: contract}
)";

class HostilePeer : public ::testing::Test {
 protected:
  void SetUp() override {
    secret_file_ = WriteTempFile("hostile_secret", kSecret + "\n");
    log_ = WriteTempFile("hostile_peer_node.log", "");
    // `sh -c 'exec "$0" "$@" 2>>LOG' limiterd ARGS...`: the same pid, its stderr kept.
    node_ = testing::Launch({"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--policies",
                             WriteTempFile("hostile_policies.yaml", kPolicies), "--threads", "1",
                             "--secret-file", secret_file_, "--secret-reload-ms", "100",
                             "--hot-split-above", "2000", "--hot-split", "4"},
                            {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>>'" + log_ + "'"});
    ASSERT_FALSE(node_.listen.empty()) << NodeLog();
  }
  void TearDown() override {
    node_ = RunningNode{};
    if (HasFailure()) std::cerr << "----- the node's stderr -----\n" << NodeLog();
    std::remove(log_.c_str());
  }

  std::string NodeLog() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  NodeAccess With(const std::string& secret) {
    NodeAccess a;
    a.secret = secret;
    return a;
  }
  std::unique_ptr<NodeConnection> Connect(const std::string& secret = kSecret) {
    Result<std::unique_ptr<NodeConnection>> c =
        NodeConnection::Connect(node_.listen, 10'000, With(secret));
    EXPECT_TRUE(c.ok()) << c.error();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  // A plain TCP connection that skips the handshake.
  std::unique_ptr<NodeConnection> ConnectRaw() {
    Result<std::unique_ptr<NodeConnection>> c = NodeConnection::Connect(node_.listen, 10'000);
    EXPECT_TRUE(c.ok()) << c.error();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  const wire::OpReply* One(NodeConnection& c, RequestBuilder& b) {
    EXPECT_TRUE(c.Send(b.Finish()).ok());
    b.Clear();
    reply_ = c.Receive();
    if (!reply_.ok() || !(*reply_)->ops() || (*reply_)->ops()->size() != 1) return nullptr;
    return (*reply_)->ops()->Get(0);
  }

  bool StillServing() {
    auto c = Connect();
    if (!c) return false;
    RequestBuilder b;
    b.Check(1, "api", "probe");
    const wire::OpReply* r = One(*c, b);
    return r != nullptr && r->status() == wire::Status::Ok;
  }

  int64_t Stat(const std::string& name) {
    auto c = Connect();
    if (!c) return -1;
    RequestBuilder b;
    b.Stats(1);
    const wire::OpReply* r = One(*c, b);
    if (r == nullptr || r->stats() == nullptr) return -1;
    for (const wire::Stat* s : *r->stats()) {
      if (s->name()->str() == name) return s->value();
    }
    return -1;
  }

  // The node's error reply on `c`, then its end of the connection.
  std::string RefusedAndClosed(NodeConnection& c) {
    Result<const wire::Reply*> r = c.Receive();
    if (!r.ok()) return "no reply: " + r.error();
    const std::string error = (*r)->error() ? (*r)->error()->str() : "";
    if ((*r)->ops() != nullptr) return "ops were answered";
    Result<const wire::Reply*> after = c.Receive();
    if (after.ok() || !c.closed()) return "the connection stayed open";
    return error;
  }

  std::string secret_file_;
  std::string log_;  // the node's stderr
  RunningNode node_;
  Result<const wire::Reply*> reply_ = Error{"none"};
};

TEST_F(HostilePeer, AClientWithoutTheSecretGetsOneErrorAndIsClosed) {
  auto raw = ConnectRaw();
  RequestBuilder b;
  b.Check(1, "api", "k", {}, 100);
  ASSERT_TRUE(raw->Send(b.Finish()).ok());
  const std::string why = RefusedAndClosed(*raw);
  EXPECT_NE(why.find("requires the cluster secret"), std::string::npos) << why;

  // Nothing was charged: the key still holds its 100.
  auto c = Connect();
  b.Clear();
  b.Check(2, "api", "k", {}, 100);
  const wire::OpReply* r = One(*c, b);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->allowed());
  EXPECT_GE(Stat("auth_failures"), 1);
}

TEST_F(HostilePeer, AWrongSecretIsRefused) {
  Result<std::unique_ptr<NodeConnection>> c =
      NodeConnection::Connect(node_.listen, 10'000, With("not-the-secret-0123456789abcdef"));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("does not match the cluster secret"), std::string::npos) << c.error();
  EXPECT_TRUE(StillServing());
}

TEST_F(HostilePeer, BeforeTheSecretOnlyAHelloSizedFrameIsRead) {
  auto raw = ConnectRaw();
  const std::array<uint8_t, 4> header = EncodeFrameHeader(512 * 1024);
  ASSERT_TRUE(raw->SendRaw(header).ok());
  const std::string why = RefusedAndClosed(*raw);
  EXPECT_NE(why.find("above the maximum of 4096"), std::string::npos) << why;
  EXPECT_TRUE(StillServing());
}

TEST_F(HostilePeer, TheSecretRotatesWithoutARestart) {
  const auto eventually = [&](const std::string& secret, bool accepted) {
    return testing::WaitUntil(
        [&] {
          return NodeConnection::Connect(node_.listen, 10'000, With(secret)).ok() == accepted;
        },
        std::chrono::seconds(20), std::chrono::milliseconds(50));
  };
  EXPECT_FALSE(NodeConnection::Connect(node_.listen, 10'000, With(kNextSecret)).ok());
  // 1. The nodes accept both; 2. clients move to the next; 3. the nodes drop the old one.
  WriteTempFile("hostile_secret", kSecret + "\n" + kNextSecret + "\n");
  EXPECT_TRUE(eventually(kNextSecret, true));
  EXPECT_TRUE(NodeConnection::Connect(node_.listen, 10'000, With(kSecret)).ok());
  WriteTempFile("hostile_secret", kNextSecret + "\n");
  EXPECT_TRUE(eventually(kSecret, false));
  EXPECT_TRUE(NodeConnection::Connect(node_.listen, 10'000, With(kNextSecret)).ok());
  // A file that turns bad keeps the last good secret, once the node has read it.
  WriteTempFile("hostile_secret", "short\n");
  EXPECT_TRUE(testing::WaitUntil([&] {
    return NodeLog().find("the secret is 5 bytes") != std::string::npos;
  })) << "the node never read the bad file";
  EXPECT_TRUE(NodeConnection::Connect(node_.listen, 10'000, With(kNextSecret)).ok());
}

// One frame whose ops vector names the same STATS op `copies` times: 4 bytes an op.
std::vector<uint8_t> Amplifying(wire::OpType type, size_t copies) {
  flatbuffers::FlatBufferBuilder fbb;
  const auto op = wire::CreateOp(fbb, 1, type);
  std::vector<flatbuffers::Offset<wire::Op>> ops(copies, op);
  const auto vec = fbb.CreateVector(ops);
  fbb.Finish(wire::CreateRequest(fbb, 0, vec));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

TEST_F(HostilePeer, StatsAndHotKeysCannotAmplifyAFrame) {
  struct Case {
    wire::OpType type;
    size_t copies;
    std::string expected;
  };
  for (const Case& c : std::vector<Case>{{wire::OpType::Stats, 200'000, "at most 8192"},
                                         {wire::OpType::Stats, 2, "STATS 2 times"},
                                         {wire::OpType::HotKeys, 2, "HOTKEYS 2 times"},
                                         {wire::OpType::HotKeys, 100'000, "at most 8192"},
                                         {wire::OpType::Inspect, 65, "65 INSPECT"}}) {
    auto conn = Connect();
    ASSERT_TRUE(conn);
    ASSERT_TRUE(conn->Send(Amplifying(c.type, c.copies)).ok());
    const std::string why = RefusedAndClosed(*conn);
    EXPECT_NE(why.find(c.expected), std::string::npos) << c.copies << ": " << why;
  }
  EXPECT_GE(Stat("frames_refused"), 5);
  EXPECT_TRUE(StillServing());
}

TEST_F(HostilePeer, AnOverBoundFrameClosesOnlyItsOwnConnection) {
  auto bystander = Connect();  // the same worker: the node runs one thread
  auto attacker = Connect();
  ASSERT_TRUE(attacker->Send(Amplifying(wire::OpType::Stats, 10'000)).ok());
  EXPECT_NE(RefusedAndClosed(*attacker).find("at most 8192"), std::string::npos);
  RequestBuilder b;
  b.Check(1, "api", "bystander");
  const wire::OpReply* r = One(*bystander, b);
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->allowed());
}

TEST_F(HostilePeer, ForgedLeasesAndReturnsGiveNothing) {
  auto c = Connect();
  RequestBuilder b;
  b.Lease(1, "api", "leased", {}, 10);
  const wire::OpReply* lease = One(*c, b);
  ASSERT_NE(lease, nullptr);
  ASSERT_EQ(lease->granted(), 10);
  const uint64_t id = lease->lease_id();
  const int64_t at = lease->granted_at_ms();

  // Forged ids, times and amounts: nothing comes back.
  b.Return(2, "api", "leased", {}, 10, at, id + 1);
  const wire::OpReply* forged_id = One(*c, b);
  ASSERT_NE(forged_id, nullptr);
  EXPECT_EQ(forged_id->granted(), 0);
  b.Return(3, "api", "leased", {}, 1000, at, id);
  const wire::OpReply* too_many = One(*c, b);
  ASSERT_NE(too_many, nullptr);
  EXPECT_EQ(too_many->granted(), 0);
  b.Return(4, "api", "leased", {}, 5, at + 1'000'000'000, id);
  const wire::OpReply* future = One(*c, b);
  ASSERT_NE(future, nullptr);
  EXPECT_EQ(future->status(), wire::Status::BadRequest);
  // A LEASE or RETURN on a strict security policy: refused.
  b.Lease(5, "login", "alice", {}, 5);
  const wire::OpReply* strict = One(*c, b);
  ASSERT_NE(strict, nullptr);
  EXPECT_EQ(strict->status(), wire::Status::BadRequest);
  b.Return(6, "login", "alice", {}, 5, at, id);
  const wire::OpReply* strict_return = One(*c, b);
  ASSERT_NE(strict_return, nullptr);
  EXPECT_EQ(strict_return->status(), wire::Status::BadRequest);

  // The key holds exactly what the lease left: 90 of 100.
  b.Check(7, "api", "leased", {}, 91);
  const wire::OpReply* over = One(*c, b);
  ASSERT_NE(over, nullptr);
  EXPECT_FALSE(over->allowed());
  b.Check(8, "api", "leased", {}, 90);
  const wire::OpReply* rest = One(*c, b);
  ASSERT_NE(rest, nullptr);
  EXPECT_TRUE(rest->allowed());
}

TEST_F(HostilePeer, ForgedSubBucketOpsAreRefusedOnSplitAndNeverSplitKeys) {
  auto c = Connect();
  RequestBuilder b;
  // Never split: nothing charged, whatever the epoch; the answer says it is not split.
  for (uint32_t epoch : {0u, 1u, 123456u}) {
    b.OnSubBucket(4, 1, epoch);
    b.Check(1, "hot", "never-split");
    const wire::OpReply* r = One(*c, b);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->status(), wire::Status::SplitChanged);
    EXPECT_FALSE(r->allowed());
    EXPECT_EQ(r->split_k(), 0);
  }
  // Make "blazing" hot until its owner splits it (the node ticks once a second).
  uint32_t epoch = 0;
  std::string failed;  // why a frame of the load did not go or come back
  testing::WaitUntil([&] {
    for (int i = 0; i < 500; ++i) b.Check(static_cast<uint64_t>(i), "hot", "blazing");
    const Status sent = c->Send(b.Finish());
    b.Clear();
    Result<const wire::Reply*> r = sent.ok() ? c->Receive() : Result<const wire::Reply*>(sent);
    if (!r.ok()) {
      failed = r.error();
      return true;
    }
    for (const wire::OpReply* op : *(*r)->ops()) {
      if (op->status() == wire::Status::Split) epoch = op->split_epoch();
    }
    return epoch != 0;
  });
  ASSERT_EQ(failed, "");
  ASSERT_NE(epoch, 0u) << "the key was never split";
  // Its real split opens its sub-buckets; any other epoch or k does not: it gets the real
  // split instead (as any op on the key would), nothing charged.
  b.OnSubBucket(4, 1, epoch);
  b.Check(1, "hot", "blazing");
  const wire::OpReply* real = One(*c, b);
  ASSERT_NE(real, nullptr);
  EXPECT_EQ(real->status(), wire::Status::Ok) << (real->error() ? real->error()->str() : "");
  for (auto [k, e] : std::vector<std::pair<uint16_t, uint32_t>>{{4, epoch + 1}, {8, epoch}}) {
    b.OnSubBucket(k, 1, e);
    b.Check(1, "hot", "blazing");
    const wire::OpReply* forged = One(*c, b);
    ASSERT_NE(forged, nullptr);
    EXPECT_EQ(forged->status(), wire::Status::SplitChanged) << k << " " << e;
    EXPECT_FALSE(forged->allowed());
    EXPECT_EQ(forged->split_k(), 4);
    EXPECT_EQ(forged->split_epoch(), epoch);
  }
  EXPECT_GE(Stat("split_changed"), 5);
}

}  // namespace
}  // namespace limiter
