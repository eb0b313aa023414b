// DurableStore: the RocksDB database under --data-dir that keeps the keys of `durable`
// policies across restarts. The in-memory Store stays the one that decides; this is a log of
// its durable keys' states, written after every change and read back the first time a key is
// used after a start (read-through: the node starts in the time RocksDB takes to open).
//
// What is written. One record per key, under its KeyId (the ring slot first, so one slot's
// keys are adjacent): a format version, the algorithm, the policy's name, the key's strings
// (to find it again under another key-id seed), the wall-clock time of the write, and the
// state's fields (state_transfer.h) as offsets from the policy's clock at the write. Read
// back, they are placed on the node's clock as if the wall-clock time between write and read
// had passed (none, if the wall clock went back: nothing refills early). A calendar policy's
// clock is the wall clock itself (common/calendar.h), so its times are written as they are. A
// state that is fresh again (a window passed, a bucket full) is deleted; records that became
// fresh while nobody looked are dropped at compaction (a compaction filter), so the database
// holds only live keys.
//
// When a change is durable (DurabilityMode):
//   - kSync: Write returns a sequence number, and the reply of the op that wrote it must wait
//     until Synced(seq) (WhenSynced): its batch is in the WAL and fsynced. One committer
//     thread writes everything queued since its last sync as one batch with one fsync (group
//     commit), so the cost is one fsync per batch, not per op.
//   - kInterval: replies do not wait; the committer writes and fsyncs what was queued every
//     interval_ms. A crash loses at most the charges of the last interval (and of the sync
//     in progress). When the disk is behind (a batch reaches its bound of records before its
//     interval is up), replies wait for that batch as in kSync, so the queue never grows
//     without bound.
// Within a batch each key is written once, with its last state.
//
// A disk that fails (full, an I/O error): the first failed write makes the store failing.
// Ops on durable keys are then refused with StoreError at once (Unavailable), so gateways
// fall back by class; the batch is tried again for up to 1 s and then given up: the replies
// waiting for it end with an error (Failed), never an acknowledgement of what was not
// written, and its records are kept and written once the disk takes writes again. The store
// calls RocksDB's DB::Resume every 100 ms while failing and serves durable keys again as soon
// as it succeeds (space is back), without a restart. A stop (Flush, the destructor) never
// waits on the disk for more than its deadline.
//
// Bad state stops the node at start (Open's error names the directory): a database RocksDB
// cannot open or finds corrupt, one locked by another process, one not written by limiterd,
// or one of another format version. A record that cannot be read later is an error reply for
// its key, counted; never a silent reset. A record of a policy that is gone, or whose
// algorithm or calendar changed, is dropped and counted (the policy file changed what the key
// means). A limit, burst or window changed since the write converts the state to the new rate
// (durable_record.h): a lowered limit keeps an exhausted key exhausted, never fresh.
//
// Thread-safety: every function may be called from any thread. Write and Erase must be
// called with the key's stripe locked, which keeps one key's writes in order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/key_limiter.h"
#include "common/policy.h"
#include "limiter/status.h"
#include "protocol/key_id.h"
#include "server/durable_record.h"

namespace limiter {

enum class DurabilityMode : uint8_t { kSync, kInterval };
std::string_view DurabilityModeName(DurabilityMode mode);
std::optional<DurabilityMode> ParseDurabilityMode(std::string_view name);

struct DurableOptions {
  std::string data_dir;  // empty: no database (a node with durable policies refuses to start)
  DurabilityMode mode = DurabilityMode::kSync;
  int64_t interval_ms = 100;  // kInterval: how often what was queued is written and synced
};

class DurableStore {
 public:
  // The format this build reads and writes (records and the database's meta).
  static constexpr uint32_t kFormatVersion = durable::kFormatVersion;

  // Opens the database in options.data_dir, making it if the directory holds none. Records
  // written under another key-id seed are moved to this one's ids (those handed over by id
  // alone cannot be, and are dropped and counted). An error naming the directory when it
  // cannot be used (see above), or when this build has no RocksDB.
  static Result<std::unique_ptr<DurableStore>> Open(const PolicySet& policies, const Clock& clock,
                                                    DurableOptions options);
  // Whether this build can open a database at all.
  static bool Available();

