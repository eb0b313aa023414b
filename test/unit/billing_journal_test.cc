// The gateway's billing journal (client/billing_journal.h) and the bounded debts it records
// (client/fallbacks.h): a round trip, a torn last record ignored, a corrupt record an error
// naming the file and its offset, one writer (through every path to the file), files only for
// their owner, a temp path never followed, a rewrite that keeps exactly the live debts
// (and the changes made while it writes), the bound on debts, a policy gone; and, in
// simulated time, a gateway restarted with its journal paying the owners of its keys under
// its new ring.
#include "client/billing_journal.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "client/client_core.h"
#include "client/fallbacks.h"
#include "client/request_resolver.h"
#include "test/sim/sim_cluster.h"
#include "test/support/node_harness.h"
#include "test/support/policies.h"
#include "test/support/wait.h"

namespace limiter {
namespace {

using client::Counters;
using Reason = BillingJournal::CloseReason;

// A journal's path in the temp dir, per process and name (test binaries run side by side);
// the files are removed when it goes.
struct TempJournal {
  explicit TempJournal(const std::string& name)
      : path(::testing::TempDir() + "/limiter_" + std::to_string(::getpid()) + "_" + name) {
    Remove();
  }
  ~TempJournal() { Remove(); }
  void Remove() const {
    for (const char* suffix : {"", ".lock", ".tmp"}) std::filesystem::remove(path + suffix);
  }
  const std::string path;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

BillingJournalOptions ByHand() {
  BillingJournalOptions o;
  o.background = false;  // the test syncs and rewrites
  return o;
}

Result<BillingJournal::Replay> Reopen(const std::string& path) {
  return BillingJournal::Open(path, ByHand());
}

std::vector<JournalDebt> DebtsIn(const std::string& path) {
  Result<BillingJournal::Replay> r = Reopen(path);
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? std::move(r->debts) : std::vector<JournalDebt>{};
}

TEST(BillingJournal, RoundTrip) {
  const TempJournal file("round_trip.journal");
  const std::string& path = file.path;
  const std::string long_key(kMaxKeyBytes, 'k'), long_tenant(kMaxKeyBytes, 't');
  {
    Result<BillingJournal::Replay> r = Reopen(path);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_TRUE(r->debts.empty());
    BillingJournal& j = *r->journal;
    j.Opened(1, "usage", "acct-1", "", 5);
    j.Opened(2, "per_user", "u", "acme", 3);
    j.Added(1, 7);
    j.Paid(2, 2);
    j.Opened(3, "usage", "paid-off", "", 4);
    j.Paid(3, 1);
    j.Closed(3, Reason::kPaid);
    j.Opened(4, std::string(kMaxNameBytes, 'p'), long_key, long_tenant, BillingJournal::kMaxUnits);
    j.Opened(5, "usage", "refused", "", 9);
    j.Closed(5, Reason::kRefused);
    EXPECT_EQ(j.errors(), 0u);
  }
  const std::vector<JournalDebt> expected = {
      {1, "usage", "acct-1", "", 12},
      {2, "per_user", "u", "acme", 1},
      {4, std::string(kMaxNameBytes, 'p'), long_key, long_tenant, BillingJournal::kMaxUnits},
  };
  EXPECT_EQ(DebtsIn(path), expected);
  EXPECT_EQ(DebtsIn(path), expected) << "reading it changes nothing";
}

TEST(BillingJournal, ATornLastRecordIsIgnoredAndCutOff) {
  const TempJournal file("torn.journal");
  const std::string& path = file.path;
  uint64_t before_last = 0;
  {
    Result<BillingJournal::Replay> r = Reopen(path);
    ASSERT_TRUE(r.ok()) << r.error();
    r->journal->Opened(1, "usage", "a", "", 5);
    r->journal->Opened(2, "usage", "b", "", 6);
    before_last = r->journal->file_bytes();
    r->journal->Added(1, 100);
  }
  const std::string whole = ReadAll(path);
  ASSERT_GT(whole.size(), before_last + 3);
  // Killed while writing the last record: any prefix of it.
  for (size_t cut = before_last + 1; cut < whole.size(); ++cut) {
    WriteAll(path, whole.substr(0, cut));
    Result<BillingJournal::Replay> r = Reopen(path);
    ASSERT_TRUE(r.ok()) << r.error();
    EXPECT_EQ(r->debts,
              (std::vector<JournalDebt>{{1, "usage", "a", "", 5}, {2, "usage", "b", "", 6}}));
    EXPECT_NE(r->torn.find("offset " + std::to_string(before_last)), std::string::npos) << r->torn;
    EXPECT_EQ(r->journal->file_bytes(), before_last) << "cut off";
    r->journal->Added(2, 1);  // appends follow the last whole record
    r.value().journal.reset();
    EXPECT_EQ(DebtsIn(path),
              (std::vector<JournalDebt>{{1, "usage", "a", "", 5}, {2, "usage", "b", "", 7}}));
  }
  // The whole last record with a wrong check (its bytes never reached the disk), and zeros
  // after the end of what was written (a machine crash): ignored too.
  std::string bad = whole;
  bad.back() ^= 0x55;
  WriteAll(path, bad);
  Result<BillingJournal::Replay> r = Reopen(path);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->debts.size(), 2u);
  EXPECT_EQ(r->debts[0].units, 5);
  r.value().journal.reset();
  WriteAll(path, whole + std::string(300, '\0'));
  r = Reopen(path);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->debts[0].units, 105);
  EXPECT_FALSE(r->torn.empty());
}

TEST(BillingJournal, ACorruptRecordIsAnErrorNamingTheFileAndItsOffset) {
  const TempJournal file("corrupt.journal");
  const std::string& path = file.path;
  uint64_t second = 0;
  {
    Result<BillingJournal::Replay> r = Reopen(path);
    ASSERT_TRUE(r.ok()) << r.error();
    r->journal->Opened(1, "usage", "a", "", 5);
    second = r->journal->file_bytes();
    r->journal->Opened(2, "usage", "b", "", 6);
    r->journal->Added(1, 1);
  }
  const std::string whole = ReadAll(path);
  std::string bad = whole;
  bad[second + 8] ^= 0x01;  // inside the second record's body
  WriteAll(path, bad);
  Result<BillingJournal::Replay> r = Reopen(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().find("billing journal " + path + ": record at offset " +
                           std::to_string(second) + ": checksum mismatch"),
            0u)
      << r.error();
  EXPECT_EQ(ReadAll(path), bad) << "never a silent reset";

  // A record whose length is out of bounds, in the middle.
  bad = whole;
  bad[second + 4] = '\xff';
  bad[second + 5] = '\xff';
  WriteAll(path, bad);
  r = Reopen(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("record at offset " + std::to_string(second) + ": its length"),
            std::string::npos)
      << r.error();

  // Well formed, but not a journal this client reads.
  bad = whole;
  bad[0] = 'X';
  WriteAll(path, bad);
  r = Reopen(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "billing journal " + path +
                           ": not a billing journal (it does not start with \"LIMBJRNL\")");
  WriteAll(path, "LIMBJRX");  // short, and not the start of a header (ATornHeaderIsANewJournal)
  r = Reopen(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("the header is cut short"), std::string::npos) << r.error();
}

TEST(BillingJournal, ARecordThatContradictsTheOnesBeforeIsAnError) {
  const TempJournal file("contradiction.journal");
  const std::string& path = file.path;
  uint64_t at = 0;
  {
    Result<BillingJournal::Replay> r = Reopen(path);
    ASSERT_TRUE(r.ok()) << r.error();
    r->journal->Opened(1, "usage", "a", "", 5);
    at = r->journal->file_bytes();
    r->journal->Paid(1, 6);  // more than is owed
    r->journal->Added(1, 1);
  }
  Result<BillingJournal::Replay> r = Reopen(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "billing journal " + path + ": record at offset " + std::to_string(at) +
                           ": pays 6 units to debt 1, which owes 5");
}

TEST(BillingJournal, OneWriterPerFile) {
  const TempJournal file("one_writer.journal");
  const std::string& path = file.path;
  Result<BillingJournal::Replay> first = Reopen(path);
  ASSERT_TRUE(first.ok()) << first.error();
  Result<BillingJournal::Replay> second = Reopen(path);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error(), "billing journal " + path + ": in use by another gateway (pid " +
                                std::to_string(::getpid()) +
                                "), which holds its lock; each gateway needs its own journal");
  first.value().journal.reset();
  EXPECT_TRUE(Reopen(path).ok()) << "the lock goes with its holder";
}

