#include "server/durable_store.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "protocol/rules.h"
#include "server/durable_record.h"
#include "server/policy_clock.h"

#ifdef LIMITER_WITH_ROCKSDB
#include <absl/container/flat_hash_map.h>
#include <rocksdb/compaction_filter.h>
#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/listener.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#endif

namespace limiter {

std::string_view DurabilityModeName(DurabilityMode mode) {
  return mode == DurabilityMode::kSync ? "sync" : "interval";
}

std::optional<DurabilityMode> ParseDurabilityMode(std::string_view name) {
  if (name == "sync") return DurabilityMode::kSync;
  if (name == "interval") return DurabilityMode::kInterval;
  return std::nullopt;
}

#ifndef LIMITER_WITH_ROCKSDB

bool DurableStore::Available() { return false; }

Result<std::unique_ptr<DurableStore>> DurableStore::Open(const PolicySet&, const Clock&,
                                                         DurableOptions options) {
  return Error{"data dir '" + options.data_dir +
               "': this limiterd was built without RocksDB (LIMITER_WITH_ROCKSDB=OFF), so it "
               "cannot keep durable policies; build it with librocksdb-dev installed"};
}

#else

namespace {

// Meta keys: 'm' + "format" (the format version, decimal) and 'm' + "seed" (the key-id
// seed's digest, hex). Records are under 'k' (durable_record.h).
const std::string kFormatKey = "mformat";
const std::string kSeedKey = "mseed";
constexpr int64_t kMetaKeys = 2;  // format and seed
// Interval mode: records one batch may hold before the replies of further writes wait for it.
constexpr size_t kMaxPending = 100'000;
// A batch whose write fails is tried again for this long, then given up (its replies end
// with an error). While the disk fails, Resume is tried this often.
constexpr int64_t kGiveUpMs = 1000;
constexpr int64_t kResumeEveryMs = 100;
// The longest Flush waits (a stop: never a hang on a disk that does not answer).
constexpr int64_t kFlushDeadlineMs = 10'000;
// Batches given up that Failed still knows of.
constexpr size_t kMaxFailedTracked = 4096;

std::string Hex(uint64_t v) {
  static const char* kDigits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = kDigits[v & 15];
  return s;
}

// RocksDB's own log, to limiterd's stderr (errors only), not to a LOG file in
// the data dir: on a full disk RocksDB's file logger fails, and Debian's RocksDB (7.8.3,
// built with assertions) then aborts the process on its next log line, inside the write
// that found the disk full.
class StderrLogger final : public rocksdb::Logger {
 public:
  StderrLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::ERROR_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    char line[1024];
    std::vsnprintf(line, sizeof(line), format, ap);
    std::fprintf(stderr, "limiterd: rocksdb: %s\n", line);
  }
};

// Recovery from a full disk is the store's (DB::Resume every 100 ms while failing), not
// RocksDB's own: that one (its SstFileManager's) waits until a memtable's worth (64 MB) is
// free and refuses Resume meanwhile ("Resource busy"), so a small volume would never recover.
class ResumeByHand final : public rocksdb::EventListener {
 public:
  void OnErrorRecoveryBegin(rocksdb::BackgroundErrorReason, rocksdb::Status,
                            bool* auto_recovery) override {
    *auto_recovery = false;
  }
};

// Shared by the store and its compaction filter.
struct Shared {
  const PolicySet& policies;
  const Clock& clock;
  std::unordered_map<std::string_view, int> index;  // policy name -> index
  std::atomic<int64_t> dropped{0};
  std::atomic<int64_t> expired{0};

