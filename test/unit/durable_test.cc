// Durable policies across node restarts (server/durable_store.h): each algorithm's state
// comes back, time between a stop and a start counts as the wall clock says (never less than
// none), expired records are compacted away, a bad database stops the start with one message
// naming it, and calendar windows follow the calendar (wall-clock jumps included).
#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/calendar.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"
#include "server/durable_record.h"
#include "server/durable_store.h"
#include "server/node.h"
#include "test/support/node_harness.h"
#include "test/support/policies.h"
#include "test/unit/test_seed.h"

namespace limiter {
namespace {

const char* kPolicies = R"(
policies:
  - {name: window, algorithm: fixed_window, limit: 5, window: 1h, class: billing, durable: true}
  - {name: log, algorithm: sliding_log, limit: 5, window: 1h, class: contract, durable: true}
  - {name: counter, algorithm: sliding_window, limit: 5, window: 1h, class: contract,
     durable: true}
  - {name: bucket, algorithm: token_bucket, limit: 100, window: 1h, burst: 5, class: contract,
     durable: true}
  - {name: gcra, algorithm: gcra, limit: 100, window: 1h, burst: 5, class: contract,
     durable: true}
  - {name: meter, algorithm: leaky_bucket, limit: 100, window: 1h, burst: 5, class: contract,
     durable: true}
  - {name: tenant, algorithm: gcra, limit: 100, window: 1h, burst: 8, class: contract,
     durable: true}
  - {name: api_key, algorithm: token_bucket, limit: 100, window: 1h, burst: 5, class: contract,
     parent: tenant, durable: true}
  - {name: memory, algorithm: token_bucket, limit: 100, window: 1h, burst: 5, class: contract}
  - {name: second, algorithm: fixed_window, limit: 1, window: 1s, class: contract, durable: true}
  - {name: daily, algorithm: fixed_window, limit: 3, window: 1d, align: calendar,
     timezone: Europe/Berlin, class: billing, durable: true}
  - {name: monthly, algorithm: fixed_window, limit: 2, window: 1mo, align: calendar,
     class: billing}
)";

constexpr const char* kDurablePolicies[] = {"window", "log", "counter", "bucket", "gcra", "meter"};

// ms since the epoch of a UTC civil time (days_from_civil, proleptic Gregorian).
int64_t Utc(int y, unsigned m, unsigned d, int hh = 0, int mm = 0, int ss = 0) {
  y -= m <= 2;
  const int era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = int64_t{era} * 146097 + static_cast<int64_t>(doe) - 719468;
  return ((days * 24 + hh) * 60 + mm) * 60'000 + int64_t{ss} * 1000;
}

class DurableTest : public ::testing::Test {
 protected:
  DurableTest() {
    static int counter = 0;
    dir_ = ::testing::TempDir() + "/limiter_durable_" + std::to_string(::getpid()) + "_" +
           std::to_string(counter++);
    std::filesystem::remove_all(dir_);
  }
  ~DurableTest() override {
    node_.reset();
    std::filesystem::remove_all(dir_);
  }

  Result<std::unique_ptr<DurableStore>> OpenStore(DurabilityMode mode = DurabilityMode::kSync) {
    DurableOptions o;
    o.data_dir = dir_;
    o.mode = mode;
    o.interval_ms = 20;
    return OpenDurableStore(policies_, *clock_, o);
  }