// The lock is on the file, not on the path: a symlink or a hard link to a journal in use
// names the same writer, and a rewrite (a new file renamed over the old) keeps the lock.
TEST(BillingJournal, OneWriterThroughEveryPathToTheFileAndAcrossARewrite) {
  const TempJournal file("one_file.journal");
  const TempJournal symlink("one_file_symlink.journal");
  const TempJournal hardlink("one_file_hardlink.journal");
  Result<BillingJournal::Replay> first = Reopen(file.path);
  ASSERT_TRUE(first.ok()) << first.error();
  std::filesystem::create_symlink(file.path, symlink.path);
  std::filesystem::create_hard_link(file.path, hardlink.path);
  const std::string held = "in use by another gateway (pid " + std::to_string(::getpid()) + ")";
  for (const std::string& other : {symlink.path, hardlink.path}) {
    Result<BillingJournal::Replay> second = Reopen(other);
    ASSERT_FALSE(second.ok()) << other << " was opened while " << file.path << " is held";
    EXPECT_EQ(second.error(), "billing journal " + other + ": " + held +
                                  ", which holds its lock; each gateway needs its own journal");
  }
  std::filesystem::remove(hardlink.path);  // the rewrite replaces the file the path names
  BillingJournal& j = *first->journal;
  j.Opened(1, "usage", "a", "", 5);
  BillingJournal::Image image;
  image.Add(1, "usage", "a", "", 5);
  ASSERT_TRUE(j.BeginRewrite(std::move(image)));
  const Status rewritten = j.FinishRewrite();
  ASSERT_TRUE(rewritten.ok()) << rewritten.error();
  for (const std::string& other : {file.path, symlink.path}) {
    Result<BillingJournal::Replay> second = Reopen(other);
    ASSERT_FALSE(second.ok()) << other << " was opened after a rewrite";
    EXPECT_NE(second.error().find(held), std::string::npos) << second.error();
  }
  first.value().journal.reset();
  EXPECT_TRUE(std::filesystem::is_symlink(symlink.path)) << "a rewrite keeps a symlink one";
  EXPECT_EQ(DebtsIn(symlink.path), (std::vector<JournalDebt>{{1, "usage", "a", "", 5}}));
}

