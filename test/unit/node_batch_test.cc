// A frame of many ops is answered op for op as frames of one op each would be. The node works
// out each op's key while the op before it runs (Node::Lookahead) and prefetches its slot; it
// must never apply one op's key to another, whatever the frame mixes: policies, nesting,
// several limits, refused ops, sub-bucket ops, the same op again.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "protocol/request_builder.h"
#include "protocol/rules.h"
#include "protocol/wire.h"
#include "server/node.h"
#include "server/store.h"
#include "test/support/node_harness.h"
#include "test/support/policies.h"
#include "test/unit/test_seed.h"

namespace limiter {
namespace {

const char* kPolicies = R"(
policies:
  - {name: tenant, algorithm: gcra, limit: 30, window: 1s, class: contract}
  - {name: api_key, algorithm: token_bucket, limit: 10, window: 1s, class: contract,
     parent: tenant}
  - {name: ip, algorithm: fixed_window, limit: 5, window: 1s, class: security}
  - {name: user, algorithm: sliding_log, limit: 3, window: 1s, class: contract}
)";

// One node on the caller's clock; Send answers a frame with one line per op.
class Side {
 public:
  Side(const PolicySet& policies, const Clock& clock, int64_t max_keys = 1000)
      : node_(policies, clock, Options(max_keys)) {}

  std::vector<std::string> Send(std::span<const uint8_t> body) {
    const wire::Reply& reply = node_.Send(body);
    std::vector<std::string> lines;
    if (reply.ops() == nullptr) return lines;
    for (const wire::OpReply* op : *reply.ops()) lines.push_back(Describe(*op));
    return lines;
  }

  Node& node() { return node_.node(); }
  testing::NodeHarness::Caller NewCaller() { return node_.NewCaller(); }

 private:
  static NodeOptions Options(int64_t max_keys) {
    NodeOptions options;
    options.store.max_keys = max_keys;
    options.store.stripes = 8;
    return options;
  }

  static std::string Describe(const wire::OpReply& r) {
    std::string s = "op " + std::to_string(r.id()) + " status " +
                    std::to_string(static_cast<int>(r.status())) +
                    (r.allowed() ? " allowed" : " denied") + " by " +
                    std::to_string(r.denied_by()) + " retry " + std::to_string(r.retry_after_ms());
    if (r.error()) s += " error '" + r.error()->str() + "'";
    if (r.results()) {
      for (const wire::LimitResult* l : *r.results()) {
        s += " left " + std::to_string(l->remaining());
      }
    }
    if (r.state()) s += " inspected";
    return s;
  }

  testing::NodeHarness node_;
};

// A key a plain check named: policy, key, tenant.
struct Named {
  std::string policy, key, tenant;
  auto operator<=>(const Named&) const = default;
};

// Appends one random op to both builders: `batch` (the many-op frame) and `single` (its own).
// The key it names when it is a plain check.
std::optional<Named> AddRandomOp(std::mt19937_64& rng, uint64_t id, RequestBuilder& batch,
                                 RequestBuilder& single) {
  const std::string key = "k" + std::to_string(rng() % 6);
  const std::string tenant = "t" + std::to_string(rng() % 3);
  static const char* kNamed[] = {"tenant", "api_key", "ip", "user"};
  const std::string policy = kNamed[rng() % 4];
  const uint64_t kind = id % 11 == 0 ? rng() % 6 : 6;  // mostly plain checks
  for (RequestBuilder* b : {&batch, &single}) {
    switch (kind) {
      case 0:
        b->Check(id, "no_such_policy", key);
        break;
      case 1:
        b->Check(id, policy, "", tenant);  // an empty key: refused
        break;
      case 2:
        b->Inspect(id, policy, key, tenant);
        break;
      case 3: {
        const std::pair<std::string_view, std::string_view> limits[] = {{"ip", key}, {"user", key}};
        b->CheckMany(id, limits, {}, 1);
        break;
      }
      case 4:
        b->OnSubBucket(4, 1, 1);  // no split was made: refused
        b->Check(id, policy, key, tenant);
        break;
      case 5:
        b->Check(id, "api_key", key);  // api_key nests under a tenant: refused without one
        break;
      default:
        b->Check(id, policy, key, policy == "api_key" ? tenant : "");
    }
  }
  if (kind != 6) return std::nullopt;
  return Named{policy, key, policy == "api_key" ? tenant : ""};
}

// Whether the node holds the key under the id a gateway works out for it (protocol::LimitId,
// not the node's own path).
bool Holds(Node& node, const PolicySet& policies, const Named& n) {
  const auto& all = policies.policies();
  for (size_t p = 0; p < all.size(); ++p) {
    if (all[p].name != n.policy) continue;
    const KeyId id = protocol::LimitId(all[p], n.key, n.tenant);
    Store& store = node.store();
    const size_t stripe = store.StripeOf(id);
    Store::StripeLock lock(store, std::span<const size_t>(&stripe, 1));
    return store.Find(static_cast<int>(p), id) != nullptr;
  }
  return false;
}

TEST(NodeBatchTest, AFrameOfManyOpsAnswersEachAsAFrameOfOneWould) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const PolicySet policies = testing::Policies(kPolicies);
  ManualClock clock(1'000'000);
  Side batched(policies, clock);
  Side single(policies, clock);
  uint64_t id = 0;
  int ops = 0;
  std::set<Named> named;
  for (int frame = 0; frame < 300; ++frame) {
    RequestBuilder batch;
    std::vector<std::vector<std::string>> expected;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      RequestBuilder one;
      if (std::optional<Named> n = AddRandomOp(rng, ++id, batch, one)) named.insert(*n);
      expected.push_back(single.Send(one.Finish()));
    }
    const std::vector<std::string> got = batched.Send(batch.Finish());
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(expected[i].size(), 1u);
      ASSERT_EQ(got[i], expected[i][0]) << "frame " << frame << ", op " << i << " of " << n;
    }
    ops += n;
    clock.Advance(static_cast<int64_t>(rng() % 300));
  }
  EXPECT_GT(ops, 3000);
  // Both nodes keep each key where anyone would look for it: the ids were not only the same
  // on both sides but the right ones.
  EXPECT_GT(named.size(), 20u);
  for (const Named& n : named) {
    EXPECT_TRUE(Holds(batched.node(), policies, n)) << n.policy << " " << n.key << " " << n.tenant;
    EXPECT_TRUE(Holds(single.node(), policies, n)) << n.policy << " " << n.key << " " << n.tenant;
  }
  for (int p = 0; p < 4; ++p) {
    EXPECT_EQ(batched.node().store().Recount(p).keys, single.node().store().Recount(p).keys);
  }
}

