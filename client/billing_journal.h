// BillingJournal: the file that keeps a gateway's billing debts (fallbacks.h) across a crash
// of its process. Every change to a debt is one record appended with write(2) before the
// decision that caused it is returned, so a process killed with SIGKILL loses nothing it
// admitted. A background thread fdatasyncs the file at most every sync interval (100 ms by
// default) when something was appended, so a machine crash (power loss, kernel panic) loses
// at most the changes of the last interval plus one sync; with no interval, whatever the OS
// had not yet written back. A clean shutdown syncs.
//
// Open replays the file: the debts not yet paid, with the names they were written with (the
// owner that replays them routes each by its ring of that time). A torn last record (the
// process killed while writing it, or a machine crash's zero-filled tail) is ignored and cut
// off; anything else malformed is an error naming the file and the offset. The file is
// rewritten to the live debts (a temp file, fdatasync, rename, fsync of the directory) when
// it is compact_factor times larger than they need and at least compact_min_bytes. A rewrite
// goes to the file the path names (a symlink to the journal stays one) through
// "<file>.tmp", which is created new (O_EXCL | O_NOFOLLOW): anything already there is an
// error naming it, never followed or reused.
//
// The journal and its temp file are 0600 (they hold key names); an existing journal of wider
// mode is tightened to 0600, with a warning on stderr.
//
// One writer: Open holds an exclusive flock on the journal file itself for as long as it is
// open, so every path to it (a symlink, a hard link) is the same writer; a rewrite's new file
// is locked before it is renamed into place. A second Open gets an error naming the pid that
// holds the lock (as /proc/locks lists it).
//
// Format, version 1, little endian:
//   header  "LIMBJRNL", u32 version, u32 check (xxh3-64 of the 12 bytes before it, low half)
//   record  u32 check (xxh3-64 of the bytes after it, low half), u16 body length, body:
//           u8 type, varint number (the debt's, unique within the file), then
//             open:       varint units, varint policy length, policy, varint key length, key,
//                         varint tenant length, tenant (the names as the policy file had them)
//             add, pay:   varint units (at least 1; a pay at most what is owed)
//             close:      u8 reason (paid, refused)
// A record is at most kMaxRecordBytes: names and keys are bounded by common/limits.h.
//
// Thread-safety: any thread. The caller serializes the appends that must keep their order
// (Fallbacks appends under the lock that orders its debt changes); the journal's own mutex
// guards the file against its background thread. Owned by Fallbacks; owns its thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/limits.h"
#include "common/mutex.h"
#include "limiter/status.h"

namespace limiter {

// One unpaid debt as a journal holds it.
struct JournalDebt {
  uint64_t number = 0;  // names it in the file's later records
  std::string policy, key, tenant;
  int64_t units = 0;
  friend bool operator==(const JournalDebt&, const JournalDebt&) = default;
};

struct BillingJournalOptions {
  // fdatasync at most this often, when something was appended; 0: never (the OS writes back).
  int64_t sync_interval_ms = 100;
  // Rewrite when the file is this many times what the live debts need, and at least min bytes.
  int64_t compact_factor = 4;
  int64_t compact_min_bytes = int64_t{1} << 20;
  // A thread syncs and compacts (once Start is called); false: the owner does (tests).
  bool background = true;
};

class BillingJournal {
 public:
  static constexpr uint32_t kVersion = 1;
  static constexpr size_t kHeaderBytes = 16;
  static constexpr size_t kMaxRecordBytes =
      4 + 2 + 1 + 10 + 10 + (2 + kMaxNameBytes) + 2 * (2 + kMaxKeyBytes);
  // The most units one debt can owe (a journal that says more is malformed).
  static constexpr int64_t kMaxUnits = int64_t{1} << 60;

  enum class CloseReason : uint8_t { kPaid = 0, kRefused = 1 };