// Sets the umask for its lifetime (the files' modes must not depend on the caller's).
struct Umask {
  explicit Umask(mode_t m) : old(::umask(m)) {}
  ~Umask() { ::umask(old); }
  const mode_t old;
};

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(BillingJournal, TheJournalIsOnlyForItsOwnerAfterOpenAndAfterARewrite) {
  const Umask permissive(022);
  const TempJournal file("mode.journal");
  Result<BillingJournal::Replay> r = Reopen(file.path);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(ModeOf(file.path), 0600u);
  BillingJournal& j = *r->journal;
  j.Opened(1, "usage", "a", "", 5);
  BillingJournal::Image image;
  image.Add(1, "usage", "a", "", 5);
  ASSERT_TRUE(j.BeginRewrite(std::move(image)));
  const Status rewritten = j.FinishRewrite();
  ASSERT_TRUE(rewritten.ok()) << rewritten.error();
  EXPECT_EQ(ModeOf(file.path), 0600u) << "after a rewrite";
}

TEST(BillingJournal, AJournalOfWiderModeIsTightenedAtOpen) {
  const TempJournal file("wide.journal");
  {
    Result<BillingJournal::Replay> r = Reopen(file.path);
    ASSERT_TRUE(r.ok()) << r.error();
    r->journal->Opened(1, "usage", "a", "", 5);
  }
  ASSERT_EQ(::chmod(file.path.c_str(), 0644), 0);
  EXPECT_EQ(DebtsIn(file.path), (std::vector<JournalDebt>{{1, "usage", "a", "", 5}}));
  EXPECT_EQ(ModeOf(file.path), 0600u);
}

