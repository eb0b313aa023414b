#include "server/ownership.h"

#include <algorithm>

#include "common/mutex.h"

namespace limiter {
namespace {

int IndexOf(const Ring& ring, const std::string& member) {
  const auto& m = ring.members();
  const auto it = std::find(m.begin(), m.end(), member);
  return it == m.end() ? -1 : static_cast<int>(it - m.begin());
}

bool Lists(const Ring& ring, const std::string& member) { return IndexOf(ring, member) >= 0; }

}  // namespace

Ownership::Ownership(const Clock& clock, Options options, std::vector<std::string> members,
                     uint64_t generation)
    : clock_(clock),
      options_(std::move(options)),
      pending_(std::make_unique<std::atomic<uint8_t>[]>(Ring::kSlots)) {
  current_.store(
      std::make_shared<const ClusterRing>(ClusterRing{Ring(std::move(members)), generation}));
  if (options_.join_gate) {
    // Until Join or OpenGate: another member may hold keys this node owns by its list.
    for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) pending_[slot].store(kAnySource);
    pending_count_.store(static_cast<int64_t>(Ring::kSlots));
    waits_until_ms_ = clock.NowMs() + options_.handoff_deadline_ms;
  }
}

Status Ownership::SetMembers(std::vector<std::string> members, uint64_t generation) {
  MutexLock change(change_mu_);
  const std::shared_ptr<const ClusterRing> current = current_.load();
  if (generation <= current->generation) return Status::Ok();  // not newer: keep ours
  auto next =
      std::make_shared<const ClusterRing>(ClusterRing{Ring(std::move(members)), generation});
  if (!next->ring.empty() && !Lists(next->ring, options_.self)) {
    return Error{"this node (" + options_.self + ") is not in the member list"};
  }
  if (leaving_.load()) return Status::Ok();  // it gives every key away whatever the list
  Adopt(nullptr, std::move(next));
  return Status::Ok();
}

Status Ownership::MemberLeaves(const std::string& member, uint64_t generation) {
  if (member == options_.self) {
    return Error{"leaving: this node (" + member +
                 ") is the one named; a node announces its own leave"};
  }
  MutexLock change(change_mu_);
  const std::shared_ptr<const ClusterRing> current = current_.load();
  if (!Lists(current->ring, member)) return Status::Ok();  // gone already: nothing changes
  std::vector<std::string> rest;
  for (const std::string& m : current->ring.members()) {
    if (m != member) rest.push_back(m);
  }
  auto next = std::make_shared<const ClusterRing>(
      ClusterRing{Ring(std::move(rest)), std::max(current->generation + 1, generation)});
  if (leaving_.load()) {
    Rehome(std::move(next));
  } else {
    // The leaver says `done` at the generation it announced, whatever this node's is.
    Adopt(nullptr, std::move(next), generation);
  }
  return Status::Ok();
}

Status Ownership::MemberJoins(const std::string& member, uint64_t generation) {
  if (member == options_.self) {
    return Error{"joining: this node (" + member +
                 ") is the one named; a node announces its own join"};
  }
  MutexLock change(change_mu_);
  const std::shared_ptr<const ClusterRing> current = current_.load();
  if (Lists(current->ring, member)) {
    // Listed already: whatever this node owed it went (or was lost) when it was added. Once
    // the jobs queued before this one have run, `done` tells it so.
    std::shared_ptr<const ClusterRing> next = current;
    if (generation > current->generation) {
      next = std::make_shared<const ClusterRing>(ClusterRing{current->ring, generation});
    }
    MutexLock lock(mu_);
    Publish(next);
    Queue({current, std::move(next), member});
    return Status::Ok();
  }
  if (current->ring.members().size() >= Ring::kMaxMembers) {
    return Error{"joining: the list holds " + std::to_string(Ring::kMaxMembers) +
                 " members, the most a ring takes"};
  }
  std::vector<std::string> with = current->ring.members();
  with.push_back(member);
  auto next = std::make_shared<const ClusterRing>(
      ClusterRing{Ring(std::move(with)), std::max(current->generation + 1, generation)});
  if (leaving_.load()) {
    Rehome(std::move(next));
  } else {
    Adopt(nullptr, std::move(next));
  }
  return Status::Ok();
}

