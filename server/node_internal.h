// Node's private types and constants, shared by its .cc files.
#pragma once

#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/calendar.h"
#include "common/hot_key_sketch.h"
#include "common/key_limiter.h"
#include "common/reply_encoding.h"
#include "common/wire.h"
#include "server/node.h"

namespace limiter {

// A member list (or a `done`) announced with a generation further ahead of this node's wall
// clock is refused: one bad clock must not freeze the list for everyone after it.
constexpr uint64_t kMaxGenerationAheadMs = 10 * 60 * 1000;

// One limit an op touches: a named limit or an ancestor, with what the op does to it.
struct Node::Entry {
  int policy = 0;
  KeyId id;
  Rate rate;                 // the policy's; a sub-bucket's share of it
  std::string_view key;      // into the request
  std::string_view tenant;   // the request's (a durable record names its key by both)
  bool ancestor = false;     // charged as the ancestor of a named limit (key is the tenant)
  int64_t now = 0;           // the policy's time for this op (server/policy_clock.h)
  const Calendar* calendar = nullptr;  // the policy's, if it runs on one
  uint16_t split_k = 0;      // a sub-bucket: of a key split this many ways
  uint16_t split_index = 0;
  int64_t cost = 1;
  Slot* slot = nullptr;
  KeyLimiter limiter{Algorithm::kGcra};
  Decision decision;
  // For lease books: the charge in effect before this op changed the state, and (LEASE)
  // once the grant is charged.
  int64_t in_effect_before = 0;
  int64_t in_effect = 0;

  // A wait on this entry's clock in wall milliseconds (a calendar's window time is not).
  int64_t WallSpan(int64_t span) const {
    return calendar ? calendar->ToWallDuration(now, span) : span;
  }
  // The decision as a reply says it: its waits in wall milliseconds.
  Decision ReplyDecision() const {
    Decision d = decision;
    d.retry_after_ms = WallSpan(d.retry_after_ms);
    d.reset_after_ms = WallSpan(d.reset_after_ms);
    return d;
  }
};

// An op's first limit resolved ahead of the op (Node::Lookahead): valid for that op only.
struct Node::Ahead {
  const wire::Op* op = nullptr;  // the op it was worked out for; null: nothing ahead
  int policy = 0;
  uint32_t slot = 0;  // the routing key's ring slot
  KeyId id;
};

// What an op's reply says: the wire fields, set by the op (the views among them are filled
// in when the reply is encoded), and the strings they point into.
struct Node::OpResult {
  ReplyFields reply;
  std::string error;  // becomes reply.error
  std::string owner;  // WrongOwner: the member that owns the key
  bool wrong_owner = false;
  bool inspected = false;
  bool tracked = false;
  bool with_stats = false;
  bool with_hot_keys = false;
  bool with_regions = false;  // REGIONS: Worker::region_views answers
  std::shared_ptr<const Membership> members;  // MEMBERS: the list to answer with
  auth::SplitToken split_token{};  // reply.split_token points here when signed
  uint64_t durable_seq = 0;        // HANDOFF: the durable batch holding the keys it took

  void Fail(wire::Status s, std::string message) {
    reply.status = s;
    error = std::move(message);
  }
};

class Node::Worker {
 public:
  Worker(size_t policies, size_t sketch_capacity)
      : counters(policies), sketch(sketch_capacity) {}
  flatbuffers::FlatBufferBuilder fbb{4096};
  WorkerCounters counters;
  // Scratch, reused across ops.
  std::vector<Entry> entries;
  std::vector<size_t> stripes;
  std::vector<flatbuffers::Offset<wire::OpReply>> replies;
  std::vector<wire::LimitResult> results;
  std::vector<uint64_t> aligned;  // a request body copied to 8-byte alignment
  size_t own_limits = 0;          // entries named by the op; the rest are ancestors
  bool must_save = false;  // Load made a state to keep, decided or not (a drained sub-bucket,
                          // a state moved to a new region share)
  uint64_t durable_seq = 0;       // the durable batch this worker's replies wait for
  size_t frame_ops = 0;           // ops in the last frame handled (Node::FrameOps)
  std::string routing;            // a sub-bucket's routing key, "key#i"
  Ahead ahead;                    // the op being handled's first limit, if worked out ahead
  const wire::Peer* peer = nullptr;  // the frame's node-to-node payload, while it is handled
  const Session* session = nullptr;  // the frame's connection, while it is handled
  // The hot-key sketch: written here, rolled and read by Tick once a second.
  std::mutex hot_mu;
  HotKeySketch sketch;  // guarded by hot_mu
  uint32_t sampled = 0;
  std::string display;  // scratch: a sub-bucket's name for the sketch
  // Scratch for the rare parts of a reply (INSPECT, STATS, HOTKEYS), reused.
  std::vector<std::pair<std::string_view, int64_t>> state_fields;
  std::vector<std::pair<std::string, int64_t>> stats;
  std::vector<HotKey> hottest;
  std::vector<ReplyFields::HotKey> hot;
  std::vector<RegionShares::View> region_views;
  std::vector<ReplyFields::Region> regions;
};

}  // namespace limiter