// Something planted at the temp path (a symlink to a file worth keeping, or a file) is
// neither followed nor renamed into place: the rewrite fails naming it, the target is as it
// was, and the journal keeps every debt and takes appends.
TEST(BillingJournal, ARewriteNeitherFollowsNorReusesWhatIsPlantedAtItsTempPath) {
  const TempJournal file("planted.journal");
  const TempJournal victim("planted_victim");
  WriteAll(victim.path, "not yours\n");
  for (const bool as_symlink : {true, false}) {
    SCOPED_TRACE(as_symlink ? "a symlink" : "a file");
    file.Remove();
    Result<BillingJournal::Replay> r = Reopen(file.path);
    ASSERT_TRUE(r.ok()) << r.error();
    BillingJournal& j = *r->journal;
    j.Opened(1, "usage", "a", "", 5);
    // Rewrites go next to the file the path names (here the same file, its name normalized).
    const std::string tmp = std::filesystem::canonical(file.path).string() + ".tmp";
    if (as_symlink) {
      std::filesystem::create_symlink(victim.path, tmp);
    } else {
      WriteAll(tmp, "planted\n");
    }
    BillingJournal::Image image;
    image.Add(1, "usage", "a", "", 5);
    ASSERT_TRUE(j.BeginRewrite(std::move(image)));
    const Status rewritten = j.FinishRewrite();
    EXPECT_FALSE(rewritten.ok());
    EXPECT_EQ(rewritten.error(),
              "rewrite: " + tmp +
                  " exists already (a file or a symlink this journal did not make); it is "
                  "neither followed nor replaced");
    EXPECT_EQ(ReadAll(victim.path), "not yours\n");
    EXPECT_EQ(std::filesystem::is_symlink(tmp), as_symlink) << "left for the operator to see";
    EXPECT_FALSE(std::filesystem::is_symlink(file.path));
    j.Added(1, 2);
    r.value().journal.reset();
    EXPECT_EQ(DebtsIn(file.path), (std::vector<JournalDebt>{{1, "usage", "a", "", 7}}));
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(tmp)))
        << "Open removes a leftover temp path (unlink: never what a symlink names)";
    EXPECT_EQ(ReadAll(victim.path), "not yours\n");
  }
}

// A journal created and killed while its header was written is a new journal.
TEST(BillingJournal, ATornHeaderIsANewJournal) {
  const TempJournal file("torn_header.journal");
  WriteAll(file.path, "LIMBJ");
  Result<BillingJournal::Replay> r = Reopen(file.path);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_TRUE(r->debts.empty());
  EXPECT_EQ(r->torn, "a torn header (5 bytes) was cut off");
  EXPECT_EQ(r->journal->file_bytes(), BillingJournal::kHeaderBytes);
}

TEST(BillingJournal, ChangesMadeDuringARewriteReachTheNewFile) {
  const TempJournal file("rewrite.journal");
  const std::string& path = file.path;
  {
    Result<BillingJournal::Replay> r = Reopen(path);
    ASSERT_TRUE(r.ok()) << r.error();
    BillingJournal& j = *r->journal;
    j.Opened(1, "usage", "a", "", 5);
    j.Opened(2, "usage", "b", "", 6);
    BillingJournal::Image image;
    image.Add(1, "usage", "a", "", 5);
    image.Add(2, "usage", "b", "", 6);
    ASSERT_TRUE(j.BeginRewrite(std::move(image)));
    EXPECT_FALSE(j.BeginRewrite({})) << "one at a time";
    j.Added(1, 2);  // while the new file is written
    j.Closed(2, Reason::kPaid);
    j.Opened(3, "usage", "c", "", 1);
    ASSERT_TRUE(j.FinishRewrite().ok());
    j.Added(3, 1);  // after the switch
    EXPECT_EQ(j.rewrites(), 1u);
  }
  EXPECT_EQ(DebtsIn(path),
            (std::vector<JournalDebt>{{1, "usage", "a", "", 7}, {3, "usage", "c", "", 2}}));
}