  // A node on the data dir; the previous one (if any) is stopped first, as a process exits.
  void Start(DurabilityMode mode = DurabilityMode::kSync) {
    node_.reset();
    Result<std::unique_ptr<DurableStore>> store = OpenStore(mode);
    ASSERT_TRUE(store.ok()) << store.error();
    NodeOptions options;
    options.store.max_keys = 1'000'000;
    node_ = std::make_unique<testing::NodeHarness>(policies_, *clock_, options,
                                                   std::move(store).value());
  }
  // A restart on another machine: a new monotonic clock, the wall clock `wall_ms` on.
  void Restart(int64_t wall_ms, DurabilityMode mode = DurabilityMode::kSync) {
    node_.reset();
    const int64_t wall = clock_->WallMs() + wall_ms;
    clock_ = std::make_unique<ManualClock>(clock_->NowMs() * 7 + 123'456);
    clock_->SetWall(wall);
    Start(mode);
  }

  const wire::Reply& Send(RequestBuilder& b) { return node_->Send(b); }
  const wire::OpReply& One(RequestBuilder& b) { return node_->One(b); }
  bool Check(std::string_view policy, std::string_view key, std::string_view tenant = {},
             int64_t cost = 1) {
    return node_->Check(policy, key, tenant, cost);
  }
  int Admitted(std::string_view policy, std::string_view key, int tries,
               std::string_view tenant = {}) {
    int n = 0;
    for (int i = 0; i < tries; ++i) n += Check(policy, key, tenant);
    return n;
  }
  int64_t Remaining(std::string_view policy, std::string_view key) {
    RequestBuilder b;
    b.Inspect(1, policy, key);
    const wire::OpReply& r = One(b);
    EXPECT_EQ(r.status(), wire::Status::Ok);
    return r.results()->Get(0)->remaining();
  }

  std::string dir_;
  PolicySet policies_ = testing::Policies(kPolicies, "durable.yaml");
  std::unique_ptr<ManualClock> clock_ = std::make_unique<ManualClock>(1'000'000);
  std::unique_ptr<testing::NodeHarness> node_;
};

TEST_F(DurableTest, EveryAlgorithmsStateSurvivesARestartElsewhere) {
  Start();
  for (const char* p : kDurablePolicies) EXPECT_EQ(Admitted(p, "k", 8), 5) << p;
  EXPECT_EQ(Admitted("memory", "k", 8), 5);
  Restart(/*wall_ms=*/10);
  for (const char* p : kDurablePolicies) EXPECT_EQ(Admitted(p, "k", 3), 0) << p;
  EXPECT_EQ(Admitted("memory", "k", 8), 5) << "memory-only keys start fresh";
  EXPECT_GE(node_->node().durable()->stats().read_hits, 6);
}

TEST_F(DurableTest, NestedLimitsAndTheirTenantSurvive) {
  Start();
  EXPECT_EQ(Admitted("api_key", "a", 5, "acme"), 5);
  EXPECT_EQ(Admitted("api_key", "b", 5, "acme"), 3);  // the tenant's burst of 8 is spent
  Restart(10);
  EXPECT_EQ(Admitted("api_key", "c", 2, "acme"), 0);
  EXPECT_EQ(Admitted("api_key", "a", 2, "acme"), 0);
}

TEST_F(DurableTest, TimeBetweenStopAndStartIsTheWallClocks) {
  Start();
  EXPECT_EQ(Admitted("bucket", "k", 6), 5);
  // 100 an hour: one token every 36 s of wall time while the node was down.
  Restart(/*wall_ms=*/36'000);
  EXPECT_EQ(Admitted("bucket", "k", 3), 1);
}

TEST_F(DurableTest, AWallClockThatWentBackRefillsNothing) {
  Start();
  EXPECT_EQ(Admitted("bucket", "k", 6), 5);
  Restart(/*wall_ms=*/-3'600'000);
  EXPECT_EQ(Admitted("bucket", "k", 2), 0);
  clock_->Advance(36'000);  // and then time runs on the node's own clock
  EXPECT_EQ(Admitted("bucket", "k", 2), 1);
}

TEST_F(DurableTest, StatesAreExactlyAsBeforeForOneHundredThousandKeys) {
  Start();
  constexpr int kKeys = 100'000;
  constexpr int kPerFrame = 1000;
  auto key = [](int i) { return "key-" + std::to_string(i); };
  RequestBuilder b;
  for (int i = 0; i < kKeys; i += kPerFrame) {
    for (int j = i; j < i + kPerFrame; ++j) {
      b.Check(static_cast<uint64_t>(j), j % 2 ? "bucket" : "log", key(j), {}, 1 + j % 5);
    }
    const wire::Reply& r = Send(b);
    for (const wire::OpReply* op : *r.ops()) ASSERT_TRUE(op->allowed());
  }
  auto inspect_all = [&] {
    std::vector<int64_t> remaining;
    constexpr int kInspectsPerFrame = 50;  // a frame may carry 64 (NodeOptions)
    for (int i = 0; i < kKeys; i += kInspectsPerFrame) {
      for (int j = i; j < i + kInspectsPerFrame; ++j) {
        b.Inspect(static_cast<uint64_t>(j), j % 2 ? "bucket" : "log", key(j));
      }
      const wire::Reply& r = Send(b);
      EXPECT_NE(r.ops(), nullptr);
      if (r.ops() == nullptr) return remaining;
      for (const wire::OpReply* op : *r.ops())
        remaining.push_back(op->results()->Get(0)->remaining());
    }
    return remaining;
  };
  const std::vector<int64_t> before = inspect_all();
  Restart(/*wall_ms=*/0);
  const std::vector<int64_t> after = inspect_all();
  ASSERT_EQ(before.size(), after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    ASSERT_EQ(before[i], after[i]) << key(static_cast<int>(i));
    ASSERT_EQ(after[i], 5 - (1 + static_cast<int64_t>(i) % 5)) << key(static_cast<int>(i));
  }
}

TEST_F(DurableTest, SyncRepliesComeAfterTheirBatchIsDurable) {
  Start(DurabilityMode::kSync);
  constexpr int kThreads = 8, kKeys = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      testing::NodeHarness::Caller caller = node_->NewCaller();
      RequestBuilder b;
      for (int i = 0; i < kKeys; ++i) {
        b.Check(1, "window", "t" + std::to_string(t) + "-" + std::to_string(i), {}, 5);
        caller.Send(b);
        // Returned: its write is synced (nothing of this thread's is pending).
      }
    });
  }
  for (auto& t : threads) t.join();
  const DurableStore::Stats s = node_->node().durable()->stats();
  EXPECT_EQ(s.pending, 0);
  EXPECT_EQ(s.writes, kThreads * kKeys);
  EXPECT_GE(s.commits, 1);
  EXPECT_LE(s.commits, s.writes);
  Restart(0);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kKeys; i += 37) {
      EXPECT_FALSE(Check("window", "t" + std::to_string(t) + "-" + std::to_string(i)));
    }
  }
}