// Workers that add keys grow the tables while other workers prefetch into them.
TEST(NodeBatchTest, WorkersAddingKeysTogetherEachGetTheirOwn) {
  const PolicySet policies = testing::Policies(kPolicies);
  ManualClock clock(1'000'000);
  Side side(policies, clock, /*max_keys=*/100'000);
  constexpr int kThreads = 4;
  constexpr int kFrames = 100;
  constexpr int kKeysPerFrame = 50;
  std::vector<testing::NodeHarness::Caller> callers;
  for (int t = 0; t < kThreads; ++t) callers.push_back(side.NewCaller());
  std::vector<int> allowed(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int f = 0; f < kFrames; ++f) {
        RequestBuilder b;
        for (int k = 0; k < kKeysPerFrame; ++k) {
          // Each key twice in a row: the second check finds the slot the first made.
          const std::string key = std::to_string(t) + "-" + std::to_string(f * kKeysPerFrame + k);
          b.Check(1, "ip", key);
          b.Check(2, "ip", key);
        }
        const wire::Reply& reply = callers[static_cast<size_t>(t)].Send(b);
        if (reply.ops() == nullptr) return;
        for (const wire::OpReply* op : *reply.ops()) {
          if (op->status() == wire::Status::Ok && op->allowed() &&
              op->results()->Get(0)->remaining() == (op->id() == 1 ? 4 : 3)) {
            ++allowed[static_cast<size_t>(t)];
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(allowed[static_cast<size_t>(t)], kFrames * kKeysPerFrame * 2) << "worker " << t;
  }
  EXPECT_EQ(side.node().store().Recount(2).keys, kThreads * kFrames * kKeysPerFrame);
}

}  // namespace
}  // namespace limiter

namespace limiter {
namespace {

// The node remembers the last policy a frame named (one compare instead of a lookup per op):
// names of one length that differ in one byte, an unknown name between known ones, and a
// frame after it, each get their own policy.
TEST(NodeBatchTest, EachOpGetsThePolicyItNamesWhateverTheOpBeforeIt) {
  const PolicySet policies = testing::Policies(R"(
policies:
  - {name: aaaa, algorithm: fixed_window, limit: 1, window: 1h, class: contract}
  - {name: aaab, algorithm: fixed_window, limit: 100, window: 1h, class: contract}
)",
                                               "names.yaml");
  ManualClock clock(1'000'000);
  Side side(policies, clock);
  RequestBuilder b;
  b.Check(1, "aaaa", "k");
  b.Check(2, "aaab", "k");
  b.Check(3, "aaaa", "k");
  b.Check(4, "aaac", "k");
  b.Check(5, "aaab", "k");
  const std::vector<std::string> got = side.Send(b.Finish());
  ASSERT_EQ(got.size(), 5u);
  EXPECT_NE(got[0].find(" allowed"), std::string::npos) << got[0];
  EXPECT_NE(got[1].find(" allowed"), std::string::npos) << got[1];
  EXPECT_NE(got[2].find(" denied"), std::string::npos) << got[2];  // aaaa's one unit is spent
  EXPECT_NE(got[3].find("no policy named 'aaac'"), std::string::npos) << got[3];
  EXPECT_NE(got[4].find(" allowed"), std::string::npos) << got[4];
  EXPECT_NE(got[4].find(" left 98"), std::string::npos) << got[4];  // aaab's second unit
  b.Clear();
  b.Check(6, "aaab", "k");  // a new frame: the name is looked up again
  const std::vector<std::string> next = side.Send(b.Finish());
  ASSERT_EQ(next.size(), 1u);
  EXPECT_NE(next[0].find(" left 97"), std::string::npos) << next[0];
}

}  // namespace
}  // namespace limiter