void Ownership::Rehome(std::shared_ptr<const ClusterRing> next) {
  MutexLock lock(mu_);
  const std::shared_ptr<const ClusterRing> current = current_.load();
  Publish(next);
  if (next->ring.empty()) return;  // nobody left to hand to
  Queue({current, std::move(next), {}});
}

void Ownership::NoteAnnounced(const ClusterRing& before, const ClusterRing& after) {
  if (after.ring.members() == before.ring.members()) return;
  MutexLock lock(mu_);
  const int64_t now = clock_.NowMs();
  const bool too_many = announced_.size() > 4 * Ring::kMaxMembers;  // names that come and go
  std::erase_if(announced_, [&](const auto& a) {
    return too_many || now - a.second.second > kAnnouncedHoldMs;
  });
  for (const std::string& m : before.ring.members()) {
    if (!Lists(after.ring, m)) announced_[m] = {false, now};
  }
  for (const std::string& m : after.ring.members()) {
    if (!Lists(before.ring, m)) announced_[m] = {true, now};
  }
}

std::vector<std::string> Ownership::WithAnnounced(std::vector<std::string> discovered) const {
  MutexLock lock(mu_);
  const int64_t now = clock_.NowMs();
  for (const auto& [member, what] : announced_) {
    if (now - what.second > kAnnouncedHoldMs) continue;
    const auto it = std::find(discovered.begin(), discovered.end(), member);
    if (!what.first && it != discovered.end()) discovered.erase(it);
    if (what.first && it == discovered.end()) discovered.push_back(member);
  }
  return discovered;
}

bool Ownership::Adopt(const Ring* before_override, std::shared_ptr<const ClusterRing> next,
                      uint64_t wait_generation) {
  if (wait_generation == 0) wait_generation = next->generation;
  MutexLock lock(mu_);
  const std::shared_ptr<const ClusterRing> current = current_.load();
  if (next->generation <= current->generation) return false;
  if (leaving_.load()) return false;  // it gives every key away whatever the list
  const Ring& before = before_override ? *before_override : current->ring;
  const Ring& after = next->ring;
  const int self_before = IndexOf(before, options_.self);
  const int self_after = IndexOf(after, options_.self);
  std::vector<int> wait_of(before.members().size(), -1);  // owner before -> index in waits_
  bool gives = false;
  int64_t count = 0, added = 0;
  for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) {
    const bool owned_after =
        after.empty() || static_cast<int>(after.OwnerOfSlot(slot)) == self_after;
    const bool owned_before =
        before.empty() || static_cast<int>(before.OwnerOfSlot(slot)) == self_before;
    std::atomic<uint8_t>& pending = pending_[slot];
    if (!owned_after) {
      gives |= owned_before;
      pending.store(0, std::memory_order_relaxed);  // not ours: nothing to wait for
      continue;
    }
    if (!owned_before) {
      const size_t o = before.OwnerOfSlot(slot);
      if (wait_of[o] == -1) {
        const std::string& from = before.members()[o];
        const auto done = handed_.find(from);
        if (done != handed_.end() && done->second >= wait_generation) {
          wait_of[o] = -2;  // it has handed this list's keys over already
        } else {
          auto it = std::find_if(waits_.begin(), waits_.end(),
                                 [&](const Wait& w) { return w.from == from; });
          if (it == waits_.end()) it = waits_.insert(waits_.end(), Wait{from, 0});
          it->generation = std::max(it->generation, wait_generation);
          wait_of[o] = static_cast<int>(it - waits_.begin());
        }
      }
      if (wait_of[o] >= 0) {
        added += pending.load(std::memory_order_relaxed) == 0;
        pending.store(
            wait_of[o] < kAnySource - 1 ? static_cast<uint8_t>(wait_of[o] + 1) : kAnySource,
            std::memory_order_relaxed);
      }
    }
    count += pending.load(std::memory_order_relaxed) != 0;
  }
  // New waits get the whole deadline (older ones with them: the wait only grows safer).
  if (added > 0) waits_until_ms_ = clock_.NowMs() + options_.handoff_deadline_ms;
  pending_count_.store(count);
  if (count == 0) waits_.clear();
  Publish(next);
  if (gives && !after.empty()) Queue({current, std::move(next), {}});
  return true;
}

