// The durable parts of limiter-bench: parsing and arithmetic without a node, then short runs
// of `node --durable off,sync,interval` and `durable-restart` against real limiterd
// processes, checking what the reports say (never how fast).
#include "bench/durable_bench.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench/node_bench.h"
#include "test/support/build_paths.h"

namespace limiter::bench {
namespace {

const std::string kBenchPolicies = testing::SourcePath("bench/policies.yaml");
const std::string kDurablePolicies = testing::SourcePath("bench/durable_policies.yaml");

TEST(ParseDurabilityListTest, OneOrSeveralModes) {
  Result<std::vector<NodeDurability>> one = ParseDurabilityList("sync");
  ASSERT_TRUE(one) << one.error();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0], DurabilityMode::kSync);

  Result<std::vector<NodeDurability>> off = ParseDurabilityList("off");
  ASSERT_TRUE(off) << off.error();
  ASSERT_EQ(off->size(), 1u);
  EXPECT_FALSE((*off)[0].has_value());

  Result<std::vector<NodeDurability>> all = ParseDurabilityList("off,sync,interval,sync");
  ASSERT_TRUE(all) << all.error();
  ASSERT_EQ(all->size(), 4u);
  EXPECT_FALSE((*all)[0].has_value());
  EXPECT_EQ((*all)[1], DurabilityMode::kSync);
  EXPECT_EQ((*all)[2], DurabilityMode::kInterval);
  EXPECT_EQ((*all)[3], DurabilityMode::kSync);
  EXPECT_EQ(NodeDurabilityName((*all)[0]), "off");
  EXPECT_EQ(NodeDurabilityName((*all)[2]), "interval");
}

TEST(ParseDurabilityListTest, RefusesWhatIsNotAMode) {
  for (const char* bad : {"", "fast", "sync,", ",sync", "sync,,off", "Sync", "sync interval"}) {
    SCOPED_TRACE(bad);
    Result<std::vector<NodeDurability>> parsed = ParseDurabilityList(bad);
    ASSERT_FALSE(parsed);
    EXPECT_NE(parsed.error().find("off, sync or interval"), std::string::npos) << parsed.error();
  }
  EXPECT_NE(ParseDurabilityList("off,fast").error().find("'fast'"), std::string::npos);
}

TEST(ApplyNodeStatTest, TakesTheDurableCountersOnlyWhenThereAreAny) {
  NodeStats plain;
  EXPECT_TRUE(ApplyNodeStat(plain, "keys", 7));
  EXPECT_TRUE(ApplyNodeStat(plain, "ops_check_allowed", 3));
  EXPECT_TRUE(ApplyNodeStat(plain, "ops_lease_granted", 2));
  EXPECT_FALSE(ApplyNodeStat(plain, "splits", 1));
  EXPECT_EQ(plain.keys, 7);
  EXPECT_EQ(plain.store_ops, 5);
  EXPECT_FALSE(plain.durable.has_value());

  NodeStats durable;
  const std::vector<std::pair<std::string, int64_t>> counters = {
      {"durable_writes", 100},
      {"durable_commits", 4},
      {"durable_reads", 9},
      {"durable_read_hits", 8},
      {"durable_errors", 1},
      {"durable_pending", 2},
      {"durable_records_estimate", 50},
      {"durable_disk_bytes", 4096},
      {"durable_expired", 3}};  // a durable counter NodeStats does not keep
  for (const auto& [name, value] : counters) EXPECT_TRUE(ApplyNodeStat(durable, name, value));
  ASSERT_TRUE(durable.durable.has_value());
  EXPECT_EQ(durable.durable->writes, 100);
  EXPECT_EQ(durable.durable->commits, 4);
  EXPECT_EQ(durable.durable->reads, 9);
  EXPECT_EQ(durable.durable->read_hits, 8);
  EXPECT_EQ(durable.durable->errors, 1);
  EXPECT_EQ(durable.durable->pending, 2);
  EXPECT_EQ(durable.durable->keys, 50);
  EXPECT_EQ(durable.durable->disk_bytes, 4096);
}

TEST(GroupCommitTest, WritesPerCommitAndCommitsPerSecondOverTheStretch) {
  NodeDurableStats before, after;
  before.writes = 1000;
  before.commits = 10;
  after.writes = 6000;
  after.commits = 60;
  const GroupCommitFigures f = GroupCommit(before, after, 2.0);
  EXPECT_EQ(f.writes, 5000);
  EXPECT_EQ(f.commits, 50);
  EXPECT_DOUBLE_EQ(f.commits_per_s, 25.0);
  EXPECT_DOUBLE_EQ(f.writes_per_commit, 100.0);
  EXPECT_EQ(f.backlog, 0);
  EXPECT_DOUBLE_EQ(f.taken_per_s, 2500.0);

  // A committer that falls behind: 5000 written, 3000 of them still queued at the end.
  after.pending = 3000;
  const GroupCommitFigures behind = GroupCommit(before, after, 2.0);
  EXPECT_EQ(behind.backlog, 3000);
  EXPECT_DOUBLE_EQ(behind.taken_per_s, 1000.0);
  EXPECT_DOUBLE_EQ(behind.written_per_s, 2500.0);
  EXPECT_TRUE(behind.behind());
  EXPECT_FALSE(f.behind());

  const GroupCommitFigures none = GroupCommit(after, after, 0);
  EXPECT_EQ(none.commits, 0);
  EXPECT_EQ(none.commits_per_s, 0);
  EXPECT_EQ(none.writes_per_commit, 0);
}