TEST_F(DurableTest, IntervalModeKeepsWhatWasQueuedAtAStop) {
  Start(DurabilityMode::kInterval);
  EXPECT_EQ(Admitted("window", "k", 7), 5);
  Restart(0, DurabilityMode::kInterval);
  EXPECT_EQ(Admitted("window", "k", 2), 0);
}

TEST_F(DurableTest, ExpiredRecordsAreCompactedAway) {
  Start();
  for (int i = 0; i < 500; ++i) EXPECT_TRUE(Check("second", "k" + std::to_string(i)));
  EXPECT_TRUE(Check("window", "stays"));
  clock_->Advance(2000);  // the 1 s windows have passed; the hour has not
  node_->node().durable()->CompactAll();
  const DurableStore::Stats s = node_->node().durable()->stats();
  EXPECT_EQ(s.expired, 500);
  Restart(0);
  EXPECT_EQ(Admitted("window", "stays", 5), 4);
  EXPECT_EQ(Admitted("second", "k1", 2), 1);
}

TEST_F(DurableTest, AKeyBackToFreshIsErased) {
  Start();
  RequestBuilder b;
  b.Lease(1, "bucket", "k", {}, 3);
  const wire::OpReply& lease = One(b);
  ASSERT_EQ(lease.granted(), 3);
  const int64_t at = lease.granted_at_ms();
  const uint64_t id = lease.lease_id();
  b.Return(2, "bucket", "k", {}, 3, at, id);
  EXPECT_EQ(One(b).granted(), 3);
  node_->node().durable()->CompactAll();
  EXPECT_EQ(node_->node().durable()->stats().live_keys, 0);
}

TEST_F(DurableTest, DurablePoliciesNeedADataDir) {
  DurableOptions none;
  Result<std::unique_ptr<DurableStore>> store = OpenDurableStore(policies_, *clock_, none);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().find("durable.yaml:"), std::string::npos) << store.error();
  EXPECT_NE(store.error().find("policy 'window' is durable: give --data-dir"), std::string::npos)
      << store.error();
  const PolicySet memory = testing::Policies(
      "policies:\n  - {name: m, algorithm: gcra, limit: 1, window: 1s, class: contract}\n",
      "m.yaml");
  Result<std::unique_ptr<DurableStore>> nothing = OpenDurableStore(memory, *clock_, none);
  ASSERT_TRUE(nothing.ok());
  EXPECT_EQ(nothing->get(), nullptr);
}