  struct Replay {
    std::unique_ptr<BillingJournal> journal;
    std::vector<JournalDebt> debts;  // unpaid, in the order they were first owed
    std::string torn;  // a torn last record that was cut off, for a log line; empty: none
  };
  // Takes the file's lock (creating the file when missing), reads its debts and leaves it
  // ready for appends. The error names the file, and the offset of a malformed record.
  static Result<Replay> Open(const std::string& path, BillingJournalOptions options = {});
  ~BillingJournal();
  BillingJournal(const BillingJournal&) = delete;
  BillingJournal& operator=(const BillingJournal&) = delete;

  // Appends. A failed write is counted and logged; the file then stops taking appends until
  // the next rewrite, which writes every debt from the caller's memory again.
  void Opened(uint64_t number, std::string_view policy, std::string_view key,
              std::string_view tenant, int64_t units);
  void Added(uint64_t number, int64_t units);
  void Paid(uint64_t number, int64_t units);
  void Closed(uint64_t number, CloseReason reason);

  // A rewrite, in two steps so that the debts' owner holds its lock for the first only.
  // Under the lock that orders the appends: the image of every live debt; appends from then
  // on also go to the new file. Then, without that lock, FinishRewrite writes the new file
  // and switches to it. Begin is false when another rewrite is under way; Finish says why it
  // failed (counted and logged too).
  class Image {
   public:
    void Add(uint64_t number, std::string_view policy, std::string_view key,
             std::string_view tenant, int64_t units);

   private:
    friend class BillingJournal;
    std::string bytes_;
    std::vector<std::pair<uint64_t, uint32_t>> sizes_;  // number, bytes of its record
  };
  bool BeginRewrite(Image image);
  Status FinishRewrite();

  // Starts the background thread (when options.background): it syncs, and calls `compact`
  // (which calls BeginRewrite, then FinishRewrite) when a rewrite is due. Once.
  void Start(std::function<void()> compact);
  // fdatasync now, when something was appended since the last one.
  void SyncNow();
  bool RewriteDue() const;

  const std::string& path() const { return path_; }
  uint64_t file_bytes() const;
  uint64_t errors() const { return errors_.load(std::memory_order_relaxed); }
  uint64_t rewrites() const { return rewrites_.load(std::memory_order_relaxed); }

 private:
  BillingJournal(std::string path, std::string file_path, BillingJournalOptions options, int fd,
                 uint64_t file_bytes);
  void Append(const char* data, size_t size, uint64_t number, int64_t live_delta_bytes);
  bool RewriteDueLocked() const LIMITER_REQUIRES(mu_);
  void Fail(const std::string& what);  // counts and logs an I/O failure
  void Run();

  const std::string path_;       // as given, for messages
  const std::string file_path_;  // the file it names (symlinks resolved at Open): rewrites
  const BillingJournalOptions options_;
  std::atomic<uint64_t> errors_{0}, rewrites_{0};

  mutable Mutex mu_;
  int fd_ LIMITER_GUARDED_BY(mu_);  // switched by Finish; holds the flock
  uint64_t file_bytes_ LIMITER_GUARDED_BY(mu_);
  bool unsynced_ LIMITER_GUARDED_BY(mu_) = false;
  bool broken_ LIMITER_GUARDED_BY(mu_) = false;  // a write failed: appends wait for a rewrite
  std::unordered_map<uint64_t, uint32_t> live_ LIMITER_GUARDED_BY(mu_);  // open record sizes
  uint64_t live_bytes_ LIMITER_GUARDED_BY(mu_) = 0;
  bool rewriting_ LIMITER_GUARDED_BY(mu_) = false;
  // The new file's parts.
  std::string image_ LIMITER_GUARDED_BY(mu_);
  std::string captured_ LIMITER_GUARDED_BY(mu_);
  int64_t next_rewrite_try_ms_ LIMITER_GUARDED_BY(mu_) = 0;  // (after a failure)
  bool stopping_ LIMITER_GUARDED_BY(mu_) = false;
  CondVar cv_;
  // Held over an fdatasync and over closing a replaced file; taken before mu_, never after.
  Mutex sync_mu_;
  std::function<void()> compact_;
  std::thread thread_;
};

}  // namespace limiter
