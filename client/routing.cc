#include "client/routing.h"

#include <algorithm>

namespace limiter {

namespace {

std::atomic<uint64_t> next_instance{1};

}  // namespace

std::shared_ptr<const Routing::View> Routing::State::MakeView(std::shared_ptr<const Ring> ring,
                                                              uint64_t generation) {
  auto view = std::make_shared<View>();
  view->generation = generation;
  {
    MutexLock lock(health_mu);
    for (const std::string& member : ring->members()) view->nodes.push_back(HealthOf(member).node);
  }
  view->ring = std::move(ring);
  return view;
}

Routing::Health& Routing::State::HealthOf(const std::string& address) {
  Health& h = health[address];
  if (!h.node) h.node = std::make_shared<Node>(address);
  return h;
}

Routing::Routing(std::vector<std::string> members, uint64_t generation, Scheduler& scheduler,
                 Options options, uint64_t seed)
    : scheduler_(scheduler),
      options_(options),
      instance_(next_instance.fetch_add(1)),
      state_(std::make_shared<State>()) {
  {
    MutexLock lock(state_->health_mu);
    state_->rng.seed(seed);
  }
  std::shared_ptr<const View> view =
      state_->MakeView(std::make_shared<const Ring>(std::move(members)), generation);
  MutexLock lock(state_->mu);
  state_->current = std::move(view);
  state_->building = generation;
}

const Routing::View& Routing::Current() const {
  // One entry a thread: a thread serves one gateway's requests at a time. Another Routing's
  // (a simulation's many gateways on one thread) just takes the lock to read its own.
  struct Cached {
    uint64_t instance = 0;
    uint64_t version = 0;
    std::shared_ptr<const View> view;
  };
  thread_local Cached cached;
  const uint64_t version = state_->version.load(std::memory_order_acquire);
  if (cached.instance != instance_ || cached.version != version) {
    MutexLock lock(state_->mu);
    cached.view = state_->current;
    cached.version = state_->version.load(std::memory_order_relaxed);
    cached.instance = instance_;
  }
  return *cached.view;
}

std::shared_ptr<const Routing::View> Routing::membership() const {
  MutexLock lock(state_->mu);
  return state_->current;
}

std::string Routing::OwnerOf(std::string_view routing_key) const {
  const View& v = Current();
  const Node* owner = v.OwnerOfSlot(Ring::SlotOf(routing_key));
  return owner ? owner->address : std::string();
}

bool Routing::Offer(std::vector<std::string> members, uint64_t generation) {
  std::shared_ptr<const Ring> same;
  {
    MutexLock lock(state_->mu);
    if (generation <= state_->building) return false;
    state_->building = generation;
    if (state_->current->ring->HasMembers(members)) same = state_->current->ring;
  }
  if (same) {
    // The same list, newer: only the generation moves (no ring to build).
    std::shared_ptr<const View> view = state_->MakeView(std::move(same), generation);
    MutexLock lock(state_->mu);
    if (generation > state_->current->generation) {
      state_->current = std::move(view);
      state_->version.fetch_add(1, std::memory_order_release);
    }
    return true;
  }
  scheduler_.Offload([state = state_, members = std::move(members), generation]() mutable {
    std::shared_ptr<const View> built =
        state->MakeView(std::make_shared<const Ring>(std::move(members)), generation);
    MutexLock lock(state->mu);
    if (generation <= state->current->generation) return;  // a newer one came first
    state->current = std::move(built);
    ++state->adopted;
    state->version.fetch_add(1, std::memory_order_release);
  });
  return true;
}

uint64_t Routing::adopted() const {
  MutexLock lock(state_->mu);
  return state_->adopted;
}

bool Routing::IsDown(const std::string& address) const {
  MutexLock lock(state_->health_mu);
  auto it = state_->health.find(address);
  return it != state_->health.end() && IsDown(*it->second.node);
}

void Routing::NoteOk(const std::string& address) {
  MutexLock lock(state_->health_mu);
  auto it = state_->health.find(address);
  if (it != state_->health.end()) it->second.misses = 0;
}

bool Routing::NoteMiss(const std::string& address) {
  {
    MutexLock lock(state_->health_mu);
    Health& h = state_->HealthOf(address);
    if (++h.misses < options_.down_after_misses || IsDown(*h.node)) return false;
  }
  return MarkDown(address);
}

bool Routing::MarkDown(const std::string& address) {
  MutexLock lock(state_->health_mu);
  Health& h = state_->HealthOf(address);
  if (IsDown(*h.node)) return false;
  h.node->down.store(true, std::memory_order_relaxed);
  h.backoff_us = options_.probe_first_us;
  return true;
}

void Routing::MarkUp(const std::string& address) {
  MutexLock lock(state_->health_mu);
  Health& h = state_->HealthOf(address);
  h.node->down.store(false, std::memory_order_relaxed);
  h.misses = 0;
}

int64_t Routing::NextProbeDelay(const std::string& address) {
  MutexLock lock(state_->health_mu);
  Health& h = state_->HealthOf(address);
  const int64_t backoff = std::max<int64_t>(1, h.backoff_us);
  h.backoff_us = std::min(options_.probe_max_us, backoff * 2);
  return backoff / 2 + std::uniform_int_distribution<int64_t>(0, backoff - 1)(state_->rng);
}

uint64_t Routing::nodes_down() const {
  MutexLock lock(state_->health_mu);
  uint64_t down = 0;
  for (const auto& [address, h] : state_->health) down += IsDown(*h.node);
  return down;
}

}  // namespace limiter