  Shared(const PolicySet& p, const Clock& c) : policies(p), clock(c) {
    for (size_t i = 0; i < p.policies().size(); ++i) {
      index.emplace(p.policies()[i].name, static_cast<int>(i));
    }
  }
  const Policy* Find(std::string_view name) const {
    auto it = index.find(name);
    return it == index.end() ? nullptr : &policies.policies()[static_cast<size_t>(it->second)];
  }
};

// Drops records that carry nothing any more: fresh by now, or of a policy gone or changed.
class ExpiryFilter final : public rocksdb::CompactionFilter {
 public:
  explicit ExpiryFilter(Shared& shared) : shared_(shared) {}
  bool Filter(int, const rocksdb::Slice& key, const rocksdb::Slice& value, std::string*,
              bool*) const override {
    if (key.size() != 17 || key[0] != durable::kRecordPrefix) return false;
    const Result<durable::Record> decoded = durable::Decode(value.ToStringView());
    if (!decoded.ok()) return false;  // kept: Read reports it
    const durable::Record& r = *decoded;
    const Policy* p = shared_.Find(r.policy);
    if (p == nullptr || p->algorithm != r.algorithm) {
      shared_.dropped.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    const int64_t wall = shared_.clock.WallMs();
    Result<std::optional<KeyLimiter>> k =
        durable::Import(*p, r, PolicyNowMs(*p, shared_.clock), wall);
    if (!k) {  // the policy changed what the key means (its calendar), or a damaged record
      shared_.dropped.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    if (!*k) {
      shared_.expired.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    return false;
  }
  const char* Name() const override { return "limiter.expiry"; }

 private:
  Shared& shared_;
};

class RocksStore final : public DurableStore {
 public:
  RocksStore(const PolicySet& policies, const Clock& clock, DurableOptions options)
      : shared_(policies, clock), filter_(shared_), options_(std::move(options)) {}

  ~RocksStore() override {
    {
      MutexLock lock(mu_);
      stop_ = true;
    }
    cv_.NotifyAll();
    if (committer_.joinable()) committer_.join();
    if (db_) {
      // The memtable to an SST file: the next start need not replay the WAL. Not on a disk
      // that is failing (the flush would fail too; the WAL holds what was written).
      if (!failing_.load()) db_->Flush(rocksdb::FlushOptions());
      db_->Close();
    }
  }

  Status Start() {
    std::error_code ec;
    std::filesystem::create_directories(options_.data_dir, ec);
    if (ec) return Error{"cannot make the directory: " + ec.message()};
    rocksdb::Options o;
    o.create_if_missing = true;
    o.paranoid_checks = true;
    o.compaction_filter = &filter_;
    o.max_background_jobs = 2;
    o.info_log = std::make_shared<StderrLogger>();
    o.listeners.push_back(std::make_shared<ResumeByHand>());
    rocksdb::BlockBasedTableOptions table;
    table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
    o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
    rocksdb::DB* db = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(o, options_.data_dir, &db);
    if (!s.ok()) return Error{"cannot open its database: " + s.ToString()};
    db_.reset(db);
    if (Status checked = CheckFormat(); !checked.ok()) return checked;
    if (Status checked = CheckSeed(); !checked.ok()) return checked;
    committer_ = std::thread([this] { Commit(); });
    return Status::Ok();
  }

  Result<std::optional<KeyLimiter>> Read(int policy, const KeyId& id, int64_t now_ms) override {
    reads_.fetch_add(1, std::memory_order_relaxed);
    std::string value;
    const rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), durable::RecordKey(id), &value);
    if (s.IsNotFound()) return std::optional<KeyLimiter>();
    const Policy& p = shared_.policies.policies()[static_cast<size_t>(policy)];
    if (!s.ok()) return Fail("reading a key of policy '" + p.name + "': " + s.ToString());
    const Result<durable::Record> decoded = durable::Decode(value);
    if (!decoded.ok()) {
      return Fail("a record of policy '" + p.name + "' cannot be read: " + decoded.error());
    }
    const durable::Record& r = *decoded;
    if (r.policy != p.name || r.algorithm != p.algorithm) {
      // The policy file changed what the key means: its state does not carry over.
      shared_.dropped.fetch_add(1, std::memory_order_relaxed);
      return std::optional<KeyLimiter>();
    }
    Result<std::optional<KeyLimiter>> k = durable::Import(p, r, now_ms, shared_.clock.WallMs());
    if (!k) {
      // No state of the policy's algorithm (a rate changed since is converted, not refused):
      // damaged past RocksDB's checksums, or written by a broken build.
      shared_.dropped.fetch_add(1, std::memory_order_relaxed);
      return std::optional<KeyLimiter>();
    }
    if (*k) read_hits_.fetch_add(1, std::memory_order_relaxed);
    return k;
  }

  uint64_t Write(int policy, const KeyId& id, const DurableKeyName& name, const KeyLimiter& state,
                 int64_t now_ms) override {
    const Policy& p = shared_.policies.policies()[static_cast<size_t>(policy)];
    if (state.IsFresh(p.rate, now_ms)) return Erase(id);
    thread_local std::string value;
    durable::Encode(p, name, state, now_ms, shared_.clock.WallMs(), value);
    return Queue(id, value);
  }

  uint64_t Erase(const KeyId& id) override { return Queue(id, {}); }  // empty: a delete

  void ForEach(const std::function<bool(const KeyId&)>& pick,
               const std::function<void(const KeyId&, int, const KeyLimiter&)>& visit) override {
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    const int64_t wall = shared_.clock.WallMs();
    for (it->Seek(std::string(1, durable::kRecordPrefix));
         it->Valid() && it->key()[0] == durable::kRecordPrefix; it->Next()) {
      const std::optional<KeyId> id = durable::IdOfRecordKey(it->key().ToStringView());
      if (!id || !pick(*id)) continue;
      const Result<durable::Record> decoded = durable::Decode(it->value().ToStringView());
      if (!decoded.ok()) continue;
      const durable::Record& r = *decoded;
      const auto found = shared_.index.find(r.policy);
      if (found == shared_.index.end()) continue;
      const Policy& p = shared_.policies.policies()[static_cast<size_t>(found->second)];
      if (p.algorithm != r.algorithm) continue;
      Result<std::optional<KeyLimiter>> k =
          durable::Import(p, r, PolicyNowMs(p, shared_.clock), wall);
      if (k && *k) visit(*id, found->second, **k);
    }
  }

  bool Synced(uint64_t seq) const override {
    return seq <= finished_.load(std::memory_order_acquire) && !Failed(seq);
  }

  bool Failed(uint64_t seq) const override {
    // Without the lock for every batch after the last one given up (all of them, once the
    // disk recovered).
    if (seq == 0 || seq > max_failed_.load(std::memory_order_acquire)) return false;
    MutexLock lock(mu_);
    return failed_.count(seq) != 0;
  }

  void WhenSynced(uint64_t seq, std::function<void()> done) override {
    {
      MutexLock lock(mu_);
      if (seq > finished_.load(std::memory_order_relaxed)) {
        waiters_.emplace_back(seq, std::move(done));
        return;
      }
    }
    done();
  }

  void WaitSynced(uint64_t seq) override {
    if (seq <= finished_.load(std::memory_order_acquire)) return;
    MutexLock lock(mu_);
    synced_cv_.Wait(lock, [&] {
      mu_.AssertHeld();
      return finished_.load() >= seq || stop_;
    });
  }

  void Flush() override {
    MutexLock lock(mu_);
    const uint64_t open = open_seq_.load();
    const uint64_t target = pending_count_.load() > 0 ? open : open - 1;
    flush_ = true;
    cv_.NotifyAll();
    // Bounded: a batch is written or given up within kGiveUpMs, but a stop must never hang
    // on a disk that does not answer at all.
    const bool finished =
        synced_cv_.WaitFor(lock, std::chrono::milliseconds(kFlushDeadlineMs), [&] {
          mu_.AssertHeld();
          return finished_.load() >= target || stop_;
        });
    if (!finished) {
      std::cerr << "limiterd: data dir '" << options_.data_dir << "': a flush did not finish "
                << "within " << kFlushDeadlineMs << " ms; going on without it\n";
    }
  }

  Status Writable() const override {
    if (!failing_.load(std::memory_order_acquire)) return Status::Ok();
    MutexLock lock(mu_);
    return Error{"durable store '" + options_.data_dir + "' cannot write (" + failure_ +
                 "); durable keys are refused until it can again"};
  }

  DurabilityMode mode() const override { return options_.mode; }
  const std::string& data_dir() const override { return options_.data_dir; }

  Stats stats() const override {
    Stats s;
    s.writes = writes_.load(std::memory_order_relaxed);
    s.commits = commits_.load(std::memory_order_relaxed);
    s.reads = reads_.load(std::memory_order_relaxed);
    s.read_hits = read_hits_.load(std::memory_order_relaxed);
    s.errors = errors_.load(std::memory_order_relaxed);
    s.dropped = shared_.dropped.load(std::memory_order_relaxed);
    s.expired = shared_.expired.load(std::memory_order_relaxed);
    s.pending = pending_count_.load(std::memory_order_relaxed);
    s.failing = failing_.load(std::memory_order_relaxed);
    s.failed_batches = failed_batches_.load(std::memory_order_relaxed);
    s.resumes = resumes_.load(std::memory_order_relaxed);
    uint64_t keys = 0;
    if (db_->GetIntProperty("rocksdb.estimate-num-keys", &keys)) {
      s.live_keys = std::max<int64_t>(0, static_cast<int64_t>(keys) - kMetaKeys);
    }
    std::error_code ec;
    for (const auto& f : std::filesystem::directory_iterator(options_.data_dir, ec)) {
      const std::string ext = f.path().extension().string();
      if (ext == ".sst" || ext == ".log") {
        std::error_code size_ec;
        const auto size = f.file_size(size_ec);
        if (!size_ec) s.disk_bytes += static_cast<int64_t>(size);
      }
    }
    return s;
  }

  void CompactAll() override {
    Flush();
    rocksdb::CompactRangeOptions o;
    o.bottommost_level_compaction = rocksdb::BottommostLevelCompaction::kForce;
    db_->Flush(rocksdb::FlushOptions());
    db_->CompactRange(o, nullptr, nullptr);
  }

 private:
  Error Fail(std::string what) {
    errors_.fetch_add(1, std::memory_order_relaxed);
    return Error{"durable store '" + options_.data_dir + "': " + what};
  }

  // One more record (value; empty: a delete) in the open batch, in its key's shard. Returns
  // the batch the write's reply must wait for: sync, always this one; interval, none (0),
  // unless the batch holds kMaxPending records already (the disk is behind): then the reply
  // waits for it, and the committer is told to write it now. So what is queued, and what a
  // crash can take, stays bounded however fast writes come.
  uint64_t Queue(const KeyId& id, std::string_view value) {
    writes_.fetch_add(1, std::memory_order_relaxed);
    Shard& shard = shards_[(id.lo ^ id.hi) % kShards];
    uint64_t seq = 0;
    int64_t queued = 0;
    {
      MutexLock lock(shard.mu);
      auto [it, added] = shard.pending.try_emplace(id);
      it->second.assign(value);
      // Read under the shard's lock: the committer moves it on with every shard locked, so
      // the record is in batch `seq`.
      seq = open_seq_.load(std::memory_order_relaxed);
      if (added) queued = pending_count_.fetch_add(1, std::memory_order_relaxed) + 1;
    }
    if (options_.mode == DurabilityMode::kSync) {
      if (queued == 1) {
        MutexLock lock(mu_);  // the committer checks for work with mu_ held
        cv_.NotifyOne();
      }
      return seq;
    }
    if (queued < static_cast<int64_t>(kMaxPending)) return 0;
    MutexLock lock(mu_);
    if (!flush_) {
      flush_ = true;
      cv_.NotifyOne();
    }
    return seq;
  }

  // Takes every shard's records as the batch `seq` (every shard locked, in order, while the
  // open batch moves on) into taken_, and returns how many there are. Not checked by the
  // lock analysis: it holds a whole array of locks, which it cannot name.
  size_t TakeBatch(uint64_t* seq) LIMITER_NO_THREAD_SAFETY_ANALYSIS {
    for (Shard& shard : shards_) shard.mu.Lock();
    *seq = open_seq_.fetch_add(1, std::memory_order_relaxed);
    size_t n = 0;
    for (size_t i = 0; i < kShards; ++i) {
      std::swap(taken_[i], shards_[i].pending);  // the shard gets the last batch's, emptied
      n += taken_[i].size();
    }
    pending_count_.store(0, std::memory_order_relaxed);
    for (Shard& shard : shards_) shard.mu.Unlock();
    return n;
  }

  Status CheckFormat() {
    std::string value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kFormatKey, &value);
    if (s.ok()) {
      if (value != std::to_string(kFormatVersion)) {
        return Error{"written in format " + value +
                     " by another limiterd version; this one reads format " +
                     std::to_string(kFormatVersion)};
      }
      return Status::Ok();
    }
    if (!s.IsNotFound()) return Error{"cannot read its format: " + s.ToString()};
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
    it->SeekToFirst();
    if (it->Valid()) {
      return Error{"holds a database that limiterd did not write (it has no format record)"};
    }
    rocksdb::WriteOptions w;
    w.sync = true;
    s = db_->Put(w, kFormatKey, std::to_string(kFormatVersion));
    if (!s.ok()) return Error{"cannot write its format: " + s.ToString()};
    return Status::Ok();
  }

