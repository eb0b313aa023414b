#include "bench/durable_bench.h"

#include <linux/magic.h>
#include <stdlib.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <unordered_set>

#include "common/clock.h"
#include "common/policy_file.h"
#include "protocol/auth.h"
#include "protocol/key_id.h"
#include "protocol/request_builder.h"
#include "protocol/wire.h"

namespace limiter::bench {

std::string_view NodeDurabilityName(const NodeDurability& durability) {
  return durability ? DurabilityModeName(*durability) : "off";
}

Result<std::vector<NodeDurability>> ParseDurabilityList(std::string_view list) {
  std::vector<NodeDurability> runs;
  while (true) {
    const size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    if (name == "off") {
      runs.emplace_back(std::nullopt);
    } else if (std::optional<DurabilityMode> mode = ParseDurabilityMode(name)) {
      runs.emplace_back(*mode);
    } else {
      return Error{"'" + std::string(name) +
                   "' is not a durability: want off, sync or interval (or several, "
                   "comma-separated)"};
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return runs;
}

Result<std::unique_ptr<TempDataDir>> TempDataDir::Make(const std::string& parent) {
  std::string base = parent;
  if (base.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    base = tmp && *tmp ? tmp : "/tmp";
  }
  std::string pattern = base + "/limiter-bench-data-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Error{"cannot make a data dir under " + base + ": " + std::strerror(errno)};
  }
  return std::unique_ptr<TempDataDir>(new TempDataDir(pattern));
}

TempDataDir::~TempDataDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

DataDirBytes MeasureDataDir(const std::string& dir) {
  DataDirBytes bytes;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    std::error_code size_ec;
    if (!f.is_regular_file(size_ec)) continue;
    const auto size = static_cast<int64_t>(f.file_size(size_ec));
    if (size_ec) continue;
    const std::string ext = f.path().extension().string();
    if (ext == ".sst") {
      bytes.sst += size;
    } else if (ext == ".log") {
      bytes.wal += size;
    } else {
      bytes.other += size;
    }
  }
  return bytes;
}

std::string FileSystemName(const std::string& dir) {
  struct statfs s {};
  if (::statfs(dir.c_str(), &s) != 0) return "unknown";
  switch (static_cast<uint64_t>(s.f_type)) {
    case EXT4_SUPER_MAGIC:
      return "ext2/3/4";
    case XFS_SUPER_MAGIC:
      return "xfs";
    case BTRFS_SUPER_MAGIC:
      return "btrfs";
    case TMPFS_MAGIC:
      return "tmpfs";
    case OVERLAYFS_SUPER_MAGIC:
      return "overlay";
    default: {
      char hex[32];
      std::snprintf(hex, sizeof(hex), "0x%" PRIx64, static_cast<uint64_t>(s.f_type));
      return hex;
    }
  }
}

GroupCommitFigures GroupCommit(const NodeDurableStats& before, const NodeDurableStats& after,
                               double seconds) {
  GroupCommitFigures f;
  f.writes = after.writes - before.writes;
  f.commits = after.commits - before.commits;
  f.backlog = after.pending - before.pending;
  if (seconds > 0) {
    f.commits_per_s = static_cast<double>(f.commits) / seconds;
    f.written_per_s = static_cast<double>(f.writes) / seconds;
    f.taken_per_s = static_cast<double>(f.writes - f.backlog) / seconds;
  }
  if (f.commits > 0)
    f.writes_per_commit = static_cast<double>(f.writes) / static_cast<double>(f.commits);
  return f;
}

KeyVerdict JudgeInspect(bool tracked, int64_t remaining, int64_t fresh_remaining) {
  if (tracked && remaining == fresh_remaining - 1) return KeyVerdict::kCharged;
  if (!tracked && remaining == fresh_remaining) return KeyVerdict::kFresh;
  return KeyVerdict::kMismatch;
}

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kStartTimeoutMs = 120'000;  // the WAL of a million keys replays first
constexpr int kStopTimeoutMs = 120'000;   // a clean stop closes RocksDB
constexpr int kInspectsPerFrame = 64;     // the most a node takes in one frame

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::string Format(const char* format, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), format, args...);
  return buf;
}

