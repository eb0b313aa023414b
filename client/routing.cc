#include "client/routing.h"

#include <algorithm>

namespace limiter {

Routing::Routing(std::vector<std::string> members, uint64_t generation, Scheduler& scheduler,
                 Options options, uint64_t seed)
    : scheduler_(scheduler), options_(options), ring_(std::make_shared<RingState>()), rng_(seed) {
  ring_->current = std::make_shared<const Membership>(
      Membership{std::make_shared<const Ring>(std::move(members)), generation});
  ring_->building = generation;
}

std::shared_ptr<const Routing::Membership> Routing::membership() const {
  std::lock_guard<std::mutex> lock(ring_->mu);
  return ring_->current;
}

std::string Routing::OwnerOf(std::string_view routing_key) const {
  const std::shared_ptr<const Membership> m = membership();
  return m->ring->empty() ? std::string() : m->ring->Owner(routing_key);
}

bool Routing::Offer(std::vector<std::string> members, uint64_t generation) {
  {
    std::lock_guard<std::mutex> lock(ring_->mu);
    if (generation <= ring_->building) return false;
    ring_->building = generation;
    if (ring_->current->ring->HasMembers(members)) {
      // The same list, newer: only the generation moves (no ring to build).
      ring_->current =
          std::make_shared<const Membership>(Membership{ring_->current->ring, generation});
      return true;
    }
  }
  scheduler_.Offload([state = ring_, members = std::move(members), generation]() mutable {
    auto built = std::make_shared<const Membership>(
        Membership{std::make_shared<const Ring>(std::move(members)), generation});
    std::lock_guard<std::mutex> lock(state->mu);
    if (generation <= state->current->generation) return;  // a newer one came first
    state->current = std::move(built);
    ++state->adopted;
  });
  return true;
}

uint64_t Routing::adopted() const {
  std::lock_guard<std::mutex> lock(ring_->mu);
  return ring_->adopted;
}

bool Routing::IsDown(const std::string& address) const {
  std::lock_guard<std::mutex> lock(health_mu_);
  auto it = health_.find(address);
  return it != health_.end() && it->second.down;
}

void Routing::NoteOk(const std::string& address) {
  std::lock_guard<std::mutex> lock(health_mu_);
  auto it = health_.find(address);
  if (it != health_.end()) it->second.misses = 0;
}

bool Routing::NoteMiss(const std::string& address) {
  {
    std::lock_guard<std::mutex> lock(health_mu_);
    Health& h = health_[address];
    if (++h.misses < options_.down_after_misses || h.down) return false;
  }
  return MarkDown(address);
}

bool Routing::MarkDown(const std::string& address) {
  std::lock_guard<std::mutex> lock(health_mu_);
  Health& h = health_[address];
  if (h.down) return false;
  h.down = true;
  h.backoff_us = options_.probe_first_us;
  return true;
}

void Routing::MarkUp(const std::string& address) {
  std::lock_guard<std::mutex> lock(health_mu_);
  Health& h = health_[address];
  h.down = false;
  h.misses = 0;
}

int64_t Routing::NextProbeDelay(const std::string& address) {
  std::lock_guard<std::mutex> lock(health_mu_);
  Health& h = health_[address];
  const int64_t backoff = std::max<int64_t>(1, h.backoff_us);
  h.backoff_us = std::min(options_.probe_max_us, backoff * 2);
  return backoff / 2 + std::uniform_int_distribution<int64_t>(0, backoff - 1)(rng_);
}

uint64_t Routing::nodes_down() const {
  std::lock_guard<std::mutex> lock(health_mu_);
  uint64_t down = 0;
  for (const auto& [address, h] : health_) down += h.down;
  return down;
}

}  // namespace limiter