void Ownership::Leave(uint64_t generation) {
  MutexLock change(change_mu_);
  const std::shared_ptr<const ClusterRing> current = current_.load();
  std::vector<std::string> others;
  for (const std::string& m : current->ring.members()) {
    if (m != options_.self) others.push_back(m);
  }
  if (others.empty()) return;  // the last node: nobody to hand to, so it serves to the end
  // Newer than the list in use, which may have moved on since `generation` was announced.
  generation = std::max(generation, current->generation + 1);
  auto next = std::make_shared<const ClusterRing>(ClusterRing{Ring(std::move(others)), generation});
  MutexLock lock(mu_);
  leaving_.store(true);
  for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) pending_[slot].store(0);
  pending_count_.store(0);
  waits_.clear();
  const std::shared_ptr<const ClusterRing> from = current_.load();
  Publish(next);
  Queue({from, std::move(next), {}});
}

Status Ownership::Join(std::vector<std::string> previous, std::vector<std::string> members,
                       uint64_t generation) {
  auto next =
      std::make_shared<const ClusterRing>(ClusterRing{Ring(std::move(members)), generation});
  if (!Lists(next->ring, options_.self)) {
    return Error{"this node (" + options_.self + ") is not in the member list it joins with"};
  }
  // The list it joins from is one the members hand its keys by: remembered (MayHand).
  const auto before =
      std::make_shared<const ClusterRing>(ClusterRing{Ring(std::move(previous)), 0});
  MutexLock change(change_mu_);
  {
    MutexLock lock(mu_);  // the gate gives way to the real waits
    for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) {
      uint8_t gate = kAnySource;
      pending_[slot].compare_exchange_strong(gate, 0);
    }
    Remember(before);
  }
  if (!Adopt(&before->ring, std::move(next))) OpenGate();
  return Status::Ok();
}

void Ownership::Publish(std::shared_ptr<const ClusterRing> next) {
  const std::shared_ptr<const ClusterRing> current = current_.load();
  if (current != next) Remember(current);
  current_.store(std::move(next));
}

void Ownership::Remember(std::shared_ptr<const ClusterRing> list) {
  recent_.push_front(std::move(list));
  if (recent_.size() > kRecentLists) recent_.pop_back();
}

void Ownership::Queue(Job job) {
  jobs_.push_back(std::move(job));
  counters_.jobs.fetch_add(1);
  jobs_cv_.NotifyAll();
}

std::vector<std::shared_ptr<const ClusterRing>> Ownership::KnownLists() const {
  std::vector<std::shared_ptr<const ClusterRing>> known{current_.load()};
  MutexLock lock(mu_);
  known.insert(known.end(), recent_.begin(), recent_.end());
  return known;
}