TEST_F(DurableTest, AnotherFormatVersionStopsTheStart) {
  Start();
  EXPECT_TRUE(Check("window", "k"));
  node_.reset();
  {
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_, &db).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "mformat", "99").ok());
    delete db;
  }
  Result<std::unique_ptr<DurableStore>> store = OpenStore();
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.error(), "data dir '" + dir_ +
                               "': written in format 99 by another limiterd version; this one "
                               "reads format 1");
}

TEST_F(DurableTest, ADatabaseLimiterdDidNotWriteStopsTheStart) {
  {
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir_, &db).ok());
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "someone", "else's").ok());
    delete db;
  }
  Result<std::unique_ptr<DurableStore>> store = OpenStore();
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().find("data dir '" + dir_ + "': holds a database that limiterd did not"),
            std::string::npos)
      << store.error();
}

TEST_F(DurableTest, ACorruptDatabaseStopsTheStart) {
  Start();
  EXPECT_TRUE(Check("window", "k"));
  node_.reset();
  // RocksDB's CURRENT names the manifest: garbage there is a database it cannot open.
  std::ofstream(dir_ + "/CURRENT", std::ios::trunc) << "MANIFEST-garbage\n";
  Result<std::unique_ptr<DurableStore>> store = OpenStore();
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.error().find("data dir '" + dir_ + "': cannot open its database: "),
            std::string::npos)
      << store.error();
}

TEST_F(DurableTest, ADatabaseInUseByAnotherNodeStopsTheStart) {
  Start();
  Result<std::unique_ptr<DurableStore>> second = OpenStore();
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().find("data dir '" + dir_ + "': cannot open its database: "),
            std::string::npos)
      << second.error();
  EXPECT_TRUE(Check("window", "k")) << "the first keeps serving";
}

TEST_F(DurableTest, AnUnreadableRecordIsAnErrorReplyForItsKeyOnly) {
  Start();
  EXPECT_TRUE(Check("window", "bad"));
  EXPECT_TRUE(Check("window", "good"));
  node_.reset();
  {
    // Overwrite the record with bytes of no format (RocksDB's checksums are intact: this is
    // what a record of a future layout, or a bug, would look like).
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_, &db).ok());
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    std::vector<std::string> keys;
    for (it->Seek("k"); it->Valid() && it->key()[0] == 'k'; it->Next())
      keys.push_back(it->key().ToString());
    it.reset();
    ASSERT_EQ(keys.size(), 2u);
    for (const std::string& k : keys)
      ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), k, "\x07junk").ok());
    delete db;
  }
  Start();
  RequestBuilder b;
  b.Check(1, "window", "bad");
  const wire::OpReply& r = One(b);
  EXPECT_EQ(r.status(), wire::Status::StoreError);
  ASSERT_NE(r.error(), nullptr);
  EXPECT_NE(r.error()->str().find("durable store '" + dir_ + "'"), std::string::npos)
      << r.error()->str();
  EXPECT_NE(r.error()->str().find("record of format 7"), std::string::npos) << r.error()->str();
  EXPECT_FALSE(r.allowed());
  EXPECT_TRUE(Check("window", "other")) << "other keys are served";
  EXPECT_GE(node_->node().durable()->stats().errors, 1);
}

TEST_F(DurableTest, APolicyWhoseAlgorithmChangedStartsItsKeysFresh) {
  Start();
  EXPECT_EQ(Admitted("bucket", "k", 6), 5);
  node_.reset();
  std::string changed = kPolicies;
  const std::string from = "name: bucket, algorithm: token_bucket";
  changed.replace(changed.find(from), from.size(), "name: bucket, algorithm: gcra");
  policies_ = testing::Policies(changed, "durable.yaml");
  Start();
  EXPECT_EQ(Admitted("bucket", "k", 6), 5);
  EXPECT_EQ(node_->node().durable()->stats().dropped, 1);
}

// ----- Calendar windows on the node: the wall clock, Europe/Berlin -----

