// Routing: which node owns a key (the ring, from a member list and its generation) and which
// nodes are down right now. A gateway adopts a member list only when its generation is
// larger than the one it has, so a stale node cannot take it back to an old ring and two
// lists cannot flip-flop. Rings are built off the scheduler's thread (Scheduler::Offload):
// 2^18 x N hashes must not delay the deadlines that thread fires.
//
// Health: a node is marked down after `down_after_misses` deadline misses in a row, or at
// once when its connection fails; the caller probes it back, with a backoff that doubles up
// to a bound and a jitter of +-50%, so that gateways do not storm a returning node together.
//
// The request path reads no lock that other threads share: the list in force is an
// immutable View (the ring, its generation, and each member's Node with its `down` flag), and
// each thread keeps the last View it read, taking the ring's lock only when a newer list has
// been adopted since (one atomic load per decision otherwise). A request's owner comes from
// its routing key's ring slot, worked out once when the request is resolved.
//
// Thread-safety: every function may be called from any thread. The list and what is being
// built share one mutex, the nodes' health counters another; `down` is an atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "client/scheduler.h"
#include "common/mutex.h"
#include "protocol/ring.h"

namespace limiter {

class Routing {
 public:
  struct Options {
    int down_after_misses = 3;
    int64_t probe_first_us = 100'000;
    int64_t probe_max_us = 1'000'000;
  };
  // A node this gateway has listed: its address and whether it is down now. One per address
  // for the gateway's life, shared by every View that lists it.
  struct Node {
    explicit Node(std::string a) : address(std::move(a)) {}
    const std::string address;
    std::atomic<bool> down{false};
  };
  // A member list's ring, the list's generation, and its members' Nodes in ring order.
  // Immutable; shared.
  struct View {
    std::shared_ptr<const Ring> ring;
    uint64_t generation = 0;
    std::vector<std::shared_ptr<Node>> nodes;
    // The owner of a ring slot; null when the list is empty.
    const Node* OwnerOfSlot(uint32_t slot) const {
      return ring->empty() ? nullptr : nodes[ring->OwnerOfSlot(slot)].get();
    }
  };

  Routing(std::vector<std::string> members, uint64_t generation, Scheduler& scheduler,
          Options options, uint64_t seed);

  // The list in force, as this thread last read it (a newer one is read under the lock once).
  // Valid until this thread's next call of Current on this Routing.
  const View& Current() const;
  std::shared_ptr<const View> membership() const;
  // The owner of a routing key; empty when there are no members.
  std::string OwnerOf(std::string_view routing_key) const;

  // Offers a member list: when its generation is larger than the current one (and than any
  // list being built), its ring is built off the scheduler's thread and adopted when done.
  // True when it will be.
  bool Offer(std::vector<std::string> members, uint64_t generation);
  uint64_t adopted() const;  // lists adopted since the start

  static bool IsDown(const Node& node) { return node.down.load(std::memory_order_relaxed); }
  bool IsDown(const std::string& address) const;
  void NoteOk(const std::string& address);
  // A missed deadline; true when it marks the node down (the caller starts probing).
  bool NoteMiss(const std::string& address);
  // True when the node was up (the caller starts probing).
  bool MarkDown(const std::string& address);
  void MarkUp(const std::string& address);
  // How long to wait before the next probe of a node that is down: the backoff (doubling
  // from probe_first_us to probe_max_us) times a jitter in [0.5, 1.5).
  int64_t NextProbeDelay(const std::string& address);
  uint64_t nodes_down() const;

 private:
  struct Health {
    std::shared_ptr<Node> node;
    int misses = 0;
    int64_t backoff_us = 0;
  };
  // The list, what is being built, and every node's health: shared with the builds in
  // flight, which may outlive this object.
  struct State {
    Mutex mu;
    std::shared_ptr<const View> current LIMITER_GUARDED_BY(mu);
    uint64_t building LIMITER_GUARDED_BY(mu) = 0;  // the largest generation offered
    uint64_t adopted LIMITER_GUARDED_BY(mu) = 0;
    // Bumped (under mu) with every list adopted: a thread's View is current while it agrees.
    std::atomic<uint64_t> version{1};
    Mutex health_mu LIMITER_ACQUIRED_AFTER(mu);
    std::unordered_map<std::string, Health> health LIMITER_GUARDED_BY(health_mu);
    std::mt19937_64 rng LIMITER_GUARDED_BY(health_mu);
    // A View of `ring`, its nodes made or found in `health`.
    std::shared_ptr<const View> MakeView(std::shared_ptr<const Ring> ring, uint64_t generation)
        LIMITER_EXCLUDES(health_mu);
    Health& HealthOf(const std::string& address) LIMITER_REQUIRES(health_mu);
  };

  Scheduler& scheduler_;
  const Options options_;
  const uint64_t instance_;  // tells this Routing's Views apart in the threads' caches
  std::shared_ptr<State> state_;
};

}  // namespace limiter