bool Ownership::MayHand(const std::string& from, uint32_t slot,
                        const std::vector<std::shared_ptr<const ClusterRing>>& known) const {
  const auto owner = [slot](const Ring& ring) -> const std::string& {
    return ring.members()[ring.OwnerOfSlot(slot)];
  };
  const Ring& now = known.front()->ring;
  if (now.empty()) return false;  // a standalone node takes nobody's keys
  // Only a member of a list this node held lately hands it anything.
  if (std::none_of(known.begin(), known.end(),
                   [&](const auto& list) { return Lists(list->ring, from); })) {
    return false;
  }
  // This node lags behind the sender's list: the sender still owns the slot by this node's
  // list, so the state is the sender's own to give.
  if (owner(now) == from) return true;
  if (leaving_.load()) {
    // A node that leaves takes what a member that did not know it yet sends it, to pass on
    // to the owners by its list: the sender's own slots only.
    for (size_t i = 1; i < known.size(); ++i) {
      if (!known[i]->ring.empty() && owner(known[i]->ring) == from) return true;
    }
    return false;
  }
  if (owner(now) != options_.self) return false;  // a third member's: never
  // A member that has left may also pass on what another leaver handed it before it heard of
  // the other's leave (it forwards to the owner by its list): keys of a slot some member that
  // is gone now owned, never a live member's.
  const bool from_left = IndexOf(now, from) < 0;
  for (size_t i = 1; i < known.size(); ++i) {
    if (known[i]->ring.empty()) continue;
    const std::string& then = owner(known[i]->ring);
    if (then == from || (from_left && IndexOf(now, then) < 0)) return true;
  }
  return false;
}

void Ownership::OpenGate() {
  MutexLock lock(mu_);
  int64_t count = 0;
  for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) {
    uint8_t gate = kAnySource;
    pending_[slot].compare_exchange_strong(gate, 0);
    count += pending_[slot].load() != 0;
  }
  pending_count_.store(count);
}

void Ownership::Handed(const std::string& from, uint64_t generation) {
  MutexLock lock(mu_);
  if (handed_.size() > 4 * Ring::kMaxMembers) handed_.clear();  // names that come and go
  uint64_t& done = handed_[from];
  done = std::max(done, generation);
  if (pending_count_.load() == 0) return;
  std::vector<bool> ends(waits_.size() + 1, false);
  for (size_t i = 0; i < waits_.size() && i + 1 < kAnySource; ++i) {
    ends[i + 1] = waits_[i].from == from && waits_[i].generation <= generation;
  }
  int64_t count = 0;
  for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) {
    const uint8_t p = pending_[slot].load(std::memory_order_relaxed);
    if (p != 0 && p < ends.size() && ends[p]) {
      pending_[slot].store(0, std::memory_order_relaxed);
    } else {
      count += p != 0;
    }
  }
  pending_count_.store(count);
  if (count == 0) waits_.clear();
}

void Ownership::ExpireWaits(int64_t now) {
  if (pending_count_.load() == 0) return;
  MutexLock lock(mu_);
  if (pending_count_.load() == 0 || now < waits_until_ms_) return;
  // Whoever held these keys did not hand them over in time (killed, cut off): they start
  // fresh here, which is the crash promise (at most one burst per key).
  for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) pending_[slot].store(0);
  counters_.waits_expired.fetch_add(pending_count_.load());
  pending_count_.store(0);
  waits_.clear();
}

std::optional<Ownership::Job> Ownership::TakeJob(std::chrono::milliseconds wait) {
  MutexLock lock(mu_);
  if (!jobs_cv_.WaitFor(lock, wait, [this] {
        mu_.AssertHeld();
        return !jobs_.empty();
      })) {
    return std::nullopt;
  }
  Job job = std::move(jobs_.front());
  jobs_.pop_front();
  ++jobs_running_;
  return job;
}

void Ownership::JobDone() {
  MutexLock lock(mu_);
  --jobs_running_;
}

void Ownership::ForwardReceived() {
  MutexLock lock(mu_);
  if (!jobs_.empty()) return;  // the job queued will send them
  const std::shared_ptr<const ClusterRing> m = current_.load();
  Queue({m, m, {}});
}

int64_t Ownership::jobs_in_progress() const {
  MutexLock lock(mu_);
  return static_cast<int64_t>(jobs_.size()) + jobs_running_;
}

}  // namespace limiter
