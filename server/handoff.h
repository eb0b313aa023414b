// Handoff: the keys themselves moving between nodes when the member list changes (which keys
// and when is Ownership's: server/ownership.h). Export takes out of the store every live key
// (and split) whose owner under the job's new ring is another member, and sends them there in
// batches, then `done` to every other member; Receive takes a batch in, only from a member
// that owned the slots lately, and keeps the stricter state where the key was served here
// meanwhile. A key's id carries its ring slot (key_id.h), so the store alone says who gets
// what. Durable keys go too, from memory or from their database.
//
// Thread-safety: any thread; Export on one thread at a time (the server's hand-off thread).
// Keys are read and written under their stripes' locks; counters are atomics.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <variant>

#include "common/clock.h"
#include "protocol/frame_codec.h"
#include "server/ownership.h"
#include "server/policy_table.h"

namespace limiter {

namespace wire {
struct Handoff;
enum class Status : uint8_t;
}  // namespace wire
class DurableStore;
class RegionShares;
class Store;

// What one hand-off job did.
struct HandoffStats {
  int64_t keys_sent = 0;
  int64_t keys_lost = 0;  // not delivered: a peer unreachable or refusing, or the deadline
  int64_t splits_sent = 0;
  int64_t batches = 0;  // sent (delivered or not); none after the deadline
};

class Handoff {
 public:
  struct Options {
    std::string self;
    uint32_t max_frame_bytes = kDefaultMaxFrameBytes;  // a record fits a quarter of a peer's
    int64_t deadline_ms = 10'000;                      // a job sends nothing after this
  };
  // Waits until every frame that began before the call has ended, or `deadline` (the node's
  // workers: frames begun under an old ring may still charge the keys it gives away).
  using FrameBarrier = std::function<void(std::chrono::steady_clock::time_point deadline)>;
  Handoff(const PolicyTable& policies, const Clock& clock, Store& store, DurableStore* durable,
          RegionShares* regions, Ownership& ownership, Options options, FrameBarrier barrier);

  // Sends `frame` (a Request body) to `member`: the number of keys it took, or -1 when it could
  // not be delivered or was refused.
  using Sink = std::function<int64_t(const std::string& member, std::span<const uint8_t> frame)>;
  // Waits up to `wait` for a job and runs it (Export within deadline_ms); nullopt when none
  // came.
  std::optional<HandoffStats> RunNext(const Sink& send, std::chrono::milliseconds wait);
  // Runs one job: sends every key it moves, then `done`; stops sending at `deadline` (keys not
  // sent are counted lost).
  HandoffStats Export(const Ownership::Job& job, const Sink& send,
                      std::chrono::steady_clock::time_point deadline);

  // One batch from `from` (a peer that proved it speaks for itself): the keys taken, or why
  // the batch was refused whole. Keys refused one by one are counted and named in `error`.
  struct Received {
    int64_t taken = 0;
    std::string error;         // the first key refused, if any
    uint64_t durable_seq = 0;  // the durable batch holding the keys it took
  };
  struct Refused {
    wire::Status status;
    std::string why;
  };
  std::variant<Received, Refused> Receive(const wire::Handoff& batch, const std::string& from,
                                          int64_t now);

  struct Counters {
    std::atomic<int64_t> keys_sent{0}, keys_lost{0}, keys_received{0}, keys_refused{0},
        splits_received{0}, refused_batches{0};
  };
  const Counters& counters() const { return counters_; }

 private:
  const PolicyTable& policies_;
  const Clock& clock_;
  Store& store_;
  DurableStore* const durable_;
  RegionShares* const regions_;
  Ownership& ownership_;
  const Options options_;
  const FrameBarrier barrier_;
  Counters counters_;
};

}  // namespace limiter