TEST_F(DurableTest, ADailyWindowResetsAtLocalMidnight) {
  clock_->SetWall(Utc(2026, 1, 14, 22, 59, 59));  // 23:59:59 in Berlin (CET, UTC+1)
  Start();
  EXPECT_EQ(Admitted("daily", "k", 5), 3);
  RequestBuilder b;
  b.Check(1, "daily", "k");
  const wire::OpReply& denied = One(b);
  EXPECT_FALSE(denied.allowed());
  EXPECT_EQ(denied.retry_after_ms(), 1000) << "a second to midnight";
  clock_->SetWall(Utc(2026, 1, 14, 22, 59, 59) + 999);
  EXPECT_FALSE(Check("daily", "k"));
  clock_->SetWall(Utc(2026, 1, 14, 23, 0, 0));
  EXPECT_EQ(Admitted("daily", "k", 5), 3);
}

TEST_F(DurableTest, TheDayOfTheSpringDstChangeIs23Hours) {
  clock_->SetWall(Utc(2026, 3, 28, 23, 0, 0));  // 2026-03-29 00:00 CET
  Start();
  EXPECT_EQ(Admitted("daily", "k", 4), 3);
  RequestBuilder b;
  b.Check(1, "daily", "k");
  const wire::OpReply& denied = One(b);
  EXPECT_EQ(denied.retry_after_ms(), 23 * 3'600'000);
  clock_->SetWall(Utc(2026, 3, 29, 21, 59, 59));  // 23:59:59 CEST
  EXPECT_FALSE(Check("daily", "k"));
  clock_->SetWall(Utc(2026, 3, 29, 22, 0, 0));  // 2026-03-30 00:00 CEST
  EXPECT_TRUE(Check("daily", "k"));
}

TEST_F(DurableTest, AWallClockJumpBackNeitherRefillsNorChargesTwice) {
  clock_->SetWall(Utc(2026, 6, 10, 8, 0, 0));  // 10:00 CEST
  Start();
  EXPECT_EQ(Admitted("daily", "k", 2), 2);
  clock_->SetWall(Utc(2026, 6, 9, 21, 0, 0));  // back to 23:00 the day before
  EXPECT_EQ(Admitted("daily", "k", 3), 1) << "the day's count stays; nothing refills";
  clock_->SetWall(Utc(2026, 6, 10, 9, 0, 0));  // forward again, same day
  EXPECT_EQ(Admitted("daily", "k", 2), 0);
  clock_->SetWall(Utc(2026, 6, 10, 22, 0, 0));  // midnight in Berlin
  EXPECT_EQ(Admitted("daily", "k", 4), 3);
}

TEST_F(DurableTest, ACalendarWindowSurvivesARestartUntilItsEnd) {
  clock_->SetWall(Utc(2026, 1, 14, 21, 0, 0));  // 22:00 CET
  Start();
  EXPECT_EQ(Admitted("daily", "k", 4), 3);
  Restart(/*wall_ms=*/3'600'000);  // 23:00
  EXPECT_EQ(Admitted("daily", "k", 2), 0);
  Restart(/*wall_ms=*/3'600'000);  // midnight
  EXPECT_EQ(Admitted("daily", "k", 4), 3);
}

TEST_F(DurableTest, AMonthlyWindowCoversTheWholeMonth) {
  Start();
  const struct {
    int y;
    unsigned m;
    unsigned days;
  } months[] = {{2026, 2, 28}, {2028, 2, 29}, {2026, 4, 30}, {2026, 12, 31}};
  for (const auto& month : months) {
    const std::string key = "m" + std::to_string(month.y) + "-" + std::to_string(month.m);
    clock_->SetWall(Utc(month.y, month.m, 1));
    EXPECT_EQ(Admitted("monthly", key, 3), 2) << key;
    clock_->SetWall(Utc(month.y, month.m, month.days, 23, 59, 59) + 999);
    EXPECT_FALSE(Check("monthly", key)) << key << ": the last ms of the month";
    clock_->SetWall(Utc(month.y, month.m, month.days) + 86'400'000);
    EXPECT_EQ(Admitted("monthly", key, 3), 2) << key << ": the 1st of the next";
  }
}

// ----- Hand-off of durable keys between two nodes, each with its own database -----

