// Integration tests: a real limiterd process on loopback, real TCP connections.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <tuple>

#include "protocol/frame_codec.h"
#include "protocol/node_connection.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"
#include "test/integration/node_process.h"
#include "test/support/build_paths.h"
#include "test/support/wait.h"

namespace limiter {
namespace {

using testing::RunningNode;
using testing::StartNode;
using testing::WriteTempFile;

const char* kPolicies = R"(
policies:
  - {name: hourly, algorithm: token_bucket, limit: 1000, window: 1h, burst: 1000, class: contract}
  - {name: tenant, algorithm: gcra, limit: 300, window: 1h, class: contract}
  - {name: api_key, algorithm: gcra, limit: 100, window: 1h, class: contract, parent: tenant}
  - {name: ip, algorithm: fixed_window, limit: 5, window: 1h, class: security, max_keys: 1000}
)";

class NodeIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    node_ = StartNode({"--policies", WriteTempFile("integration_policies.yaml", kPolicies),
                       "--threads", "2", "--max-keys", "2000"});
    ASSERT_FALSE(node_.listen.empty());
  }

  std::unique_ptr<NodeConnection> Connect() {
    Result<std::unique_ptr<NodeConnection>> c = NodeConnection::Connect(node_.listen);
    EXPECT_TRUE(c.ok()) << c.error();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // One CHECK on a new connection: the node is still serving.
  bool StillServing() {
    auto c = Connect();
    if (!c) return false;
    RequestBuilder b;
    b.Check(1, "ip", "probe");
    if (!c->Send(b.Finish()).ok()) return false;
    Result<const wire::Reply*> r = c->Receive();
    return r.ok() && (*r)->ops()->size() == 1 && (*r)->ops()->Get(0)->status() == wire::Status::Ok;
  }

  int64_t Stat(const std::string& name) {
    auto c = Connect();
    RequestBuilder b;
    b.Stats(1);
    EXPECT_TRUE(c->Send(b.Finish()).ok());
    Result<const wire::Reply*> r = c->Receive();
    EXPECT_TRUE(r.ok()) << r.error();
    if (!r.ok()) return -1;
    for (const wire::Stat* s : *(*r)->ops()->Get(0)->stats()) {
      if (s->name()->str() == name) return s->value();
    }
    return -1;
  }

  RunningNode node_;
};

