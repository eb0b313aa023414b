// The node's promises under hostile and unlucky timing: RETURN cannot mint units, a key's
// time never runs backwards, and a nested limit has one identity.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "protocol/request_builder.h"
#include "protocol/wire.h"
#include "server/node.h"
#include "test/support/node_harness.h"
#include "test/support/policies.h"

namespace limiter {
namespace {

const char* kPolicies = R"(
policies:
  - {name: login, algorithm: gcra, limit: 5, window: 1m, class: security}
  - {name: hour, algorithm: token_bucket, limit: 1000, window: 1h, class: contract}
  - {name: second, algorithm: token_bucket, limit: 10, window: 1s, class: contract}
  - {name: fixed, algorithm: fixed_window, limit: 10, window: 1s, class: contract}
  - {name: sliding, algorithm: sliding_window, limit: 10, window: 1s, class: contract}
  - {name: tenant, algorithm: gcra, limit: 1000, window: 1h, class: contract}
  - {name: api_key, algorithm: token_bucket, limit: 3, window: 1h, class: contract,
     parent: tenant}
)";

class PromisesTest : public ::testing::Test {
 protected:
  using Caller = testing::NodeHarness::Caller;

  const wire::OpReply& One(RequestBuilder& b, Caller* w = nullptr) {
    return (w ? *w : node_->caller()).One(b);
  }
  int Checks(const std::string& policy, const std::string& key, int n, Caller* w = nullptr,
             const std::string& tenant = "") {
    int allowed = 0;
    for (int i = 0; i < n; ++i) allowed += (w ? *w : node_->caller()).Check(policy, key, tenant);
    return allowed;
  }

  // A LEASE's grant, and what a RETURN of it must name.
  struct Granted {
    int64_t units = 0;
    int64_t at_ms = 0;
    uint64_t id = 0;
  };
  Granted Lease(const std::string& policy, const std::string& key, int64_t units) {
    RequestBuilder b;
    b.Lease(1, policy, key, "", units);
    const wire::OpReply& r = One(b);
    return {r.granted(), r.granted_at_ms(), r.lease_id()};
  }
  // Returns `units` of the lease: the reply's status, and the units given back.
  std::pair<wire::Status, int64_t> Return(const std::string& policy, const std::string& key,
                                          int64_t units, const Granted& lease) {
    RequestBuilder b;
    b.Return(2, policy, key, "", units, lease.at_ms, lease.id);
    const wire::OpReply& r = One(b);
    last_error_ = r.error() ? r.error()->str() : "";
    return {r.status(), r.granted()};
  }