class DurableHandoffTest : public ::testing::Test {
 protected:
  struct Member {
    std::string dir;
    std::unique_ptr<ManualClock> clock;
    std::unique_ptr<testing::NodeHarness> node;
  };
  ~DurableHandoffTest() override {
    for (auto& [name, m] : members_) {
      m.node.reset();
      std::filesystem::remove_all(m.dir);
    }
  }
  // (Re)starts `name` in a cluster of a:1 and b:1 on its own data dir and clock.
  void Start(const std::string& name, int64_t clock_ms) {
    Member& m = members_[name];
    m.node.reset();
    if (m.dir.empty()) {
      m.dir = ::testing::TempDir() + "/limiter_durable_handoff_" + std::to_string(::getpid()) +
              "_" + name.substr(0, 1);
      std::filesystem::remove_all(m.dir);
    }
    m.clock = std::make_unique<ManualClock>(clock_ms);
    DurableOptions d;
    d.data_dir = m.dir;
    Result<std::unique_ptr<DurableStore>> store = OpenDurableStore(policies_, *m.clock, d);
    ASSERT_TRUE(store.ok()) << store.error();
    NodeOptions o;
    o.name = o.self = name;
    o.members = {"a:1", "b:1"};
    o.generation = 1;
    m.node =
        std::make_unique<testing::NodeHarness>(policies_, *m.clock, o, std::move(store).value());
  }
  Node& node(const std::string& name) { return members_.at(name).node->node(); }
  const wire::OpReply& Op(const std::string& to, RequestBuilder& b) {
    return members_.at(to).node->One(b);
  }
  int Admitted(const std::string& on, const std::string& key, int tries) {
    int n = 0;
    for (int i = 0; i < tries; ++i) {
      RequestBuilder b;
      b.Check(1, "window", key);
      const wire::OpReply& r = Op(on, b);
      EXPECT_EQ(r.status(), wire::Status::Ok) << (r.error() ? r.error()->str() : "");
      n += r.allowed();
    }
    return n;
  }
  Handoff::Sink Sink() {
    return [this](const std::string& member, std::span<const uint8_t> frame) -> int64_t {
      const wire::Reply& reply = members_.at(member).node->Send(frame);
      if (!reply.ops() || reply.ops()->Get(0)->status() != wire::Status::Ok) return -1;
      return reply.ops()->Get(0)->granted();
    };
  }
  std::vector<std::string> KeysOf(const std::string& owner, int n) {
    std::vector<std::string> keys;
    const std::shared_ptr<const ClusterRing> list = node(owner).membership();
    const Ring* ring = &list->ring;
    for (int i = 0; static_cast<int>(keys.size()) < n; ++i) {
      const std::string k = "k" + std::to_string(i);
      if (ring->Owner(k) == owner) keys.push_back(k);
    }
    return keys;
  }

  const PolicySet policies_ = testing::Policies(kPolicies, "durable.yaml");
  std::map<std::string, Member> members_;
};

TEST_F(DurableHandoffTest, KeysOnDiskOnlyAreHandedOverWhenTheNodeLeaves) {
  Start("a:1", 1'000'000);
  Start("b:1", 9'000'000);
  const std::vector<std::string> keys = KeysOf("a:1", 12);
  for (const std::string& k : keys) ASSERT_EQ(Admitted("a:1", k, 5), 5);
  Start("a:1", 2'000'000);  // restarted: its keys are on its disk only
  ASSERT_TRUE(node("b:1").ownership().SetMembers({"b:1"}, 2).ok());
  node("a:1").Leave(2);
  const std::optional<HandoffStats> stats =
      node("a:1").handoff().RunNext(Sink(), std::chrono::milliseconds(0));
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->keys_sent, static_cast<int64_t>(keys.size()));
  EXPECT_EQ(stats->keys_lost, 0);
  for (const std::string& k : keys) EXPECT_EQ(Admitted("b:1", k, 2), 0) << k;
  // a's records went with the keys: none is left to come back stale.
  node("a:1").durable()->CompactAll();
  EXPECT_EQ(node("a:1").durable()->stats().live_keys, 0);
  EXPECT_GE(node("b:1").durable()->stats().writes, static_cast<int64_t>(keys.size()))
      << "b wrote the keys it took to its own database";
}

