// Ring: which node owns a routing key, derived by every gateway and node from the same
// member list, with no coordination.
//
// It is a table of M slots, each owned by the member that wins rendezvous (highest random
// weight) hashing for it; a key maps to a slot by its xxh3 hash. Compared with a ring of
// virtual nodes this balances better (a node owns M/N slots within binomial noise, about
// 1.6% at 64 nodes, while a ring needs thousands of points per node to stay within 1.1x of
// the mean), a lookup is one hash and one array read, and, being rendezvous, adding a node
// moves exactly the slots the new node wins, all to it. Plain rendezvous costs N hashes per
// lookup; jump hashing cannot drop a node from the middle of the list; Maglev tables move
// about 15% more keys than needed when a node joins.
//
// Immutable after construction; safe to share across threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace limiter {

class Ring {
 public:
  static constexpr uint64_t kSlots = uint64_t{1} << 18;
  static constexpr size_t kMaxMembers = 1024;

  // An empty ring owns nothing. Members are sorted and deduplicated first, so every
  // process derives the same ring from the same set, in whatever order it was listed.
  // More than kMaxMembers members: the rest are ignored (the caller validates).
  explicit Ring(std::vector<std::string> members = {});

  bool empty() const { return members_.empty(); }
  // Whether `members`, sorted and deduplicated, are this ring's (no table is built).
  bool HasMembers(std::vector<std::string> members) const;
  const std::vector<std::string>& members() const { return members_; }
  // A digest of the member set; 0 only for an empty ring.
  uint64_t version() const { return version_; }

  // The table slot a routing key maps to: the same under every ring.
  static uint32_t SlotOf(std::string_view routing_key);
  // Index into members() of the owner of `routing_key`. Precondition: !empty().
  size_t OwnerIndex(std::string_view routing_key) const { return table_[SlotOf(routing_key)]; }
  size_t OwnerOfSlot(uint32_t slot) const { return table_[slot]; }
  const std::string& Owner(std::string_view routing_key) const {
    return members_[OwnerIndex(routing_key)];
  }
  // The share of the table each member owns, in members() order.
  std::vector<double> Shares() const;

 private:
  std::vector<std::string> members_;
  std::vector<uint16_t> table_;
  uint64_t version_ = 0;
};

// A member list's ring and the list's generation, which orders lists: nodes and gateways adopt
// only a list of a larger generation. Immutable once made; shared as a snapshot.
struct ClusterRing {
  Ring ring;
  uint64_t generation = 0;
};

}  // namespace limiter