// ----- the debts: Fallbacks with a journal -----

const char* kPolicies = R"(
policies:
  - {name: tenant, algorithm: gcra, limit: 1000, window: 1h, class: contract}
  - {name: usage, algorithm: token_bucket, limit: 100000, window: 400d, class: billing}
  - {name: per_user, algorithm: token_bucket, limit: 100000, window: 400d, class: billing,
     parent: tenant}
)";

class Debts : public ::testing::Test {
 protected:
  void SetUp() override { Load(kPolicies); }
  void Load(const char* text) {
    fallbacks_.reset();
    policies_ = std::make_unique<PolicySet>(testing::Policies(text, "billing.yaml"));
    resolver_ = std::make_unique<RequestResolver>(*policies_);
  }
  Fallbacks& Make(size_t max_debts) {
    fallbacks_ = std::make_unique<Fallbacks>(*policies_, 1, 1000, max_debts, sched_, counters_);
    return *fallbacks_;
  }
  // With the journal at `path` (read back first).
  Fallbacks& MakeJournaled(const std::string& path, size_t max_debts = 100'000,
                           BillingJournalOptions o = ByHand()) {
    Fallbacks& f = Make(max_debts);
    Result<BillingJournal::Replay> r = BillingJournal::Open(path, o);
    EXPECT_TRUE(r.ok()) << r.error();
    if (!r.ok()) return f;
    const Status restored = f.RestoreDebts(
        std::move(r).value(),
        [](const Policy&, std::string_view, std::string_view) { return std::string("n0:1"); });
    EXPECT_TRUE(restored.ok()) << restored.error();
    return f;
  }
  bool Owe(std::string_view policy, std::string_view key, int64_t cost,
           std::string_view tenant = "") {
    ResolvedRequest r;
    const client::Request req{.policy = policy, .key = key, .tenant = tenant, .cost = cost};
    EXPECT_TRUE(resolver_->Resolve(req, r).ok());
    bool allowed = false;
    fallbacks_->Decide(r, "n0:1", [&](client::Decision d) { allowed = d.allowed; });
    return allowed;
  }
  // Pays `units` of every debt owed (each in full when units is 0).
  void PayAll(int64_t units = 0) {
    for (Fallbacks::DebtCall& call : fallbacks_->TakeDebts("n0:1", 1'000'000, sched_.NowUs())) {
      fallbacks_->SettleDebt(call.id, units == 0 ? call.units : units, false, 0);
    }
  }
  Counters Count() const {
    Counters c;
    counters_.CopyTo(c);
    fallbacks_->AddCounters(c);
    return c;
  }

  sim::SimScheduler sched_;
  ClientCounters counters_;
  std::unique_ptr<PolicySet> policies_;
  std::unique_ptr<RequestResolver> resolver_;
  std::unique_ptr<Fallbacks> fallbacks_;
};

TEST_F(Debts, TheBoundAdmitsEveryRequestButRecordsNoNewKeyBeyondIt) {
  Make(3);
  for (const char* key : {"a", "b", "c", "d", "e"}) EXPECT_TRUE(Owe("usage", key, 2)) << key;
  Counters c = Count();
  EXPECT_EQ(c.billing_debts, 3u);
  EXPECT_EQ(c.billing_debt_units, 6u);
  EXPECT_EQ(c.billing_debt_units_dropped, 4u);
  EXPECT_EQ(c.billing_debt_units_dropped_by_reason[ClientCounters::kUnrecorded], 4u);
  EXPECT_EQ(c.fallback_by_class[static_cast<size_t>(LimitClass::kBilling)], 5u);
  EXPECT_EQ(c.allowed, 5u);
  // A key that owes already still adds to its debt.
  EXPECT_TRUE(Owe("usage", "a", 5));
  c = Count();
  EXPECT_EQ(c.billing_debt_units, 11u);
  EXPECT_EQ(c.billing_debt_units_dropped, 4u);
  // Paid back, the room is there again.
  PayAll();
  EXPECT_EQ(Count().billing_debts, 0u);
  EXPECT_EQ(Count().billing_debt_units_paid, 11u);
  EXPECT_TRUE(Owe("usage", "d", 1));
  EXPECT_EQ(Count().billing_debts, 1u);
  EXPECT_EQ(Count().billing_debt_units_dropped, 4u);
}