  virtual ~DurableStore() = default;

  // The key's state as it was last written, on the policy's clock reading now_ms; nullopt
  // when there is none or it is fresh by now. An error when the record cannot be read.
  virtual Result<std::optional<KeyLimiter>> Read(int policy, const KeyId& id, int64_t now_ms) = 0;
  // Queues the key's state (a fresh one is an erase); returns the batch the reply of the op
  // that wrote it must wait for (Synced), or 0 when it need not wait: interval mode, unless
  // the batch being filled is full (the disk is behind). With the key's stripe locked.
  virtual uint64_t Write(int policy, const KeyId& id, const DurableKeyName& name,
                         const KeyLimiter& state, int64_t now_ms) = 0;
  virtual uint64_t Erase(const KeyId& id) = 0;
  // Calls visit(id, policy, state) for each record whose id pick accepts, with its state as
  // Read would give it now; records fresh by now, unreadable or of a policy changed are
  // skipped. Sees what is written, not what is queued. For the hand-off of keys on disk only.
  virtual void ForEach(const std::function<bool(const KeyId&)>& pick,
                       const std::function<void(const KeyId&, int, const KeyLimiter&)>& visit) = 0;

  // Whether the batch `seq` (and everything before it) is finished and durable.
  virtual bool Synced(uint64_t seq) const = 0;
  // Whether the batch `seq` was given up (its write failed for kGiveUpMs, or the store was
  // failing): the replies that waited for it must end with an error, not an acknowledgement.
  virtual bool Failed(uint64_t seq) const = 0;
  // Runs `done` once the batch `seq` is finished, durable or given up (Synced or Failed), on
  // the committer's thread (or now, on the caller's).
  virtual void WhenSynced(uint64_t seq, std::function<void()> done) = 0;
  // Blocks until the batch `seq` is finished (Synced or Failed): for in-process callers.
  virtual void WaitSynced(uint64_t seq) = 0;
  // Writes and syncs everything queued, and returns when it is finished (durable, or given
  // up on a failing disk), or after a deadline of 10 s: a stop never hangs on the disk.
  virtual void Flush() = 0;
  // Ok, or why ops on durable keys must be refused now (StoreError): the last write failed (a
  // full disk, an I/O error) and the database has not resumed since. The store tries to
  // resume by itself (RocksDB's DB::Resume) every 100 ms while failing.
  virtual Status Writable() const = 0;

  virtual DurabilityMode mode() const = 0;
  virtual const std::string& data_dir() const = 0;

  struct Stats {
    int64_t writes = 0;          // records queued (puts and deletes)
    int64_t commits = 0;         // batches written (each one fsync)
    int64_t reads = 0;           // read-throughs
    int64_t read_hits = 0;       // that found a live record
    int64_t errors = 0;          // records that could not be read, failed commits
    int64_t dropped = 0;         // records of a policy gone or changed, or not re-keyable
    int64_t expired = 0;         // fresh records dropped at compaction
    int64_t pending = 0;         // records queued, not yet written
    bool failing = false;        // writes fail now (Unavailable): durable keys are refused
    int64_t failed_batches = 0;  // batches given up: their replies ended with an error
    int64_t resumes = 0;         // times the database became writable again after failing
    int64_t live_keys = 0;       // RocksDB's estimate (counts overwrites not yet compacted)
    int64_t disk_bytes = 0;      // SST and WAL files
  };
  virtual Stats stats() const = 0;
  // Compacts the whole database (drops what expired); for tests and the benchmark.
  virtual void CompactAll() = 0;
};

// What limiterd opens at start: null when no policy is durable; an error when some is and no
// data dir is given (naming the policy), or when the database cannot be opened.
Result<std::unique_ptr<DurableStore>> OpenDurableStore(const PolicySet& policies,
                                                       const Clock& clock, DurableOptions options);

}  // namespace limiter