TEST_F(NodeIntegration, SixteenConnectionsRaceForOneKeyAndExactlyTheLimitIsAdmitted) {
  const auto started = std::chrono::steady_clock::now();
  std::atomic<int> allowed{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&] {
      auto c = Connect();
      if (!c) {
        errors += 500;
        return;
      }
      RequestBuilder b;
      for (int frame = 0; frame < 50; ++frame) {  // 50 frames of 10 checks, pipelined by 5
        b.Clear();
        for (int i = 0; i < 10; ++i)
          b.Check(static_cast<uint64_t>(frame * 10 + i), "hourly", "one-key");
        if (!c->Send(b.Finish()).ok()) ++errors;
        if (frame % 5 != 4) continue;
        for (int k = 0; k < 5; ++k) {
          Result<const wire::Reply*> r = c->Receive();
          if (!r.ok()) {
            errors += 10;
            continue;
          }
          for (const wire::OpReply* op : *(*r)->ops()) {
            if (op->status() != wire::Status::Ok) ++errors;
            if (op->allowed()) ++allowed;
          }
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  // 1000 per hour refills one unit per 3.6 s; a run that slow may see that many more.
  const int64_t elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::steady_clock::now() - started)
                                 .count();
  EXPECT_GE(allowed.load(), 1000);
  EXPECT_LE(allowed.load(), 1000 + elapsed_ms / 3600);
}

TEST_F(NodeIntegration, FiftyKeysShareTheirTenantsThreeHundred) {
  std::atomic<int> allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto c = Connect();
      ASSERT_TRUE(c);
      RequestBuilder b;
      for (int round = 0; round < 5; ++round) {
        b.Clear();
        for (int k = 0; k < 50; ++k) {
          b.Check(static_cast<uint64_t>(k), "api_key", std::to_string(k + 100 * t % 2), "acme");
        }
        ASSERT_TRUE(c->Send(b.Finish()).ok());
        Result<const wire::Reply*> r = c->Receive();
        ASSERT_TRUE(r.ok()) << r.error();
        for (const wire::OpReply* op : *(*r)->ops()) allowed += op->allowed();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(allowed.load(), 300);  // 1000 attempts, 50 keys of 100: the tenant's 300 bind
}

TEST_F(NodeIntegration, PipelinedFramesAreAnsweredInOrder) {
  auto c = Connect();
  RequestBuilder b;
  for (uint64_t frame = 0; frame < 20; ++frame) {
    b.Clear();
    b.Check(frame * 2, "ip", "pipe");
    b.Check(frame * 2 + 1, "ip", "pipe");
    ASSERT_TRUE(c->Send(b.Finish()).ok());
  }
  int allowed = 0;
  for (uint64_t frame = 0; frame < 20; ++frame) {
    Result<const wire::Reply*> r = c->Receive();
    ASSERT_TRUE(r.ok()) << r.error();
    ASSERT_EQ((*r)->ops()->size(), 2u);
    EXPECT_EQ((*r)->ops()->Get(0)->id(), frame * 2);
    EXPECT_EQ((*r)->ops()->Get(1)->id(), frame * 2 + 1);
    allowed += (*r)->ops()->Get(0)->allowed() + (*r)->ops()->Get(1)->allowed();
  }
  EXPECT_EQ(allowed, 5);
}

// Frames beyond one turn of the worker (256 ops) wait for a turn posted behind the other
// connections: sent in one write, four frames of 256 ops and then a malformed one are all
// answered, in order, then the error, then the close.
TEST_F(NodeIntegration, FramesBeyondATurnAreAnsweredInOrderThenAFramingErrorCloses) {
  auto c = Connect();
  auto other = Connect();
  std::vector<uint8_t> bytes;
  RequestBuilder b;
  uint64_t id = 0;
  for (int frame = 0; frame < 4; ++frame) {
    b.Clear();
    for (int i = 0; i < 256; ++i) b.Check(id++, "hourly", "turn" + std::to_string(frame));
    AppendFrame(bytes, b.Finish());
  }
  bytes.insert(bytes.end(), {0, 0, 0, 0});  // a frame of length 0
  ASSERT_TRUE(c->SendRaw(bytes).ok());
  uint64_t next = 0;
  for (int frame = 0; frame < 4; ++frame) {
    Result<const wire::Reply*> r = c->Receive();
    ASSERT_TRUE(r.ok()) << r.error();
    ASSERT_NE((*r)->ops(), nullptr);
    ASSERT_EQ((*r)->ops()->size(), 256u);
    for (const wire::OpReply* op : *(*r)->ops()) {
      EXPECT_EQ(op->id(), next++);
      EXPECT_TRUE(op->allowed());
    }
  }
  Result<const wire::Reply*> error = c->Receive();
  ASSERT_TRUE(error.ok()) << error.error();
  ASSERT_NE((*error)->error(), nullptr);
  EXPECT_EQ((*error)->error()->str(), "frame length 0");
  EXPECT_FALSE(c->Receive().ok());
  EXPECT_TRUE(c->closed());
  // The other connection on the node was not held up for good.
  b.Clear();
  b.Check(1, "hourly", "other");
  ASSERT_TRUE(other->Send(b.Finish()).ok());
  Result<const wire::Reply*> r = other->Receive();
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_TRUE((*r)->ops()->Get(0)->allowed());
}

TEST_F(NodeIntegration, FramingErrorsCloseThatConnectionOnly) {
  struct Case {
    std::vector<uint8_t> bytes;
    std::string error;  // the reply's error, or empty when no reply is expected
  };
  const std::vector<Case> cases = {
      {{0xff, 0xff, 0xff, 0xff}, "frame length 4294967295 above the maximum of 1048576"},
      {{0x01, 0x00, 0x10, 0x00}, "frame length 1048577 above the maximum of 1048576"},
      {{0, 0, 0, 0}, "frame length 0"},
      {{'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P'},
       "frame length 542393671 above the maximum of 1048576"},
  };
  auto other = Connect();  // open throughout: it must not notice anything
  for (const Case& c : cases) {
    auto conn = Connect();
    ASSERT_TRUE(conn->SendRaw(c.bytes).ok());
    Result<const wire::Reply*> r = conn->Receive();
    ASSERT_TRUE(r.ok()) << r.error();
    ASSERT_NE((*r)->error(), nullptr);
    EXPECT_EQ((*r)->error()->str(), c.error);
    Result<const wire::Reply*> after = conn->Receive();
    EXPECT_FALSE(after.ok());
    EXPECT_TRUE(conn->closed());
    EXPECT_TRUE(StillServing());
  }
  // A frame cut short by the peer leaving.
  {
    auto conn = Connect();
    const std::vector<uint8_t> partial = {100, 0, 0, 0, 1, 2, 3};
    ASSERT_TRUE(conn->SendRaw(partial).ok());
  }
  // The connection that stayed open still works.
  RequestBuilder b;
  b.Check(1, "ip", "other");
  ASSERT_TRUE(other->Send(b.Finish()).ok());
  Result<const wire::Reply*> r = other->Receive();
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_TRUE((*r)->ops()->Get(0)->allowed());
  EXPECT_EQ(Stat("bad_frames_too_large"), 3);
  EXPECT_EQ(Stat("bad_frames_empty"), 1);
  // The truncated frame is counted once the node has read the close.
  testing::WaitUntil([&] { return Stat("bad_frames_truncated") >= 1; });
  EXPECT_EQ(Stat("bad_frames_truncated"), 1);
}

TEST_F(NodeIntegration, GarbageAndBadOpsGetErrorRepliesOnALiveConnection) {
  auto c = Connect();
  std::mt19937 rng(7);
  std::vector<uint8_t> garbage(600);
  for (auto& byte : garbage) byte = static_cast<uint8_t>(rng());
  ASSERT_TRUE(c->Send(garbage).ok());
  Result<const wire::Reply*> r = c->Receive();
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_NE((*r)->error(), nullptr);
  EXPECT_EQ((*r)->error()->str(), "frame is not a valid Request (FlatBuffers verification failed)");

  RequestBuilder b;
  b.Check(1, "ip", "");
  b.Check(2, "ip", std::string(300, 'x'));
  b.Check(3, "ip", "k", "", 0);
  b.Check(4, "ip", "k", "", -1);
  b.Check(5, "ip", "k", "", int64_t{1} << 40);
  b.Check(6, "nope", "k");
  b.Check(7, "ip", "fine");
  ASSERT_TRUE(c->Send(b.Finish()).ok());
  r = c->Receive();
  ASSERT_TRUE(r.ok()) << r.error();
  const auto* ops = (*r)->ops();
  ASSERT_EQ(ops->size(), 7u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ops->Get(i)->status(), wire::Status::BadRequest) << i;
  EXPECT_EQ(ops->Get(5)->status(), wire::Status::UnknownPolicy);
  EXPECT_EQ(ops->Get(6)->status(), wire::Status::Ok);
  EXPECT_TRUE(ops->Get(6)->allowed());
  EXPECT_EQ(Stat("bad_frames_invalid"), 1);
  EXPECT_EQ(Stat("ops_check_error"), 6);
}

TEST_F(NodeIntegration, KeysBeyondTheBoundAreRefused) {
  auto c = Connect();
  RequestBuilder b;
  for (int k = 0; k < 1000; ++k) b.Check(static_cast<uint64_t>(k), "ip", std::to_string(k));
  ASSERT_TRUE(c->Send(b.Finish()).ok());
  Result<const wire::Reply*> r = c->Receive();
  ASSERT_TRUE(r.ok()) << r.error();
  for (const wire::OpReply* op : *(*r)->ops()) ASSERT_TRUE(op->allowed());
  b.Clear();
  b.Check(1, "ip", "one-too-many");
  b.Check(2, "ip", "7");  // a known key is still served
  ASSERT_TRUE(c->Send(b.Finish()).ok());
  r = c->Receive();
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ((*r)->ops()->Get(0)->status(), wire::Status::KeysExhausted);
  EXPECT_EQ((*r)->ops()->Get(0)->error()->str(),
            "policy 'ip' holds its maximum of 1000 keys on this node; new keys are refused");
  EXPECT_EQ((*r)->ops()->Get(1)->status(), wire::Status::Ok);
  EXPECT_EQ(Stat("keys"), 1000);
  EXPECT_EQ(Stat("refusals"), 1);
}

TEST_F(NodeIntegration, AClientThatNeverReadsStallsOnlyItself) {
  // Its replies pile up to the per-connection bound; then the node stops reading it, the
  // socket buffers fill, and its sends time out. Nobody else notices.
  Result<std::unique_ptr<NodeConnection>> flood = NodeConnection::Connect(node_.listen, 1000);
  ASSERT_TRUE(flood.ok()) << flood.error();
  RequestBuilder b;
  for (int i = 0; i < 200; ++i) b.Check(static_cast<uint64_t>(i), "ip", "flood");
  const auto body = b.Finish();
  bool stalled = false;
  for (int frames = 0; frames < 100'000 && !stalled; ++frames) {
    stalled = !(*flood)->Send(body).ok();
  }
  EXPECT_TRUE(stalled) << "the node kept reading a client that never reads";
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(StillServing());
  EXPECT_LT(Stat("resident_bytes"), int64_t{256} << 20);
}

TEST_F(NodeIntegration, AdminPortServesMetricsAndHealth) {
  EXPECT_TRUE(StillServing());
  const size_t colon = node_.admin.rfind(':');
  httplib::Client http(node_.admin.substr(0, colon), std::stoi(node_.admin.substr(colon + 1)));
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("limiter_ops_total{op=\"check\",outcome=\"allowed\"} 1\n"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("limiter_keys 1\n"), std::string::npos);
  EXPECT_NE(metrics->body.find("process_resident_memory_bytes"), std::string::npos);
}

TEST_F(NodeIntegration, SigtermStopsTheNodeCleanly) {
  auto c = Connect();
  node_.process->Signal(SIGTERM);
  const std::optional<int> status = node_.process->Wait(10'000);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 0);
  EXPECT_FALSE(c->Receive().ok());  // its connections were closed
}

TEST(NodeStartup, IdleConnectionsAreClosed) {
  const std::string policies = WriteTempFile("idle_policies.yaml", kPolicies);
  const std::string config = WriteTempFile(
      "idle_config.yaml", "policies: " + policies + "\nidle_timeout: 200ms\nthreads: 1\n");
  RunningNode node = StartNode({"--config", config});
  ASSERT_FALSE(node.listen.empty());
  Result<std::unique_ptr<NodeConnection>> c = NodeConnection::Connect(node.listen, 10'000);
  ASSERT_TRUE(c.ok());
  Result<const wire::Reply*> r = (*c)->Receive();  // blocks until the node closes it
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE((*c)->closed());
}

TEST(NodeStartup, BadConfigurationIsOneClearMessageAndExitOne) {
  const std::string bad = WriteTempFile(
      "bad_policies.yaml", "policies:\n  - {name: a, limit: 0, window: 1s, class: contract}\n");
  Result<std::unique_ptr<Subprocess>> p =
      Subprocess::Start({testing::LimiterdBin(), "--listen", "127.0.0.1:0", "--policies", bad});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->Wait(10'000), 1);
  const std::string config = WriteTempFile("bad_config.yaml", "listen: nowhere\n");
  p = Subprocess::Start({testing::LimiterdBin(), "--config", config});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)->Wait(10'000), 1);
}

TEST(NodeStartup, WithoutASecretOrClientCertificatesOnlyLoopbackIsServed) {
  const std::string policies = WriteTempFile("protected_policies.yaml", kPolicies);
  // Refused before anything is bound: no traffic leaves loopback.
  auto [status, out] =
      testing::RunToExit({"--listen", "0.0.0.0:0", "--admin", "", "--policies", policies});
  EXPECT_EQ(status, 1);
  EXPECT_EQ(out,
            "limiterd: listening on 0.0.0.0:0 without a cluster secret would trust every peer "
            "that reaches it; give --secret-file (or $LIMITER_SECRET_FILE / $LIMITER_SECRET), "
            "client certificates (--tls-client-ca), or --insecure");
  std::tie(status, out) =
      testing::RunToExit({"--listen", "[::]:0", "--admin", "", "--policies", policies, "--tls-cert",
                          "/nonexistent/node.pem", "--tls-key", "/nonexistent/node.key"});
  EXPECT_EQ(status, 1);  // TLS alone authenticates nobody
  EXPECT_NE(out.find("without a cluster secret"), std::string::npos) << out;
}

}  // namespace
}  // namespace limiter