  ManualClock clock_{10'000'000};  // a whole number of seconds and minutes
  std::string last_error_;
  const PolicySet policies_ = testing::Policies(kPolicies, "promises.yaml");
  std::unique_ptr<testing::NodeHarness> node_ =
      std::make_unique<testing::NodeHarness>(policies_, clock_);
  Caller b_caller_ = node_->NewCaller();
  Caller* a_ = &node_->caller();
  Caller* b_ = &b_caller_;
};

TEST_F(PromisesTest, AReturnCannotRefillAStrictSecurityKey) {
  EXPECT_EQ(Checks("login", "alice", 8), 5);
  RequestBuilder b;
  b.Return(1, "login", "alice", "", 1'000'000, 0, /*lease_id=*/1);
  const wire::OpReply& r = One(b);
  EXPECT_EQ(r.status(), wire::Status::BadRequest);
  ASSERT_NE(r.error(), nullptr);
  EXPECT_NE(r.error()->str().find("strict"), std::string::npos) << r.error()->str();
  EXPECT_EQ(Checks("login", "alice", 5), 0);
}

TEST_F(PromisesTest, AReturnBeyondTheLeaseIsRefused) {
  using wire::Status;
  const Granted lease = Lease("hour", "x", 10);
  ASSERT_EQ(lease.units, 10);
  EXPECT_EQ(Checks("hour", "x", 1000), 990);
  EXPECT_EQ(Return("hour", "x", 500, lease).first, Status::BadRequest);
  EXPECT_EQ(last_error_,
            "returns 500 units of lease " + std::to_string(lease.id) + ", which granted 10");
  EXPECT_EQ(Checks("hour", "x", 500), 0);
  // The lease's own ten come back, once.
  EXPECT_EQ(Return("hour", "x", 10, lease), std::make_pair(Status::Ok, int64_t{10}));
  EXPECT_EQ(Return("hour", "x", 10, lease).first, Status::BadRequest);  // a replay
  EXPECT_EQ(Checks("hour", "x", 500), 10);
  // A huge claim on a real lease is refused (never multiplied up).
  const Granted small = Lease("hour", "x2", 3);
  EXPECT_EQ(Return("hour", "x2", kMaxCost, small).first, Status::BadRequest);
  // A forged lease id, or a lease of another key, gives back nothing.
  EXPECT_EQ(Return("hour", "x", 10, {10, lease.at_ms, lease.id + 1}).first, Status::BadRequest);
  EXPECT_EQ(Return("hour", "y", 10, lease).first, Status::BadRequest);
  EXPECT_EQ(Checks("hour", "x", 500), 0);
}

TEST_F(PromisesTest, AReturnAfterTheBucketWasFullAgainGivesNothingBack) {
  // Lease 5 of 10/s; the bucket refills to full; others drain it; a return of the 5 must
  // not put 5 on top: that would admit 15 in well under a second.
  const Granted lease = Lease("second", "k", 5);
  ASSERT_EQ(lease.units, 5);
  clock_.Advance(600);  // full again
  EXPECT_EQ(Checks("second", "k", 10), 10);
  EXPECT_EQ(Return("second", "k", 5, lease), std::make_pair(wire::Status::Ok, int64_t{0}));
  EXPECT_EQ(Checks("second", "k", 5), 0);
}

TEST_F(PromisesTest, NothingLeasedBeforeARestartCanBeReturnedAfterIt) {
  const Granted lease = Lease("hour", "r", 10);
  ASSERT_EQ(lease.units, 10);
  // The node restarts (same clock, fresh memory): its key starts full, and it knows no lease.
  node_ = std::make_unique<testing::NodeHarness>(policies_, clock_);
  a_ = &node_->caller();
  EXPECT_EQ(Checks("hour", "r", 990), 990);
  EXPECT_EQ(Return("hour", "r", 10, lease).first, wire::Status::BadRequest);
  EXPECT_EQ(Checks("hour", "r", 20), 10);  // the 10 the new life still had, no more
  // A lease of this life has another id, whatever the old one was.
  EXPECT_NE(Lease("hour", "r2", 5).id, lease.id + 1);
}

TEST_F(PromisesTest, AFixedWindowKeyNeverGoesBackToAnEarlierWindow) {
  // Worker a reads the clock in the next window and admits the limit; worker b's frame was
  // read a moment before the boundary and is handled after: it must not reset the count.
  clock_.Set(10'000'999);
  EXPECT_EQ(Checks("fixed", "k", 3, a_), 3);
  clock_.Set(10'001'000);
  EXPECT_EQ(Checks("fixed", "k", 10, a_), 10);
  clock_.Set(10'000'999);  // b's stale frame time
  EXPECT_EQ(Checks("fixed", "k", 10, b_), 0);
}

TEST_F(PromisesTest, ASlidingWindowKeyNeverGoesBackToAnEarlierWindow) {
  clock_.Set(10'001'000);
  EXPECT_EQ(Checks("sliding", "k", 10, a_), 10);
  clock_.Set(10'000'999);
  EXPECT_EQ(Checks("sliding", "k", 10, b_), 0);
  clock_.Set(10'001'500);
  EXPECT_EQ(Checks("sliding", "k", 10, a_), 0);  // the window's 10 are still in it
}

TEST_F(PromisesTest, ANestedKeyIsOneLimitPerTenant) {
  // api_key nests under tenant: (policy, tenant, key) is the limit, as on the gateway, so
  // key "k" of tenant acme and key "k" of tenant zeta are two limits of 3, wherever they
  // live.
  EXPECT_EQ(Checks("api_key", "k", 5, a_, "acme"), 3);
  EXPECT_EQ(Checks("api_key", "k", 5, a_, "zeta"), 3);
}

}  // namespace
}  // namespace limiter
