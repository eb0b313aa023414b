// NodeMetrics: what a node counts, gathered once (Collect) from its workers' counters and its
// parts' own, and rendered two ways from that one snapshot: name/value pairs for the STATS op
// and limiterctl, and the Prometheus text exposition (version 0.0.4) for /metrics
// (docs/reference/metrics.md).
//
// Thread-safety: WorkerCounters are written by their worker alone (relaxed atomics) and read
// by any thread; NodeMetrics reads the parts through their thread-safe accessors.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/counter.h"
#include "common/histogram.h"
#include "server/policy_table.h"

namespace limiter {

class DurableStore;
class Handoff;
class Ownership;
class RegionShares;
class Store;

enum class BadFrame { kTooLarge, kEmpty, kInvalid, kTruncated };
inline constexpr int kBadFrameKinds = 4;
inline constexpr int kOpTypes = 10;  // wire::OpType values
enum Outcome { kAllowed, kDenied, kError };
// "check", "lease", ...; kOpTypes (or anything out of range) is "unknown".
std::string_view OpTypeName(int type);

// What one worker thread counts; read by the metrics thread.
struct WorkerCounters {
  explicit WorkerCounters(size_t policies) : decisions(policies) {}
  std::array<std::array<Counter, 3>, kOpTypes + 1> ops;  // [type][Outcome]; last: unknown type
  std::vector<std::array<Counter, 2>> decisions;         // [policy][allowed, denied]
  std::array<Counter, kBadFrameKinds> bad_frames;
  Counter refusals;          // new keys refused at max_keys
  Counter auth_failures;     // hellos without a valid proof; their connections were closed
  Counter peer_refusals;     // node-to-node ops from a session without the peer credential
                             // (or a peer speaking for another member), refused
  Counter sessions_revoked;  // sessions closed because the secret they proved was removed
  Counter frames_refused;    // frames over a bound (ops, reply, STATS/HOTKEYS/INSPECT)
  Counter split_refusals;    // ops on a sub-bucket with a token no member made (forged)
  Counter split_changed;     // ops on a sub-bucket from a view out of date (SplitChanged)
  Counter split_redirects;   // ops on a split key, answered with its split
  Counter frames;
  // Frames begun minus frames ended, as a sequence: odd while a frame is being handled (the
  // hand-off waits for the frames begun under an old ring to end).
  std::atomic<uint64_t> frame_seq{0};
  Counter moving;  // ops on keys this node waits to be handed (answered Moving)
  Counter connections_opened;
  Counter connections_closed;
  Histogram frame_latency_us;  // from a whole frame read to its reply encoded
};

class NodeMetrics {
 public:
  // The node's parts it reads; `durable` and `regions` may be null. `workers` calls its
  // argument with each worker's counters.
  using ForEachWorker = std::function<void(const std::function<void(const WorkerCounters&)>&)>;
  struct Parts {
    const PolicyTable& policies;
    const Clock& clock;
    Store& store;
    const Ownership& ownership;
    const Handoff& handoff;
    DurableStore* durable;
    RegionShares* regions;
    ForEachWorker workers;
  };
  explicit NodeMetrics(Parts parts);

  // Every counter, summed over the workers, with the parts' figures: one reading.
  struct Snapshot {
    std::array<std::array<uint64_t, 3>, kOpTypes + 1> ops{};
    std::vector<std::array<uint64_t, 2>> decisions;  // per policy
    std::array<uint64_t, kBadFrameKinds> bad_frames{};
    Histogram::Snapshot frame_latency;
    std::vector<std::pair<std::string, int64_t>> values;  // the STATS names
    int64_t Get(std::string_view name) const;
  };
  Snapshot Collect() const;

  // Name/value counters for the STATS op and limiterctl.
  std::vector<std::pair<std::string, int64_t>> Stats() const { return Collect().values; }
  // The Prometheus text exposition of every counter.
  std::string Render() const;

 private:
  Parts parts_;
  const int64_t started_ms_;
};

}  // namespace limiter