TEST_F(Debts, TheJournalFollowsEveryChangeAndItsRewriteKeepsExactlyTheLiveDebts) {
  const TempJournal file("live.journal");
  const std::string& path = file.path;
  BillingJournalOptions o = ByHand();
  o.compact_min_bytes = 4096;
  MakeJournaled(path, 100'000, o);
  // 200 accounts owe 3 units each; then, round after round, one unit of each is paid and
  // one more owed: the file grows, the debts stay as they are.
  std::map<std::string, int64_t> owed;
  for (int i = 0; i < 200; ++i) {
    const std::string key = "acct-" + std::to_string(i);
    ASSERT_TRUE(Owe("usage", key, 3));
    owed[key] = 3;
  }
  ASSERT_FALSE(Reopen(path).ok()) << "held by the gateway";
  for (int round = 0; round < 20; ++round) {
    PayAll(1);
    for (auto& [key, units] : owed) ASSERT_TRUE(Owe("usage", key, 1));
  }
  ASSERT_TRUE(Owe("per_user", "u", 4, "acme"));
  // Some are paid off (closed), some refused by their owner (dropped, closed).
  for (Fallbacks::DebtCall& call : fallbacks_->TakeDebts("n0:1", 1'000'000, sched_.NowUs())) {
    if (call.key == "acct-1" || call.key == "acct-2") {
      fallbacks_->SettleDebt(call.id, call.units, false, 0);
      owed.erase(call.key);
    } else if (call.key == "acct-3") {
      fallbacks_->SettleDebt(call.id, 0, true, 0);
      owed.erase(call.key);
    } else {
      fallbacks_->SettleDebt(call.id, 0, false, 0);
    }
  }
  const Counters before = Count();
  EXPECT_EQ(before.billing_debt_units_dropped_by_reason[ClientCounters::kRefused], 3u);
  EXPECT_EQ(before.billing_debts, owed.size() + 1);
  const uint64_t grown = std::filesystem::file_size(path);
  ASSERT_TRUE(fallbacks_->CompactJournal().ok());
  const uint64_t rewritten = std::filesystem::file_size(path);
  EXPECT_LT(rewritten * 4, grown) << "the rewrite holds the live debts only";
  EXPECT_EQ(Count().billing_journal_rewrites, 2u) << "one at start, one now";
  EXPECT_EQ(Count().billing_journal_errors, 0u);
  fallbacks_.reset();  // releases the journal

  std::map<std::string, int64_t> replayed;
  for (const JournalDebt& d : DebtsIn(path)) {
    if (d.policy == "usage") {
      replayed[d.key] = d.units;
    } else {
      EXPECT_EQ(d, (JournalDebt{d.number, "per_user", "u", "acme", 4}));
    }
  }
  EXPECT_EQ(replayed, owed);
  EXPECT_EQ(DebtsIn(path).size(), owed.size() + 1);
}

TEST_F(Debts, AFileOverItsBoundIsRewrittenInTheBackground) {
  const TempJournal file("background.journal");
  const std::string& path = file.path;
  BillingJournalOptions o;  // background
  o.sync_interval_ms = 1;
  o.compact_min_bytes = 4096;
  MakeJournaled(path, 100'000, o);
  for (int round = 0; round < 200; ++round) {
    ASSERT_TRUE(Owe("usage", "one", 1));
    PayAll();
  }
  // The file went over 4096 bytes: rewritten, once or more, until it is under (polled,
  // bounded; the thread looks every millisecond).
  testing::WaitUntil([&] {
    return Count().billing_journal_rewrites >= 2 && std::filesystem::file_size(path) <= 4096;
  });
  EXPECT_GE(Count().billing_journal_rewrites, 2u);
  EXPECT_LE(std::filesystem::file_size(path), 4096u);
  fallbacks_.reset();
  EXPECT_TRUE(DebtsIn(path).empty());
}

TEST_F(Debts, ChangesFromManyThreadsDuringBackgroundRewritesAreAllKept) {
  const TempJournal file("threads.journal");
  const std::string& path = file.path;
  BillingJournalOptions o;  // background
  o.sync_interval_ms = 1;
  o.compact_min_bytes = 8192;
  MakeJournaled(path, 100'000, o);
  // Four threads owe and one pays, until the journal has been rewritten twice under them
  // (polled, bounded).
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> owed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; !stop; ++i) {
        const int64_t cost = 1 + i % 3;
        Owe("usage", "t" + std::to_string(t) + "-" + std::to_string(i % 50), cost);
        owed += static_cast<uint64_t>(cost);
      }
    });
  }
  threads.emplace_back([&] {
    while (!stop) PayAll(1);
  });
  testing::WaitUntil([&] { return Count().billing_journal_rewrites >= 3; },
                     std::chrono::seconds(20), std::chrono::milliseconds(1));
  stop = true;
  for (std::thread& t : threads) t.join();
  const Counters c = Count();
  EXPECT_GE(c.billing_journal_rewrites, 3u) << "one at start, two while it was written";
  EXPECT_EQ(c.billing_journal_errors, 0u);
  fallbacks_.reset();
  const std::vector<JournalDebt> replayed = DebtsIn(path);
  uint64_t units = 0;
  for (const JournalDebt& d : replayed) units += static_cast<uint64_t>(d.units);
  EXPECT_EQ(replayed.size(), c.billing_debts);
  EXPECT_EQ(units, c.billing_debt_units);
  EXPECT_EQ(units + c.billing_debt_units_paid, owed.load());
}