  // Records made under another key-id seed (the cluster secret changed) move to this one's
  // ids, found again from their strings.
  Status CheckSeed() {
    const std::string seed = Hex(KeyIdSeedDigest());
    std::string value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), kSeedKey, &value);
    if (!s.ok() && !s.IsNotFound()) return Error{"cannot read its key-id seed: " + s.ToString()};
    if (s.ok() && value == seed) return Status::Ok();
    rocksdb::WriteBatch batch;
    int64_t moved = 0, dropped = 0;
    if (s.ok()) {
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
      for (it->Seek(std::string(1, durable::kRecordPrefix));
           it->Valid() && it->key()[0] == durable::kRecordPrefix; it->Next()) {
        const Result<durable::Record> decoded = durable::Decode(it->value().ToStringView());
        if (!decoded.ok()) {
          return Error{"a record cannot be read while moving to a new key-id seed: " +
                       decoded.error()};
        }
        const durable::Record& r = *decoded;
        const Policy* p = shared_.Find(r.policy);
        batch.Delete(it->key());
        if (p == nullptr || r.kind == DurableKeyName::kIdOnly) {
          ++dropped;
          continue;
        }
        const KeyId id = r.kind == DurableKeyName::kLimit ? protocol::LimitId(*p, r.key, r.tenant)
                                                          : protocol::AncestorId(*p, r.key);
        batch.Put(durable::RecordKey(id), it->value());
        ++moved;
      }
      if (!it->status().ok()) return Error{"cannot read its records: " + it->status().ToString()};
      std::cerr << "limiterd: data dir '" << options_.data_dir
                << "' was written under another key-id seed (the cluster secret changed): " << moved
                << " records moved to the new ids, " << dropped
                << " dropped (handed over by id alone, or of a policy that is gone)\n";
      shared_.dropped.fetch_add(dropped, std::memory_order_relaxed);
    }
    batch.Put(kSeedKey, seed);
    rocksdb::WriteOptions w;
    w.sync = true;
    s = db_->Write(w, &batch);
    if (!s.ok()) return Error{"cannot write its key-id seed: " + s.ToString()};
    return Status::Ok();
  }

  // Marks the store failing (or not), with why; logged when it changes.
  void SetFailing(const rocksdb::Status& s) {
    {
      MutexLock lock(mu_);
      failure_ = s.ToString();
    }
    if (!failing_.exchange(true)) {
      std::cerr << "limiterd: data dir '" << options_.data_dir << "': cannot write ("
                << s.ToString() << "); ops on durable keys fail with StoreError until it can\n";
    }
  }

  // One attempt to leave the failing state: RocksDB's Resume clears its background error
  // (a full disk: once there is space again) and makes the database writable.
  bool TryResume() {
    const rocksdb::Status s = db_->Resume();
    if (!s.ok()) {
      MutexLock lock(mu_);
      failure_ = s.ToString();
      return false;
    }
    if (failing_.exchange(false)) {
      resumes_.fetch_add(1, std::memory_order_relaxed);
      std::cerr << "limiterd: data dir '" << options_.data_dir
                << "': writable again; durable keys are served\n";
    }
    return true;
  }

  // The batch `seq` is finished: written (ok) or given up. Its replies are released; those of
  // a batch given up see Failed(seq) and end with an error rather than an acknowledgement.
  void Finish(uint64_t seq, bool ok) LIMITER_REQUIRES(mu_) {
    std::vector<std::function<void()>> ready;
    if (ok) {
      commits_.fetch_add(1, std::memory_order_relaxed);
    } else {
      failed_batches_.fetch_add(1, std::memory_order_relaxed);
      failed_.insert(seq);
      // Bounded: a connection asks about a batch only until its wake-up (below) has run.
      while (failed_.size() > kMaxFailedTracked) failed_.erase(failed_.begin());
      max_failed_.store(seq, std::memory_order_release);
    }
    finished_.store(seq, std::memory_order_release);
    auto keep = std::partition(waiters_.begin(), waiters_.end(),
                               [&](const auto& w) { return w.first > seq; });
    for (auto it = keep; it != waiters_.end(); ++it) ready.push_back(std::move(it->second));
    waiters_.erase(keep, waiters_.end());
    synced_cv_.NotifyAll();
    mu_.Unlock();  // the replies' wake-ups take other locks
    for (auto& done : ready) done();
    mu_.Lock();
  }

  // Records of batches given up, kept to be written once the disk takes writes again (each
  // key's latest: a later write of the key replaces it). With mu_ held.
  void KeepUnwritten() LIMITER_REQUIRES(mu_) {
    for (Pending& taken : taken_) {
      for (auto& [id, value] : taken) unwritten_[id] = std::move(value);
      taken.clear();
    }
  }

  // The committer: writes what was queued as one batch with one fsync, then releases the
  // replies waiting for it. In sync mode as soon as anything is queued (what comes in during
  // a sync waits for the next: group commit); in interval mode every interval_ms.
  //
  // A write that fails (a full disk, an I/O error) makes the store failing: new ops on durable
  // keys are refused at once (Unavailable), the batch is tried again (with Resume) for up to
  // kGiveUpMs and then given up: its replies end with an error, never an acknowledgement of
  // what is not written, and its records are kept to be written after recovery. While failing,
  // Resume is tried every kResumeEveryMs and batches are given up at once.
  void Commit() {
    MutexLock lock(mu_);
    const auto interval = std::chrono::milliseconds(std::max<int64_t>(1, options_.interval_ms));
    const auto resume_every = std::chrono::milliseconds(kResumeEveryMs);
    int64_t failures = 0;
    for (;;) {
      const auto work = [&] {
        mu_.AssertHeld();
        return stop_ || flush_ || pending_count_.load() > 0;
      };
      const auto asked = [&] {
        mu_.AssertHeld();
        return stop_ || flush_;
      };
      if (failing_.load()) {
        cv_.WaitFor(lock, resume_every, asked);
      } else if (options_.mode == DurabilityMode::kSync) {
        cv_.Wait(lock, work);
      } else {
        cv_.WaitFor(lock, interval, asked);
      }
      flush_ = false;
      if (failing_.load() && !stop_) {
        lock.Unlock();
        TryResume();
        lock.Lock();
      }
      if (pending_count_.load() == 0 && (unwritten_.empty() || failing_.load())) {
        synced_cv_.NotifyAll();
        if (stop_) {
          if (!unwritten_.empty()) {
            std::cerr << "limiterd: data dir '" << options_.data_dir << "': stopping with "
                      << unwritten_.size() << " changes not written (the disk failed)\n";
          }
          return;
        }
        continue;
      }
      lock.Unlock();  // shards before mu_: writers take them in that order
      uint64_t seq = 0;
      TakeBatch(&seq);
      lock.Lock();
      for (auto& [id, value] : unwritten_) {  // older than anything taken now
        taken_[(id.lo ^ id.hi) % kShards].try_emplace(id, std::move(value));
      }
      unwritten_.clear();
      if (failing_.load()) {
        KeepUnwritten();
        Finish(seq, false);
        continue;
      }
      lock.Unlock();
      rocksdb::WriteBatch batch;
      for (Pending& taken : taken_) {
        for (const auto& [id, value] : taken) {
          if (value.empty()) {
            batch.Delete(durable::RecordKey(id));
          } else {
            batch.Put(durable::RecordKey(id), value);
          }
        }
      }
      rocksdb::WriteOptions w;
      w.sync = true;
      rocksdb::Status s = db_->Write(w, &batch);
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(kGiveUpMs);
      while (!s.ok()) {
        errors_.fetch_add(1, std::memory_order_relaxed);
        SetFailing(s);
        if (failures++ % 100 == 0) {
          std::cerr << "limiterd: data dir '" << options_.data_dir
                    << "': a commit failed: " << s.ToString() << '\n';
        }
        {
          MutexLock wait(mu_);
          const bool stopping = cv_.WaitFor(wait, resume_every, [&] {
            mu_.AssertHeld();
            return stop_;
          });
          if (stopping) break;
        }
        if (std::chrono::steady_clock::now() >= give_up) break;
        if (TryResume()) s = db_->Write(w, &batch);
      }
      lock.Lock();
      if (!s.ok()) {
        // Given up: its replies end with an error; its records wait for the disk.
        KeepUnwritten();
        Finish(seq, false);
        continue;
      }
      for (Pending& taken : taken_) taken.clear();
      Finish(seq, true);
    }
  }

  Shared shared_;
  ExpiryFilter filter_;
  const DurableOptions options_;
  std::unique_ptr<rocksdb::DB> db_;
  std::thread committer_;

  mutable Mutex mu_;
  CondVar cv_;         // the committer waits for work
  CondVar synced_cv_;  // WaitSynced and Flush wait for a commit
  // The batch being filled: each key's last record (empty: a delete), so that a key written
  // many times between two commits is written once.
  struct IdHash {
    size_t operator()(const KeyId& id) const { return static_cast<size_t>(id.lo ^ (id.hi >> 7)); }
  };
  using Pending = absl::flat_hash_map<KeyId, std::string, IdHash>;
  // Writers meet only when their keys share one of kShards shards.
  static constexpr size_t kShards = 64;
  struct alignas(64) Shard {
    Mutex mu;
    Pending pending LIMITER_GUARDED_BY(mu);
  };
  std::array<Shard, kShards> shards_;
  std::array<Pending, kShards> taken_;     // the committer's: the batch being written
  std::atomic<int64_t> pending_count_{0};  // keys queued over the shards
  std::atomic<uint64_t> open_seq_{1};      // the batch being filled; moved with every shard locked
  bool flush_ LIMITER_GUARDED_BY(mu_) = false;
  bool stop_ LIMITER_GUARDED_BY(mu_) = false;
  std::vector<std::pair<uint64_t, std::function<void()>>> waiters_ LIMITER_GUARDED_BY(mu_);
  // Every batch up to this one is finished: durable, or given up (then in failed_).
  std::atomic<uint64_t> finished_{0};
  std::set<uint64_t> failed_ LIMITER_GUARDED_BY(mu_);  // batches given up (the latest ones)
  std::atomic<uint64_t> max_failed_{0};                // the latest batch given up; 0: none
  Pending unwritten_ LIMITER_GUARDED_BY(mu_);          // records of batches given up
  std::atomic<bool> failing_{false};  // the last write failed and no Resume succeeded since
  std::string failure_ LIMITER_GUARDED_BY(mu_);  // why the last write failed

  std::atomic<int64_t> writes_{0}, commits_{0}, reads_{0}, read_hits_{0}, errors_{0};
  std::atomic<int64_t> failed_batches_{0}, resumes_{0};
};

}  // namespace

