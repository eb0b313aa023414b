// Durable persistence in limiter-bench. The pieces `limiter-bench node --durable` shares
// (which durability each run has, a temporary data dir, what a data dir holds on disk, the
// group commit's figures), and `limiter-bench durable-restart`: N durable keys written into a
// node, the node stopped (SIGTERM) and started again on the same directory, and what that
// costs: start-up time, the first read-through, disk bytes per key (after a clean stop, and
// after a full compaction), and whether a sample of the keys still carries its charge.
//
// Nothing here is shared between threads.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/node_load.h"
#include "limiter/status.h"
#include "protocol/node_access.h"
#include "server/durable_store.h"

namespace limiter::bench {

// One node run's durability: nullopt is memory-only (no data dir, a policy that is not
// durable).
using NodeDurability = std::optional<DurabilityMode>;
std::string_view NodeDurabilityName(const NodeDurability& durability);  // off, sync, interval
// `--durable`: "off", "sync" or "interval", or several of them separated by commas (each a
// run on a fresh node, in that order; repeats allowed). An error names the bad entry.
Result<std::vector<NodeDurability>> ParseDurabilityList(std::string_view list);

// A fresh, empty directory under `parent` (empty: $TMPDIR, else /tmp), removed with all it
// holds when destroyed.
class TempDataDir {
 public:
  static Result<std::unique_ptr<TempDataDir>> Make(const std::string& parent);
  ~TempDataDir();
  TempDataDir(const TempDataDir&) = delete;
  TempDataDir& operator=(const TempDataDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  explicit TempDataDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// What a RocksDB directory holds on disk, by kind of file.
struct DataDirBytes {
  int64_t sst = 0;    // *.sst: the tables
  int64_t wal = 0;    // *.log: the write-ahead log
  int64_t other = 0;  // MANIFEST, OPTIONS, the info LOG, ...
  int64_t sst_and_wal() const { return sst + wal; }
  int64_t total() const { return sst + wal + other; }
};
// The files directly in `dir` (RocksDB keeps no subdirectories); zeros when it is not there.
DataDirBytes MeasureDataDir(const std::string& dir);
// The file system `dir` is on: "ext2/3/4", "xfs", "btrfs", "tmpfs", "overlay", or its magic
// number in hex. An fsync on tmpfs costs nothing, which a report should say.
std::string FileSystemName(const std::string& dir);

// The group commit over one stretch of load, from the node's counters before and after it.
struct GroupCommitFigures {
  int64_t writes = 0;   // records queued
  int64_t commits = 0;  // batches written, one fsync each
  double commits_per_s = 0;
  double writes_per_commit = 0;  // 0 when nothing was committed
  int64_t backlog = 0;           // growth of the records queued and not yet taken by a commit
  double written_per_s = 0;      // records queued a second
  double taken_per_s = 0;        // records the committer took off the queue a second
  // The committer fell behind: the queue grew, by more than a tenth of what was written. The
  // load's checks/s is then more than the node can keep up.
  bool behind() const { return backlog > 0 && taken_per_s < 0.9 * written_per_s; }
};
GroupCommitFigures GroupCommit(const NodeDurableStats& before, const NodeDurableStats& after,
                               double seconds);

// What INSPECT says of a key after the restart, against what was written: `charged` keys
// had one check each before the stop; `fresh` ones were never written.
enum class KeyVerdict {
  kCharged,   // tracked, remaining one charge below a fresh key's
  kFresh,     // not tracked, a fresh key's remaining
  kMismatch,  // anything else: a lost or wrong state
};
KeyVerdict JudgeInspect(bool tracked, int64_t remaining, int64_t fresh_remaining);

// `limiter-bench durable-restart`.
struct DurableRestartOptions {
  NodeAccess access;     // as NodeBenchOptions::access
  std::string limiterd;  // empty: DefaultLimiterdPath()
  std::string policies;  // holds `policy`, which must be durable
  std::string policy = "bench_durable";
  uint64_t keys = 1'000'000;                    // written, one check each
  DurabilityMode mode = DurabilityMode::kSync;  // how the node writes them
  int64_t sync_interval_ms = 0;                 // 0: limiterd's default
  int batch = 1000;                             // the write phase: checks a frame
  int depth = 4;                                // frames in flight
  int sample = 1000;          // written keys verified after the restart (and as many never written)
  uint64_t seed = 1;          // of the sample's draws
  bool compact = true;        // also measure the directory after a full compaction
  std::string data_parent;    // where the data dir goes; empty: $TMPDIR or /tmp
  std::string keep_data_dir;  // non-empty: use this directory (made if missing), not removed
  bool json = false;
};

// Writes the report to `out` (text, or one JSON object), an error as one line to `err`.
// Returns 0, or 1 when a node could not be started, reached or stopped, the write phase
// failed, or the directory could not be made. Keys that fail verification are reported, not
// a failure.
int RunDurableRestart(const DurableRestartOptions& options, std::ostream& out, std::ostream& err);

}  // namespace limiter::bench