TEST(DurableRecordTest, ARecordOfACalendarPolicyThatIsNoLongerOneIsDropped) {
  const PolicySet calendar = testing::Policies(
      "policies:\n  - {name: q, algorithm: fixed_window, limit: 3, window: 1d, align: calendar, "
      "class: billing, durable: true}\n",
      "a.yaml");
  const PolicySet plain = testing::Policies(
      "policies:\n  - {name: q, algorithm: fixed_window, limit: 3, window: 1d, class: billing, "
      "durable: true}\n",
      "b.yaml");
  ASSERT_FALSE(calendar.policies().empty() || plain.policies().empty());
  const Policy& c = calendar.policies().front();
  const Policy& p = plain.policies().front();
  const int64_t wall = Utc(2026, 5, 5, 12);
  const int64_t now = c.calendar->ToWindowTime(wall);
  KeyLimiter state(FixedWindow::State{now - now % c.rate.window_ms(), 3});
  std::string value;
  durable::Encode(c, {DurableKeyName::kLimit, "k", ""}, state, now, wall, value);
  Result<durable::Record> decoded = durable::Decode(value);
  ASSERT_TRUE(decoded.ok()) << decoded.error();
  const durable::Record& r = *decoded;
  Result<std::optional<KeyLimiter>> back = durable::Import(c, r, now + 1000, wall + 1000);
  ASSERT_TRUE(back.ok()) << back.error();
  ASSERT_TRUE(back->has_value());
  EXPECT_FALSE(durable::Import(p, r, 5'000, wall + 1000).ok())
      << "a calendar record on a policy that is not one would lock its key for decades";
}

TEST(DurableRecordTest, AStateAheadOfTheWritersClockComesBackWhole) {
  // Another worker, with a later clock reading, moved the bucket on before this one wrote it:
  // the write's offsets start from the state's own time, never positive.
  const PolicySet ps = testing::Policies(
      "policies:\n  - {name: b, algorithm: token_bucket, limit: 100, window: 1h, burst: 5, "
      "class: contract, durable: true}\n",
      "c.yaml");
  ASSERT_FALSE(ps.policies().empty());
  const Policy& p = ps.policies().front();
  KeyLimiter state(p.algorithm);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(state.Decide(p.rate, 10'050, 1).allowed);
  std::string value;
  durable::Encode(p, {DurableKeyName::kLimit, "k", ""}, state, /*now_ms=*/10'000, 0, value);
  Result<durable::Record> decoded = durable::Decode(value);
  ASSERT_TRUE(decoded.ok()) << decoded.error();
  const durable::Record& r = *decoded;
  Result<std::optional<KeyLimiter>> back = durable::Import(p, r, 777, 0);
  ASSERT_TRUE(back.ok()) << back.error();
  ASSERT_TRUE(back->has_value());
  EXPECT_FALSE((*back)->Decide(p.rate, 777, 1).allowed);
}

TEST(DurableRecordTest, AnyBytesDecodeOrFailWithoutACrash) {
  const uint64_t seed = testing::TestSeed();
  SCOPED_TRACE(testing::SeedTrace(seed));
  std::mt19937_64 rng(seed);
  const PolicySet ps = testing::Policies(
      "policies:\n  - {name: b, algorithm: sliding_log, limit: 50, window: 1h, class: contract, "
      "durable: true}\n",
      "d.yaml");
  ASSERT_FALSE(ps.policies().empty());
  const Policy& p = ps.policies().front();
  KeyLimiter state(p.algorithm);
  for (int i = 0; i < 20; ++i) state.Decide(p.rate, 1000 + i * 7, 1 + i % 3);
  std::string good;
  durable::Encode(p, {DurableKeyName::kLimit, "key", "tenant"}, state, 1200, 5, good);
  for (int i = 0; i < 20'000; ++i) {
    std::string bytes = good;
    if (i % 2) bytes.resize(rng() % (bytes.size() + 1));
    for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) {
      if (!bytes.empty()) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    const Result<durable::Record> r = durable::Decode(bytes);
    if (r.ok()) {
      (void)durable::Import(p, *r, 1300, 10);  // an error or a state: never a crash
    }
  }
}

}  // namespace
}  // namespace limiter