TEST_F(Debts, ADebtOfAPolicyGoneIsDroppedCountedAndLogged) {
  const TempJournal file("policy_gone.journal");
  const std::string& path = file.path;
  {
    Result<BillingJournal::Replay> r = Reopen(path);
    ASSERT_TRUE(r.ok()) << r.error();
    r->journal->Opened(1, "usage", "kept", "", 5);
    r->journal->Opened(2, "old_usage", "a", "", 7);
    r->journal->Opened(3, "old_usage", "b", "", 1);
    r->journal->Opened(4, "per_user", "u", "", 2);  // nests under a tenant now
    r->journal->Opened(5, "per_user", "u", "acme", 3);
  }
  ::testing::internal::CaptureStderr();
  MakeJournaled(path);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(
      log.find("billing journal " + path +
               ": dropped 2 debts (8 units): policy 'old_usage' is no longer in billing.yaml"),
      std::string::npos)
      << log;
  EXPECT_NE(log.find("dropped 1 debts (2 units): policy 'per_user' now needs a tenant"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("replayed 2 debts (8 units)"), std::string::npos) << log;
  const Counters c = Count();
  EXPECT_EQ(c.billing_debts, 2u);
  EXPECT_EQ(c.billing_debt_units, 8u);
  EXPECT_EQ(c.billing_debt_units_dropped_by_reason[ClientCounters::kPolicyGone], 10u);
  EXPECT_EQ(c.billing_debt_units_dropped, 10u);
  fallbacks_.reset();
  std::vector<JournalDebt> left = DebtsIn(path);
  ASSERT_EQ(left.size(), 2u) << "the dropped ones are gone from the file too";
  std::sort(left.begin(), left.end(),
            [](const JournalDebt& a, const JournalDebt& b) { return a.policy > b.policy; });
  EXPECT_EQ(left[0].key, "kept");
  EXPECT_EQ(left[0].units, 5);
  EXPECT_EQ(left[1].tenant, "acme");
  EXPECT_EQ(left[1].units, 3);
}

TEST_F(Debts, AReplayBeyondTheBoundKeepsTheFirstDebts) {
  const TempJournal file("replay_bound.journal");
  const std::string& path = file.path;
  {
    Result<BillingJournal::Replay> r = Reopen(path);
    ASSERT_TRUE(r.ok()) << r.error();
    for (uint64_t i = 1; i <= 5; ++i)
      r->journal->Opened(i, "usage", "k" + std::to_string(i), "", 2);
  }
  ::testing::internal::CaptureStderr();
  MakeJournaled(path, 3);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("dropped 2 debts (4 units): more keys than Options::max_billing_debts (3)"),
            std::string::npos)
      << log;
  EXPECT_EQ(Count().billing_debts, 3u);
  EXPECT_EQ(Count().billing_debt_units_dropped_by_reason[ClientCounters::kUnrecorded], 4u);
}