TEST(JudgeInspectTest, ChargedFreshOrMismatch) {
  constexpr int64_t kFresh = 1'000'000'000;
  EXPECT_EQ(JudgeInspect(true, kFresh - 1, kFresh), KeyVerdict::kCharged);
  EXPECT_EQ(JudgeInspect(false, kFresh, kFresh), KeyVerdict::kFresh);
  EXPECT_EQ(JudgeInspect(true, kFresh - 2, kFresh), KeyVerdict::kMismatch);  // charged twice
  EXPECT_EQ(JudgeInspect(true, kFresh, kFresh), KeyVerdict::kMismatch);
  EXPECT_EQ(JudgeInspect(false, kFresh - 1, kFresh), KeyVerdict::kMismatch);
}

// A parent directory of the test's own, removed at the end.
class ScratchDir {
 public:
  ScratchDir() {
    Result<std::unique_ptr<TempDataDir>> made = TempDataDir::Make("");
    EXPECT_TRUE(made) << made.error();
    if (made) dir_ = std::move(made).value();
  }
  std::string path() const { return dir_ ? dir_->path() : std::string(); }
  bool Empty() const { return std::filesystem::is_empty(path()); }

 private:
  std::unique_ptr<TempDataDir> dir_;
};

TEST(TempDataDirTest, FreshUnderItsParentAndRemovedWithItsFiles) {
  ScratchDir parent;
  std::string path;
  {
    Result<std::unique_ptr<TempDataDir>> dir = TempDataDir::Make(parent.path());
    ASSERT_TRUE(dir) << dir.error();
    path = (*dir)->path();
    EXPECT_EQ(std::filesystem::path(path).parent_path(), std::filesystem::path(parent.path()));
    EXPECT_TRUE(std::filesystem::is_empty(path));
    std::ofstream(path + "/000001.log") << "x";
    std::filesystem::create_directory(path + "/sub");
    std::ofstream(path + "/sub/file") << "y";
    Result<std::unique_ptr<TempDataDir>> other = TempDataDir::Make(parent.path());
    ASSERT_TRUE(other) << other.error();
    EXPECT_NE((*other)->path(), path);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(parent.Empty());

  Result<std::unique_ptr<TempDataDir>> nowhere = TempDataDir::Make("/nonexistent/parent");
  ASSERT_FALSE(nowhere);
  EXPECT_NE(nowhere.error().find("/nonexistent/parent"), std::string::npos) << nowhere.error();
}

TEST(MeasureDataDirTest, CountsTablesLogAndTheRest) {
  ScratchDir dir;
  const auto write = [&](const std::string& name, size_t bytes) {
    std::ofstream(dir.path() + "/" + name) << std::string(bytes, 'x');
  };
  write("000010.sst", 1000);
  write("000011.sst", 500);
  write("000012.log", 300);  // the WAL
  write("LOG", 70);          // RocksDB's info log, not the WAL
  write("MANIFEST-000005", 20);
  write("OPTIONS-000007", 10);
  std::filesystem::create_directory(dir.path() + "/archive.sst");  // a directory: not counted
  const DataDirBytes b = MeasureDataDir(dir.path());
  EXPECT_EQ(b.sst, 1500);
  EXPECT_EQ(b.wal, 300);
  EXPECT_EQ(b.other, 100);
  EXPECT_EQ(b.sst_and_wal(), 1800);
  EXPECT_EQ(b.total(), 1900);

  const DataDirBytes none = MeasureDataDir(dir.path() + "/missing");
  EXPECT_EQ(none.total(), 0);
  EXPECT_FALSE(FileSystemName(dir.path()).empty());
}

// ----- Against real limiterd processes ----------------------------------------------------

std::vector<nlohmann::json> JsonLines(const std::string& text) {
  std::vector<nlohmann::json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

TEST(NodeBenchDurableTest, RunsEachDurabilityOnItsOwnNodeAndReportsTheGroupCommit) {
  if (!DurableStore::Available()) GTEST_SKIP() << "built without RocksDB";
  ScratchDir parent;
  NodeBenchOptions o;
  o.limiterd = testing::LimiterdBin();
  o.policies = kBenchPolicies;
  o.durable_policies = kDurablePolicies;
  o.data_parent = parent.path();
  o.connections = 1;
  o.shape.depth = 2;
  o.shape.batch = 16;
  o.shape.keys = 200;
  o.shape.duration_s = 0.3;
  o.json = true;
  o.durability = {std::nullopt, DurabilityMode::kSync, DurabilityMode::kInterval};
  o.sync_interval_ms = 20;
  std::ostringstream out, err;
  ASSERT_EQ(RunNodeBench(o, out, err), 0) << err.str();
  const std::vector<nlohmann::json> runs = JsonLines(out.str());
  ASSERT_EQ(runs.size(), 3u) << out.str();

  const nlohmann::json& memory = runs[0];
  EXPECT_EQ(memory.at("durability"), "off");
  EXPECT_EQ(memory.at("policy"), "bench");
  EXPECT_FALSE(memory.contains("durable_commits"));
  EXPECT_DOUBLE_EQ(memory.at("vs_memory").get<double>(), 1.0);  // the only memory-only run

  for (size_t i : {1u, 2u}) {
    const nlohmann::json& r = runs[i];
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r.at("durability"), i == 1 ? "sync" : "interval");
    EXPECT_EQ(r.at("policy"), "bench_durable");
    EXPECT_EQ(r.at("errors").get<uint64_t>(), 0u);
    EXPECT_EQ(r.at("durable_errors").get<int64_t>(), 0);
    // Every check wrote its key's state; the 200 keys are all in the database.
    EXPECT_EQ(r.at("durable_writes").get<int64_t>(), r.at("checks").get<int64_t>());
    EXPECT_GT(r.at("durable_commits").get<int64_t>(), 0);
    EXPECT_GE(r.at("durable_writes_per_commit").get<double>(), 1.0);
    EXPECT_GT(r.at("durable_disk_bytes_stopped").get<int64_t>(), 0);
    EXPECT_TRUE(r.contains("vs_memory"));
    EXPECT_EQ(r.contains("sync_interval_ms"), i == 2);
  }
  EXPECT_TRUE(parent.Empty()) << "a data dir was left behind";
}

TEST(NodeBenchDurableTest, ADurableRunNeedsALocalNodeAndADurablePolicy) {
  NodeBenchOptions o;
  o.durable_policies = kDurablePolicies;
  o.policies = kBenchPolicies;
  o.durability = {DurabilityMode::kSync};
  o.server = "127.0.0.1:1";
  std::ostringstream out, err;
  EXPECT_EQ(RunNodeBench(o, out, err), 1);
  EXPECT_NE(err.str().find("--durable needs a local node"), std::string::npos) << err.str();

  o.server.clear();
  o.durable_policies = kBenchPolicies;
  o.durable_policy = "bench";
  std::ostringstream out2, err2;
  EXPECT_EQ(RunNodeBench(o, out2, err2), 1);
  EXPECT_NE(err2.str().find("is not durable"), std::string::npos) << err2.str();
}

TEST(DurableRestartTest, TheKeysSurviveTheRestart) {
  if (!DurableStore::Available()) GTEST_SKIP() << "built without RocksDB";
  ScratchDir parent;
  DurableRestartOptions o;
  o.limiterd = testing::LimiterdBin();
  o.policies = kDurablePolicies;
  o.keys = 2000;
  o.batch = 100;
  o.sample = 100;
  o.data_parent = parent.path();
  o.json = true;
  for (DurabilityMode mode : {DurabilityMode::kSync, DurabilityMode::kInterval}) {
    SCOPED_TRACE(DurabilityModeName(mode));
    o.mode = mode;
    std::ostringstream out, err;
    ASSERT_EQ(RunDurableRestart(o, out, err), 0) << err.str();
    const nlohmann::json r = nlohmann::json::parse(out.str());
    SCOPED_TRACE(r.dump());
    EXPECT_EQ(r.at("write_checks").get<uint64_t>(), 2000u);
    EXPECT_EQ(r.at("write_errors").get<uint64_t>(), 0u);
    EXPECT_EQ(r.at("durable_writes").get<int64_t>(), 2000);
    EXPECT_EQ(r.at("sample").get<size_t>(), 100u);
    EXPECT_EQ(r.at("sample_charged").get<int64_t>(), 100);
    EXPECT_EQ(r.at("controls_fresh").get<int64_t>(), 100);
    EXPECT_EQ(r.at("fresh_remaining").get<int64_t>(), 1'000'000'000);
    EXPECT_TRUE(r.at("first_check_allowed").get<bool>());
    EXPECT_GT(r.at("restart_read_hits").get<int64_t>(), 0);
    EXPECT_EQ(r.at("restart_read_errors").get<int64_t>(), 0);
    EXPECT_GT(r.at("disk_after_stop").at("sst_wal_bytes_per_key").get<double>(), 0);
    // In one test process another test may have made key ids under another seed first: then
    // the compaction is skipped, and says why.
    if (r.at("compacted").get<bool>()) {
      EXPECT_GT(r.at("disk_after_compaction").at("sst_bytes").get<int64_t>(), 0);
      EXPECT_TRUE(r.contains("startup_compacted_ms"));
    } else {
      EXPECT_NE(r.at("compact_skipped").get<std::string>().find("seed"), std::string::npos);
    }
  }
  EXPECT_TRUE(parent.Empty()) << "a data dir was left behind";
}

}  // namespace
}  // namespace limiter::bench
