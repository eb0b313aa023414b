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
// Thread-safety: every function may be called from any thread; the ring and the health
// table each have their own mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "client/scheduler.h"
#include "protocol/ring.h"

namespace limiter {

class Routing {
 public:
  struct Options {
    int down_after_misses = 3;
    int64_t probe_first_us = 100'000;
    int64_t probe_max_us = 1'000'000;
  };
  // A member list's ring and the list's generation. Immutable; shared.
  struct Membership {
    std::shared_ptr<const Ring> ring;
    uint64_t generation = 0;
  };

  Routing(std::vector<std::string> members, uint64_t generation, Scheduler& scheduler,
          Options options, uint64_t seed);

  // The owner of a routing key; empty when there are no members.
  std::string OwnerOf(std::string_view routing_key) const;
  std::shared_ptr<const Membership> membership() const;

  // Offers a member list: when its generation is larger than the current one (and than any
  // list being built), its ring is built off the scheduler's thread and adopted when done.
  // True when it will be.
  bool Offer(std::vector<std::string> members, uint64_t generation);
  uint64_t adopted() const;  // lists adopted since the start

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
    bool down = false;
    int misses = 0;
    int64_t backoff_us = 0;
  };
  // The ring and what is being built: shared with the builds in flight, which may outlive
  // this object.
  struct RingState {
    std::mutex mu;
    std::shared_ptr<const Membership> current;  // guarded by mu
    uint64_t building = 0;                      // guarded by mu: the largest generation offered
    uint64_t adopted = 0;                       // guarded by mu
  };

  Scheduler& scheduler_;
  const Options options_;
  std::shared_ptr<RingState> ring_;
  mutable std::mutex health_mu_;
  std::unordered_map<std::string, Health> health_;  // guarded by health_mu_
  std::mt19937_64 rng_;                             // guarded by health_mu_
};

}  // namespace limiter