// ----- a gateway restarted with its journal, in simulated time -----

int64_t Available(Node& node, const std::string& policy, const std::string& key) {
  RequestBuilder b;
  b.Inspect(1, policy, key);
  testing::NodeHarness::Caller caller(node);
  const wire::OpReply& op = caller.One(b);
  return op.results() ? op.results()->Get(0)->remaining() : -1;
}

TEST(BillingRestart, ReplayedDebtsArePaidToTheOwnersOfTheirKeysUnderTheNewRing) {
  const TempJournal file("restart.journal");
  const std::string& path = file.path;
  sim::SimCluster c(kPolicies);
  {
    // The first gateway's only member is gone: everything it admits is owed. Its own
    // scheduler, so that its timers go with it.
    sim::SimScheduler sched;
    sim::SimNetwork network(sched);
    ClientCore first(c.policies(), {"gone:1"}, sched, network.Gateway(), ClientCoreOptions{});
    Result<BillingJournal::Replay> r = BillingJournal::Open(path, ByHand());
    ASSERT_TRUE(r.ok()) << r.error();
    ASSERT_TRUE(first.RestoreBillingDebts(std::move(r).value()).ok());
    for (int i = 0; i < 20; ++i) {
      for (int n = 0; n < 3; ++n) {
        std::optional<client::Decision> d;
        first.DecideAsync({"usage", "acct-" + std::to_string(i)},
                          [&](client::Decision x) { d = std::move(x); });
        for (int t = 0; t < 1000 && !d; ++t) sched.RunFor(100);
        ASSERT_TRUE(d && d->allowed);
      }
    }
    ASSERT_EQ(first.counters().billing_debt_units, 60u);
  }

  // The second runs on two nodes that each answer only for the keys their ring gives them: a
  // debt sent anywhere else would be refused (and dropped).
  const std::vector<std::string> members = {"n0:1", "n1:1"};
  NodeOptions o;
  o.members = members;
  Node& n0 = c.AddNode("n0:1", o);
  Node& n1 = c.AddNode("n1:1", o);
  auto second = std::make_unique<ClientCore>(c.policies(), members, c.sched(),
                                             c.network().Gateway(), ClientCoreOptions{});
  Result<BillingJournal::Replay> r = BillingJournal::Open(path, ByHand());
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->debts.size(), 20u);
  ASSERT_TRUE(second->RestoreBillingDebts(std::move(r).value()).ok());
  c.sched().RunFor(3'000'000);
  const Counters paid = second->counters();
  EXPECT_EQ(paid.billing_debts, 0u);
  EXPECT_EQ(paid.billing_debt_units_paid, 60u);
  EXPECT_EQ(paid.billing_debt_units_dropped, 0u);
  const Ring ring(members);
  int on_n0 = 0;
  for (int i = 0; i < 20; ++i) {
    const std::string key = "acct-" + std::to_string(i);
    const bool mine = ring.Owner(key) == "n0:1";
    on_n0 += mine;
    EXPECT_EQ(Available(mine ? n0 : n1, "usage", key), 100'000 - 3) << key;
  }
  EXPECT_GT(on_n0, 0);
  EXPECT_LT(on_n0, 20);
  second.reset();
  EXPECT_TRUE(DebtsIn(path).empty());
}

}  // namespace
}  // namespace limiter