bool DurableStore::Available() { return true; }

Result<std::unique_ptr<DurableStore>> DurableStore::Open(const PolicySet& policies,
                                                         const Clock& clock,
                                                         DurableOptions options) {
  const std::string dir = options.data_dir;
  if (dir.empty()) return Error{"no data dir given"};
  auto store = std::make_unique<RocksStore>(policies, clock, std::move(options));
  if (Status started = store->Start(); !started.ok()) {
    return Error{"data dir '" + dir + "': " + started.error()};
  }
  return std::unique_ptr<DurableStore>(std::move(store));
}

#endif  // LIMITER_WITH_ROCKSDB

Result<std::unique_ptr<DurableStore>> OpenDurableStore(const PolicySet& policies,
                                                       const Clock& clock, DurableOptions options) {
  const Policy* durable = nullptr;
  for (const Policy& p : policies.policies()) {
    if (p.durable) {
      durable = &p;
      break;
    }
  }
  if (durable == nullptr) return std::unique_ptr<DurableStore>();
  const std::string where = policies.source() + ":" + std::to_string(durable->line);
  if (!DurableStore::Available()) {
    return Error{where + ": policy '" + durable->name +
                 "' is durable, and this limiterd was built without RocksDB "
                 "(LIMITER_WITH_ROCKSDB=OFF): build it with librocksdb-dev installed, or make "
                 "the policy durable: false"};
  }
  if (options.data_dir.empty()) {
    return Error{where + ": policy '" + durable->name +
                 "' is durable: give --data-dir DIR (or data_dir: in --config) for its keys "
                 "to survive a restart, or make it durable: false"};
  }
  return DurableStore::Open(policies, clock, std::move(options));
}

}  // namespace limiter