std::string Mib(int64_t bytes) {
  return Format("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

// A node started on the data dir, and how long it took to answer.
struct Started {
  LocalNode node;
  std::unique_ptr<NodeConnection> connection;  // the one that answered STATS
  NodeStats stats;                             // its first STATS
  double banner_ms = 0;  // from the start of the process to its "listening" line
  double ready_ms = 0;   // to its first STATS answered (a connection and its hello included)
  Clock::time_point spawned;
};

Result<Started> StartOnDir(const DurableRestartOptions& o, const std::string& program,
                           const std::string& dir) {
  LocalNodeOptions node;
  node.program = program;
  node.policies = o.policies;
  node.max_keys = static_cast<int64_t>(2 * o.keys + 1024);
  node.start_timeout_ms = kStartTimeoutMs;
  node.extra_args = {"--data-dir", dir, "--durability", std::string(DurabilityModeName(o.mode))};
  if (o.sync_interval_ms > 0) {
    node.extra_args.push_back("--sync-interval-ms");
    node.extra_args.push_back(std::to_string(o.sync_interval_ms));
  }
  Started s;
  s.spawned = Clock::now();
  Result<LocalNode> started = StartLocalNode(node);
  if (!started) return Error{started.error()};
  s.banner_ms = MsSince(s.spawned);
  s.node = std::move(started).value();
  Result<std::unique_ptr<NodeConnection>> c =
      NodeConnection::Connect(s.node.address, kStartTimeoutMs, o.access);
  if (!c) return Error{"node " + s.node.address + ": " + c.error()};
  s.connection = std::move(c).value();
  Result<NodeStats> stats = ReadNodeStats(*s.connection);
  if (!stats) return Error{"node " + s.node.address + ": " + stats.error()};
  s.ready_ms = MsSince(s.spawned);
  s.stats = *stats;
  if (!s.stats.durable) {
    return Error{"node " + s.node.address + " reports no durable_* counters: is policy '" +
                 o.policy + "' durable: true in " + o.policies + "?"};
  }
  return s;
}

// SIGTERM, and the time the node takes to exit; an error unless it exits 0.
Result<double> Stop(LocalNode& node) {
  const Clock::time_point start = Clock::now();
  Result<int> status = StopLocalNode(node, kStopTimeoutMs);
  if (!status) return Error{status.error()};
  if (*status != 0) return Error{"the node exited with status " + std::to_string(*status)};
  return MsSince(start);
}

struct Inspected {
  bool tracked = false;
  int64_t remaining = 0;
};

// INSPECTs `keys` (key numbers) in frames of kInspectsPerFrame; one answer per key.
Result<std::vector<Inspected>> Inspect(NodeConnection& c, const std::string& policy,
                                       const std::vector<uint64_t>& keys) {
  std::vector<Inspected> answers;
  RequestBuilder b;
  KeyBuffer buf;
  for (size_t begin = 0; begin < keys.size(); begin += kInspectsPerFrame) {
    const size_t end = std::min(keys.size(), begin + kInspectsPerFrame);
    b.Clear();
    for (size_t i = begin; i < end; ++i) b.Inspect(i, policy, KeyName(keys[i], buf));
    if (Status s = c.Send(b.Finish()); !s.ok()) return s;
    Result<const wire::Reply*> reply = c.Receive();
    if (!reply) return Error{reply.error()};
    const wire::Reply& r = **reply;
    if (r.error()) return Error{"the node refused INSPECT: " + r.error()->str()};
    if (!r.ops() || r.ops()->size() != end - begin) return Error{"INSPECT: a reply per op missing"};
    for (const wire::OpReply* op : *r.ops()) {
      if (op->status() != wire::Status::Ok) {
        return Error{std::string("INSPECT: ") + wire::EnumNameStatus(op->status()) +
                     (op->error() ? ": " + op->error()->str() : std::string())};
      }
      if (!op->results() || op->results()->size() == 0) return Error{"INSPECT: no result"};
      answers.push_back(
          {op->state() && op->state()->tracked(), op->results()->Get(0)->remaining()});
    }
  }
  return answers;
}

// One CHECK of key number `key`: whether it was allowed.
Result<bool> CheckOnce(NodeConnection& c, const std::string& policy, uint64_t key) {
  RequestBuilder b;
  KeyBuffer buf;
  b.Check(0, policy, KeyName(key, buf));
  if (Status s = c.Send(b.Finish()); !s.ok()) return s;
  Result<const wire::Reply*> reply = c.Receive();
  if (!reply) return Error{reply.error()};
  const wire::Reply& r = **reply;
  if (r.error()) return Error{"the node refused CHECK: " + r.error()->str()};
  if (!r.ops() || r.ops()->size() != 1) return Error{"CHECK: no op reply"};
  const wire::OpReply& op = *r.ops()->Get(0);
  if (op.status() != wire::Status::Ok) {
    return Error{std::string("CHECK: ") + wire::EnumNameStatus(op.status()) +
                 (op.error() ? ": " + op.error()->str() : std::string())};
  }
  return op.allowed();
}

// Opens the stopped node's directory in this process with the node's policies and key-id
// seed, compacts all of it (the node has no op for that) and closes it.
Status CompactHere(const DurableRestartOptions& o, const std::string& dir) {
  Result<PolicySet> policies = LoadPolicyFile(o.policies);
  if (!policies) return Error{policies.error()};
  // The node's seed, or the database would take its records for another cluster's and
  // rewrite every one under new ids.
  const uint64_t seed = auth::KeyIdSeedOf(o.access.secret);
  if (KeyIdSeedUsed()) {
    if (KeyIdSeed() != seed) return Error{"this process already made key ids under another seed"};
  } else {
    SetKeyIdSeed(seed);
  }
  SteadyClock clock;
  DurableOptions d;
  d.data_dir = dir;
  Result<std::unique_ptr<DurableStore>> store = DurableStore::Open(*policies, clock, d);
  if (!store) return Error{store.error()};
  (*store)->CompactAll();
  return Status::Ok();
}

struct Phase {  // one start on the data dir
  double banner_ms = 0;
  double ready_ms = 0;
  double stop_ms = 0;
  int64_t rss_bytes = 0;     // at its first STATS
  int64_t durable_keys = 0;  // RocksDB's estimate at its first STATS
};

struct RestartReport {
  std::string dir, fs;
  Phase empty;  // the first start, on an empty directory
  CheckCounts written;
  double write_s = 0;
  GroupCommitFigures commit;
  DataDirBytes stopped;  // after the write phase's clean stop
  Phase restart;
  double first_read_ms = 0;   // the first INSPECT of a written key, from ready
  double first_check_ms = 0;  // then the first CHECK of another written key
  bool first_check_allowed = false;
  int64_t fresh_remaining = 0;
  int64_t charged = 0, fresh = 0, mismatched = 0;       // the written sample
  int64_t controls_fresh = 0, controls_mismatched = 0;  // keys never written
  size_t sample = 0, controls = 0;
  double sample_ms = 0;
  int64_t reads = 0, read_hits = 0, read_errors = 0;  // the restarted node's, after the sample
  DataDirBytes restarted_stopped;                     // after the restarted node's clean stop
  std::optional<std::string> compact_skipped;
  double compact_ms = 0;
  DataDirBytes compacted;
  std::optional<Phase> after_compaction;
};

double PerKey(int64_t bytes, uint64_t keys) {
  return keys ? static_cast<double>(bytes) / static_cast<double>(keys) : 0;
}

void WriteText(const DurableRestartOptions& o, const RestartReport& r, std::ostream& out) {
  out << "durable-restart: " << o.keys << " keys of policy '" << o.policy << "' written with "
      << DurabilityModeName(o.mode) << " durability, in frames of " << o.batch << " checks, "
      << o.depth << " in flight\n";
  out << "data dir:  " << r.dir << " (" << r.fs << ")\n";
  out << Format("write:     %" PRIu64 " checks (%" PRIu64 " allowed, %" PRIu64
                " errors) in %.2f s: "
                "%.0f keys/s; %" PRId64 " commits, %.1f writes a commit\n",
                r.written.checks, r.written.allowed, r.written.errors, r.write_s,
                r.write_s > 0 ? static_cast<double>(r.written.checks) / r.write_s : 0.0,
                r.commit.commits, r.commit.writes_per_commit);
  const auto disk = [&](const char* when, const DataDirBytes& b) {
    out << Format(
        "disk:      %-34s SST %s + WAL %s = %.1f bytes/key (whole dir %s, %.1f bytes/key)\n", when,
        Mib(b.sst).c_str(), Mib(b.wal).c_str(), PerKey(b.sst_and_wal(), o.keys),
        Mib(b.total()).c_str(), PerKey(b.total(), o.keys));
  };
  disk("after the clean stop:", r.stopped);
  out << Format(
      "start:     empty dir: ready in %.1f ms; with the keys: listening after %.1f ms, "
      "STATS answered after %.1f ms (rss %s, RocksDB estimates %" PRId64 " keys)\n",
      r.empty.ready_ms, r.restart.banner_ms, r.restart.ready_ms, Mib(r.restart.rss_bytes).c_str(),
      r.restart.durable_keys);
  out << Format(
      "first:     read-through (INSPECT of a written key) %.2f ms after ready (%.1f ms from "
      "the process start); then a CHECK of another one %.2f ms (%s)\n",
      r.first_read_ms, r.restart.ready_ms + r.first_read_ms, r.first_check_ms,
      r.first_check_allowed ? "allowed" : "denied");
  out << Format("verify:    %zu sampled written keys: %" PRId64 " carry their charge, %" PRId64
                " fresh (lost), %" PRId64 " otherwise; %zu never-written keys: %" PRId64
                " fresh, %" PRId64 " otherwise (a fresh key's remaining: %" PRId64 "); %.1f ms\n",
                r.sample, r.charged, r.fresh, r.mismatched, r.controls, r.controls_fresh,
                r.controls_mismatched, r.fresh_remaining, r.sample_ms);
  out << Format("reads:     the restarted node read through %" PRId64 " times, %" PRId64
                " hits, %" PRId64 " errors; stopped in %.1f ms\n",
                r.reads, r.read_hits, r.read_errors, r.restart.stop_ms);
  disk("after the restarted node's stop:", r.restarted_stopped);
  if (r.compact_skipped) {
    out << "compact:   not done: " << *r.compact_skipped << '\n';
  } else {
    out << Format("compact:   a full compaction in this process took %.0f ms\n", r.compact_ms);
    disk("after the full compaction:", r.compacted);
    if (r.after_compaction) {
      out << Format("start:     after the compaction: STATS answered after %.1f ms\n",
                    r.after_compaction->ready_ms);
    }
  }
}

nlohmann::json DiskJson(const DataDirBytes& b, uint64_t keys) {
  return {{"sst_bytes", b.sst},
          {"wal_bytes", b.wal},
          {"other_bytes", b.other},
          {"sst_wal_bytes_per_key", PerKey(b.sst_and_wal(), keys)},
          {"total_bytes_per_key", PerKey(b.total(), keys)}};
}

void WriteJson(const DurableRestartOptions& o, const RestartReport& r, std::ostream& out) {
  nlohmann::json j;
  j["policy"] = o.policy;
  j["keys"] = o.keys;
  j["durability"] = DurabilityModeName(o.mode);
  j["batch"] = o.batch;
  j["depth"] = o.depth;
  j["data_dir_fs"] = r.fs;
  j["write_checks"] = r.written.checks;
  j["write_allowed"] = r.written.allowed;
  j["write_errors"] = r.written.errors;
  j["write_s"] = r.write_s;
  j["write_keys_per_s"] = r.write_s > 0 ? static_cast<double>(r.written.checks) / r.write_s : 0.0;
  j["durable_writes"] = r.commit.writes;
  j["durable_commits"] = r.commit.commits;
  j["durable_writes_per_commit"] = r.commit.writes_per_commit;
  j["startup_empty_ms"] = r.empty.ready_ms;
  j["stop_ms"] = r.empty.stop_ms;
  j["disk_after_stop"] = DiskJson(r.stopped, o.keys);
  j["startup_listening_ms"] = r.restart.banner_ms;
  j["startup_ms"] = r.restart.ready_ms;
  j["restart_rss_bytes"] = r.restart.rss_bytes;
  j["restart_durable_keys_estimate"] = r.restart.durable_keys;
  j["first_read_ms"] = r.first_read_ms;
  j["first_read_from_start_ms"] = r.restart.ready_ms + r.first_read_ms;
  j["first_check_ms"] = r.first_check_ms;
  j["first_check_allowed"] = r.first_check_allowed;
  j["fresh_remaining"] = r.fresh_remaining;
  j["sample"] = r.sample;
  j["sample_charged"] = r.charged;
  j["sample_fresh"] = r.fresh;
  j["sample_mismatched"] = r.mismatched;
  j["controls"] = r.controls;
  j["controls_fresh"] = r.controls_fresh;
  j["controls_mismatched"] = r.controls_mismatched;
  j["sample_ms"] = r.sample_ms;
  j["restart_reads"] = r.reads;
  j["restart_read_hits"] = r.read_hits;
  j["restart_read_errors"] = r.read_errors;
  j["restart_stop_ms"] = r.restart.stop_ms;
  j["disk_after_restart_stop"] = DiskJson(r.restarted_stopped, o.keys);
  if (r.compact_skipped) {
    j["compacted"] = false;
    j["compact_skipped"] = *r.compact_skipped;
  } else {
    j["compacted"] = true;
    j["compact_ms"] = r.compact_ms;
    j["disk_after_compaction"] = DiskJson(r.compacted, o.keys);
    if (r.after_compaction) j["startup_compacted_ms"] = r.after_compaction->ready_ms;
  }
  out << j.dump() << '\n';
}

// The sample: distinct written key numbers in [0, keys - 1) (the last one is kept for the
// first CHECK), drawn with `seed`; and as many never-written ones in [keys, 2 keys).
void DrawSample(uint64_t keys, size_t want, uint64_t seed, std::vector<uint64_t>& written,
                std::vector<uint64_t>& controls) {
  const uint64_t pool = keys > 1 ? keys - 1 : 0;
  want = static_cast<size_t>(std::min<uint64_t>(want, pool));
  KeyPicker picker(pool, seed);
  std::unordered_set<uint64_t> seen;
  while (written.size() < want) {
    const uint64_t k = picker.Next();
    if (seen.insert(k).second) written.push_back(k);
  }
  for (uint64_t k : written) controls.push_back(keys + k);
}

}  // namespace

int RunDurableRestart(const DurableRestartOptions& o, std::ostream& out, std::ostream& err) {
  const auto fail = [&](const std::string& message) {
    err << "limiter-bench durable-restart: " << message << '\n';
    return 1;
  };
  const std::string program = o.limiterd.empty() ? DefaultLimiterdPath() : o.limiterd;
  if (program.empty() || ::access(program.c_str(), X_OK) != 0) {
    return fail("no limiterd at '" + program + "' (build it, or give --limiterd PATH)");
  }
  if (o.keys < 2) return fail("--keys: at least 2");
  Result<std::unique_ptr<TempDataDir>> dir = TempDataDir::Make(o.data_parent);
  if (!dir) return fail(dir.error());
  const std::string& path = (*dir)->path();
  RestartReport r;
  r.dir = path;
  r.fs = FileSystemName(path);

  // 1. An empty directory: start, write every key once, stop.
  {
    Result<Started> s = StartOnDir(o, program, path);
    if (!s) return fail(s.error());
    r.empty.banner_ms = s->banner_ms;
    r.empty.ready_ms = s->ready_ms;
    const NodeDurableStats before = *s->stats.durable;
    Result<std::unique_ptr<NodeChannel>> channel =
        NodeChannel::Connect(s->node.address, o.policy, o.access);
    if (!channel) return fail("node " + s->node.address + ": " + channel.error());
    const Clock::time_point start = Clock::now();
    Result<CheckCounts> written = TouchEveryKey(**channel, o.keys, o.batch, o.depth);
    r.write_s = MsSince(start) / 1000;
    if (!written) return fail("writing the keys: " + written.error());
    r.written = *written;
    if (r.written.errors > 0) return fail("writing the keys: " + r.written.first_error);
    Result<NodeStats> after = ReadNodeStats(*s->connection);
    if (!after) return fail("node " + s->node.address + ": " + after.error());
    r.commit = GroupCommit(before, *after->durable, r.write_s);
    channel->reset();
    s->connection.reset();
    Result<double> stopped = Stop(s->node);
    if (!stopped) return fail("stopping the node after the writes: " + stopped.error());
    r.empty.stop_ms = *stopped;
  }
  r.stopped = MeasureDataDir(path);

  // 2. The same directory again: how soon it answers, and whether the keys are there.
  {
    Result<Started> s = StartOnDir(o, program, path);
    if (!s) return fail("restarting: " + s.error());
    r.restart.banner_ms = s->banner_ms;
    r.restart.ready_ms = s->ready_ms;
    r.restart.rss_bytes = s->stats.resident_bytes;
    r.restart.durable_keys = s->stats.durable->keys;
    std::vector<uint64_t> sample, controls;
    DrawSample(o.keys, static_cast<size_t>(o.sample), o.seed, sample, controls);
    if (!sample.empty()) {
      const Clock::time_point start = Clock::now();
      Result<std::vector<Inspected>> first = Inspect(*s->connection, o.policy, {sample.front()});
      if (!first) return fail("the first read-through: " + first.error());
      r.first_read_ms = MsSince(start);
    }
    {
      const Clock::time_point start = Clock::now();
      Result<bool> allowed = CheckOnce(*s->connection, o.policy, o.keys - 1);
      if (!allowed) return fail("the first check: " + allowed.error());
      r.first_check_ms = MsSince(start);
      r.first_check_allowed = *allowed;
    }
    const Clock::time_point start = Clock::now();
    Result<std::vector<Inspected>> control_answers = Inspect(*s->connection, o.policy, controls);
    if (!control_answers) return fail("inspecting never-written keys: " + control_answers.error());
    Result<std::vector<Inspected>> answers = Inspect(*s->connection, o.policy, sample);
    if (!answers) return fail("inspecting the sample: " + answers.error());
    r.sample_ms = MsSince(start);
    // A never-written key's remaining is a fresh key's: what the written ones are judged by.
    r.fresh_remaining = control_answers->empty() ? 0 : control_answers->front().remaining;
    for (const Inspected& a : *control_answers) {
      (JudgeInspect(a.tracked, a.remaining, r.fresh_remaining) == KeyVerdict::kFresh
           ? r.controls_fresh
           : r.controls_mismatched)++;
    }
    for (const Inspected& a : *answers) {
      switch (JudgeInspect(a.tracked, a.remaining, r.fresh_remaining)) {
        case KeyVerdict::kCharged:
          ++r.charged;
          break;
        case KeyVerdict::kFresh:
          ++r.fresh;
          break;
        case KeyVerdict::kMismatch:
          ++r.mismatched;
          break;
      }
    }
    r.sample = sample.size();
    r.controls = controls.size();
    Result<NodeStats> after = ReadNodeStats(*s->connection);
    if (!after) return fail("node " + s->node.address + ": " + after.error());
    r.reads = after->durable->reads;
    r.read_hits = after->durable->read_hits;
    r.read_errors = after->durable->errors;
    s->connection.reset();
    Result<double> stopped = Stop(s->node);
    if (!stopped) return fail("stopping the restarted node: " + stopped.error());
    r.restart.stop_ms = *stopped;
  }
  r.restarted_stopped = MeasureDataDir(path);

  // 3. A full compaction, and a start on what it left.
  if (!o.compact) {
    r.compact_skipped = "--no-compact";
  } else {
    const Clock::time_point start = Clock::now();
    if (Status compacted = CompactHere(o, path); !compacted.ok()) {
      r.compact_skipped = compacted.error();
    } else {
      r.compact_ms = MsSince(start);
      r.compacted = MeasureDataDir(path);
      Result<Started> s = StartOnDir(o, program, path);
      if (!s) return fail("starting after the compaction: " + s.error());
      Phase p;
      p.banner_ms = s->banner_ms;
      p.ready_ms = s->ready_ms;
      s->connection.reset();
      Result<double> stopped = Stop(s->node);
      if (!stopped) return fail("stopping the node after the compaction: " + stopped.error());
      p.stop_ms = *stopped;
      r.after_compaction = p;
    }
  }

  if (o.json) {
    WriteJson(o, r, out);
  } else {
    WriteText(o, r, out);
  }
  return 0;
}

}  // namespace limiter::bench
