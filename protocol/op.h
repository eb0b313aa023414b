// One op and its answer as plain values, shared by the gateway library, the tools and the
// simulations, and their wire form: AddOp encodes an op into a request being built,
// FromWire copies an answer out of a verified wire::OpReply.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "common/limit_decision.h"
#include "protocol/request_builder.h"
#include "protocol/sub_bucket.h"

namespace limiter {

namespace wire {
struct OpReply;
}

enum class OpKind : uint8_t { kCheck, kLease, kReturn, kStats, kSplit, kHotKeys, kMembers };
inline constexpr size_t kOpKinds = 7;

// What a client asks a node: the fields of one wire::Op. Made by the named constructors below,
// one per kind of op.
struct OpSpec {
  OpKind kind = OpKind::kCheck;
  std::string policy;
  std::string key;
  std::string tenant;
  std::string operation;
  int64_t cost = 1;          // CHECK: cost; LEASE: units wanted; RETURN: units given back;
                             // SPLIT: ops sent to the sub-buckets
  int64_t leased_at_ms = 0;  // RETURN: of the lease, with its id
  uint64_t lease_id = 0;
  SubBucket sub;  // an op on a sub-bucket of a split key (k 0: the key itself)

  // CHECK of `cost` units, or of `operation`'s cost when one is named.
  static OpSpec Check(std::string policy, std::string key, std::string tenant,
                      std::string operation, int64_t cost, const SubBucket& sub = {});
  static OpSpec Lease(std::string policy, std::string key, std::string tenant, int64_t units,
                      const SubBucket& sub = {});
  // Gives back `units` of the lease `lease_id` granted at `leased_at_ms` (node time).
  static OpSpec Return(std::string policy, std::string key, std::string tenant, int64_t units,
                       int64_t leased_at_ms, uint64_t lease_id, const SubBucket& sub = {});
  // A split key's current split, reporting the `sent` ops this client sent its sub-buckets.
  static OpSpec Split(std::string policy, std::string key, int64_t sent);
  // STATS, HOTKEYS or MEMBERS: about the node, not a key.
  static OpSpec About(OpKind kind);
};

// The node's answer, copied out of a wire::OpReply.
struct OpAnswer {
  enum class Status : uint8_t {
    kOk,
    kBadRequest,
    kUnknownPolicy,
    kKeysExhausted,
    kWrongOwner,
    kSplit,       // the key is split: nothing charged, use its sub-buckets
    kMoving,      // the key is being handed to this node by its last owner: nothing charged
    kStoreError,  // a durable key's stored state could not be read: nothing charged
    // An op on a sub-bucket whose split is out of date: nothing charged. split_*: the owner's
    // split now (split_k 0: not split, or the answering node does not know it).
    kSplitChanged,
  };
  Status status = Status::kOk;
  std::string error;
  bool allowed = false;
  int64_t retry_after_ms = 0;
  int denied_by = -1;
  std::string denied_policy;
  std::vector<LimitDecision> results;  // per limit: the op's, then its ancestors
  int64_t granted = 0;                 // LEASE: units granted; RETURN: units given back
  int64_t granted_at_ms = 0;
  int64_t lease_ttl_ms = 0;
  int64_t suggested_lease = 0;
  uint64_t lease_id = 0;
  // WrongOwner: the node's member list, its ring and generation, and the key's owner by it.
  uint64_t ring_version = 0;
  std::vector<std::string> members;
  uint64_t generation = 0;
  std::string owner;
  uint16_t split_k = 0;  // Split, SplitChanged or a SPLIT op: 0 means not split
  uint32_t split_epoch = 0;
  int64_t split_valid_ms = 0;
  std::array<uint8_t, 24> split_token{};  // the first split_token_bytes
  uint8_t split_token_bytes = 0;
};

void AddOp(RequestBuilder& builder, uint64_t id, const OpSpec& op);
OpAnswer FromWire(const wire::OpReply& reply);

}  // namespace limiter
