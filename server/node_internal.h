// Node's private types, shared by its .cc files: a worker's scratch and counters, an op's
// reply as it is built, and the limit looked up ahead of its op.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "protocol/reply_encoding.h"
#include "protocol/wire.h"
#include "server/key_transaction.h"
#include "server/node.h"

namespace limiter {

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
  bool with_regions = false;                   // REGIONS: Worker::region_views answers
  std::shared_ptr<const ClusterRing> members;  // MEMBERS: the list to answer with
  auth::SplitToken split_token{};              // reply.split_token points here when signed
  uint64_t durable_seq = 0;                    // the durable batch holding what the op changed

  void Fail(wire::Status s, std::string message) {
    reply.status = s;
    error = std::move(message);
  }
  // Puts a split's view in the reply (for the key itself: status Split, a SPLIT op's answer,
  // or SplitChanged with the split now).
  void PutSplit(const HotKeys::View& v) {
    reply.split_k = v.k;
    reply.split_epoch = v.epoch;
    reply.split_valid_ms = v.valid_ms;
    if (v.token) {
      split_token = *v.token;
      reply.split_token = split_token;
    }
    if (v.retry_after_ms != 0) reply.retry_after_ms = v.retry_after_ms;
  }
};

class Node::Worker {
 public:
  Worker(size_t policies, HotKeys::Sampler& sampler) : counters(policies), sampler(sampler) {}
  flatbuffers::FlatBufferBuilder fbb{4096};
  WorkerCounters counters;
  HotKeys::Sampler& sampler;  // this worker's sample of its ops
  // Scratch, reused across ops.
  std::vector<LimitEntry> entries;
  std::vector<size_t> stripes;
  std::vector<flatbuffers::Offset<wire::OpReply>> replies;
  std::vector<wire::LimitResult> results;
  std::vector<uint64_t> aligned;      // a request body copied to 8-byte alignment
  size_t own_limits = 0;              // entries named by the op; the rest are ancestors
  uint64_t durable_seq = 0;           // the durable batch this worker's replies wait for
  size_t frame_ops = 0;               // ops in the last frame handled (Node::FrameOps)
  std::string routing;                // a sub-bucket's routing key, "key#i"
  Ahead ahead;                        // the op being handled's first limit, if worked out ahead
  std::string_view last_policy_name;  // the last policy found by name in this frame (FindPolicy)
  int last_policy = -1;               // its index; -1: none yet in this frame
  const wire::Peer* peer = nullptr;   // the frame's node-to-node payload, while it is handled
  const Session* session = nullptr;   // the frame's connection, while it is handled
  // Scratch for the rare parts of a reply (INSPECT, STATS, HOTKEYS), reused.
  std::vector<std::pair<std::string_view, int64_t>> state_fields;
  std::vector<std::pair<std::string, int64_t>> stats;
  std::vector<HotKeys::HotKey> hottest;
  std::vector<ReplyFields::HotKey> hot;
  std::vector<RegionShares::View> region_views;
  std::vector<ReplyFields::Region> regions;
};

}  // namespace limiter
