// Node: the hand-off of keys between nodes when the member list changes (see "Hand-off" in
// node.h). Only the two rings decide who gives what to whom: a key's id carries its ring slot
// (key_id.h), so a node finds what it gives up, and to whom, from its store alone.
#include <xxhash.h>

#include <algorithm>
#include <thread>

#include "common/limits.h"
#include "common/membership.h"
#include "common/protocol.h"
#include "common/state_transfer.h"
#include "common/wire.h"
#include "server/durable_store.h"
#include "server/node_internal.h"
#include "server/policy_clock.h"

namespace limiter {
namespace {

// A batch holds at most this many keys, and is sent once its records pass kBatchBytes: far
// below the node's frame bound (1 MiB by default) whatever the keys.
constexpr size_t kBatchKeys = 4096;
constexpr size_t kBatchBytes = 256 * 1024;

int IndexOf(const Ring& ring, const std::string& member) {
  const auto& m = ring.members();
  const auto it = std::find(m.begin(), m.end(), member);
  return it == m.end() ? -1 : static_cast<int>(it - m.begin());
}

// The records for one destination, until they are sent.
struct Batch {
  flatbuffers::FlatBufferBuilder fbb{64 * 1024};
  std::vector<flatbuffers::Offset<wire::KeyRecord>> keys;
  std::vector<flatbuffers::Offset<wire::SplitRecord>> splits;
  // Durable keys in it: their records are erased once the receiver took the whole batch (a
  // batch not taken leaves them here, the stricter copy should the keys come back).
  std::vector<KeyId> durable_ids;
  bool full() const { return keys.size() >= kBatchKeys || fbb.GetSize() >= kBatchBytes; }
};

}  // namespace

uint64_t Node::PolicyDigest() const {
  // What a record's reader depends on: the policies' order, algorithms and rates.
  std::string text;
  for (const Policy& p : policies_.policies()) {
    text += p.name + '\n' + std::to_string(static_cast<int>(p.algorithm)) + ' ' +
            std::to_string(static_cast<int>(p.scope)) + ' ' +
            std::to_string(p.rate.limit()) + ' ' + std::to_string(p.rate.window_ms()) + ' ' +
            std::to_string(p.rate.burst()) + ' ' + std::to_string(p.parent_index) + '\n';
  }
  return XXH3_64bits(text.data(), text.size());
}

bool Node::Adopt(const Ring* before_override, std::shared_ptr<const Membership> next,
                 uint64_t wait_generation) {
  if (wait_generation == 0) wait_generation = next->generation;
  std::lock_guard<std::mutex> lock(handoff_mu_);
  const std::shared_ptr<const Membership> current = membership_.load();
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
    const bool owned_after = after.empty() || static_cast<int>(after.OwnerOfSlot(slot)) == self_after;
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
        pending.store(wait_of[o] < kAnySource - 1 ? static_cast<uint8_t>(wait_of[o] + 1)
                                                  : kAnySource,
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
  if (gives && !after.empty()) {
    jobs_.push_back({current, std::move(next), {}});
    handoff_counters_.jobs.fetch_add(1);
    jobs_cv_.notify_all();
  }
  return true;
}

void Node::Leave(uint64_t generation) {
  std::lock_guard<std::mutex> change(change_mu_);
  const std::shared_ptr<const Membership> current = membership_.load();
  std::vector<std::string> others;
  for (const std::string& m : current->ring.members()) {
    if (m != options_.self) others.push_back(m);
  }
  if (others.empty()) return;  // the last node: nobody to hand to, so it serves to the end
  // Newer than the list in use, which may have moved on since `generation` was announced.
  generation = std::max(generation, current->generation + 1);
  auto next = std::make_shared<const Membership>(Membership{Ring(std::move(others)), generation});
  std::lock_guard<std::mutex> lock(handoff_mu_);
  leaving_.store(true);
  for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) pending_[slot].store(0);
  pending_count_.store(0);
  waits_.clear();
  const std::shared_ptr<const Membership> from = membership_.load();
  Publish(next);
  jobs_.push_back({from, std::move(next), {}});
  handoff_counters_.jobs.fetch_add(1);
  jobs_cv_.notify_all();
}

std::optional<std::string> Node::Join(std::vector<std::string> previous,
                                      std::vector<std::string> members, uint64_t generation) {
  auto next = std::make_shared<const Membership>(Membership{Ring(std::move(members)), generation});
  if (IndexOf(next->ring, options_.self) < 0) {
    return "this node (" + options_.self + ") is not in the member list it joins with";
  }
  // The list it joins from is one the members hand its keys by: remembered (MayHand).
  const auto before = std::make_shared<const Membership>(Membership{Ring(std::move(previous)), 0});
  std::lock_guard<std::mutex> change(change_mu_);
  {
    std::lock_guard<std::mutex> lock(handoff_mu_);  // the gate gives way to the real waits
    for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) {
      uint8_t gate = kAnySource;
      pending_[slot].compare_exchange_strong(gate, 0);
    }
    RememberLocked(before);
  }
  if (!Adopt(&before->ring, std::move(next))) OpenGate();
  return std::nullopt;
}

void Node::Publish(std::shared_ptr<const Membership> next) {
  const std::shared_ptr<const Membership> current = membership_.load();
  if (current != next) RememberLocked(current);
  membership_.store(std::move(next));
}

void Node::RememberLocked(std::shared_ptr<const Membership> list) {
  recent_.push_front(std::move(list));
  if (recent_.size() > kRecentLists) recent_.pop_back();
}

std::vector<std::shared_ptr<const Node::Membership>> Node::KnownMemberships() const {
  std::vector<std::shared_ptr<const Membership>> known{membership_.load()};
  std::lock_guard<std::mutex> lock(handoff_mu_);
  known.insert(known.end(), recent_.begin(), recent_.end());
  return known;
}

bool Node::MayHand(const std::string& from, uint32_t slot,
                   const std::vector<std::shared_ptr<const Membership>>& known) const {
  const auto owner = [slot](const Ring& ring) -> const std::string& {
    return ring.members()[ring.OwnerOfSlot(slot)];
  };
  const Ring& now = known.front()->ring;
  if (now.empty()) return false;  // a standalone node takes nobody's keys
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

void Node::OpenGate() {
  std::lock_guard<std::mutex> lock(handoff_mu_);
  int64_t count = 0;
  for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) {
    uint8_t gate = kAnySource;
    pending_[slot].compare_exchange_strong(gate, 0);
    count += pending_[slot].load() != 0;
  }
  pending_count_.store(count);
}

void Node::Handed(const std::string& from, uint64_t generation) {
  std::lock_guard<std::mutex> lock(handoff_mu_);
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

void Node::ExpireWaits(int64_t now) {
  if (pending_count_.load() == 0) return;
  std::lock_guard<std::mutex> lock(handoff_mu_);
  if (pending_count_.load() == 0 || now < waits_until_ms_) return;
  // Whoever held these keys did not hand them over in time (killed, cut off): they start
  // fresh here, which is the crash promise (at most one burst per key).
  for (uint32_t slot = 0; slot < Ring::kSlots; ++slot) pending_[slot].store(0);
  handoff_counters_.waits_expired.fetch_add(pending_count_.load());
  pending_count_.store(0);
  waits_.clear();
}

int64_t Node::handoffs_in_progress() const {
  std::lock_guard<std::mutex> lock(handoff_mu_);
  return static_cast<int64_t>(jobs_.size()) + jobs_running_;
}

std::optional<HandoffStats> Node::RunNextHandoff(const HandoffSink& send,
                                                 std::chrono::milliseconds wait) {
  HandoffJob job;
  {
    std::unique_lock<std::mutex> lock(handoff_mu_);
    if (!jobs_cv_.wait_for(lock, wait, [this] { return !jobs_.empty(); })) return std::nullopt;
    job = std::move(jobs_.front());
    jobs_.pop_front();
    ++jobs_running_;
  }
  const HandoffStats stats =
      Export(job, send,
             std::chrono::steady_clock::now() +
                 std::chrono::milliseconds(options_.handoff_deadline_ms));
  std::lock_guard<std::mutex> lock(handoff_mu_);
  --jobs_running_;
  return stats;
}

HandoffStats Node::Export(const HandoffJob& job, const HandoffSink& send,
                          std::chrono::steady_clock::time_point deadline) {
  HandoffStats stats;
  // Frames begun under the old ring may still charge keys it gives away: wait for them to
  // end (later frames see the new ring, and are answered WrongOwner for these keys).
  {
    std::vector<std::pair<std::atomic<uint64_t>*, uint64_t>> busy;
    {
      std::lock_guard<std::mutex> lock(workers_mu_);
      for (const auto& w : workers_) {
        const uint64_t seq = w->counters.frame_seq.load(std::memory_order_acquire);
        if (seq % 2 == 1) busy.emplace_back(&w->counters.frame_seq, seq);
      }
    }
    for (auto& [seq, seen] : busy) {
      while (seq->load(std::memory_order_acquire) == seen &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }
  // A leaving node hands its keys by the latest list it knows (a member that left meanwhile
  // is out of it), whichever change queued the job.
  const std::shared_ptr<const Membership> to_list = leaving_.load() ? membership_.load() : job.to;
  const Ring& to = to_list->ring;
  if (to.empty()) return stats;  // nobody left to hand to
  const int self = IndexOf(to, options_.self);
  // A list adopted since the job was made may give a key back to this node (a member that
  // left and came back): the node keeps what it owns now.
  const std::shared_ptr<const Membership> now_list = membership_.load();
  const int self_now = leaving_.load() ? -1 : IndexOf(now_list->ring, options_.self);
  const auto gives = [&](const KeyId& id) {
    const uint32_t slot = RingSlotOf(id);
    return static_cast<int>(to.OwnerOfSlot(slot)) != self &&
           (self_now < 0 || static_cast<int>(now_list->ring.OwnerOfSlot(slot)) != self_now);
  };
  std::vector<std::unique_ptr<Batch>> batches(to.members().size());
  const auto batch_for = [&](size_t owner) -> Batch& {
    if (!batches[owner]) batches[owner] = std::make_unique<Batch>();
    return *batches[owner];
  };
  const int64_t now = clock_.NowMs();
  const uint64_t seed = KeyIdSeedDigest();
  // Batches are sent with no stripe locked (a send may wait on the network): one that fills up
  // under a stripe's lock waits in `ready` until the lock is let go.
  std::vector<std::pair<size_t, std::unique_ptr<Batch>>> ready;
  const auto send_batch = [&](size_t owner, std::unique_ptr<Batch> b, bool done) {
    if (!b) b = std::make_unique<Batch>();
    const int64_t keys = static_cast<int64_t>(b->keys.size());
    auto& fbb = b->fbb;
    const auto records = fbb.CreateVector(b->keys);
    const auto splits = fbb.CreateVector(b->splits);
    const auto from = fbb.CreateString(options_.self);
    const auto handoff = wire::CreateHandoff(fbb, from, to_list->generation, policy_digest_, seed,
                                             now, records, splits, done);
    const std::span<const uint8_t> body =
        FinishPeerRequest(fbb, wire::OpType::Handoff, wire::CreatePeer(fbb, 0, 0, handoff));
    ++stats.batches;
    stats.splits_sent += static_cast<int64_t>(b->splits.size());
    const int64_t taken = std::chrono::steady_clock::now() < deadline
                              ? send(to.members()[owner], body)
                              : -1;
    stats.keys_sent += std::max<int64_t>(0, taken);
    stats.keys_lost += keys - std::max<int64_t>(0, taken);
    if (taken == keys) {
      for (const KeyId& id : b->durable_ids) durable_->Erase(id);
    }
  };

  const auto flush = [&](size_t owner, bool done) {
    send_batch(owner, std::move(batches[owner]), done);
  };
  // A record must leave room in a frame of the receiver's (as large as this node's, one
  // policy file): a sliding log bigger than a batch cannot move, and is counted lost.
  const size_t max_record = std::min<size_t>(kBatchBytes, options_.max_frame_bytes / 4);

  std::vector<KeyId> ids;
  std::vector<int64_t> fields;
  const auto& policies = policies_.policies();
  // One key's state into its new owner's batch (a state too large for one is counted lost).
  const auto add = [&](int policy, const KeyId& id, const KeyLimiter& state, int64_t key_now) {
    fields.clear();
    ExportState(state, key_now, fields);
    const size_t owner = to.OwnerOfSlot(RingSlotOf(id));
    if (fields.size() * sizeof(int64_t) + 64 > max_record) {
      ++stats.keys_lost;
      return;
    }
    Batch& b = batch_for(owner);
    const auto [share, state_share] = regions_ && global_[static_cast<size_t>(policy)]
                                          ? regions_->Carried(id)
                                          : std::pair<int64_t, int64_t>{0, 0};
    b.keys.push_back(wire::CreateKeyRecord(b.fbb, id.lo, id.hi, static_cast<uint16_t>(policy),
                                           b.fbb.CreateVector(fields), share, state_share));
    if (durable_policy_[static_cast<size_t>(policy)]) b.durable_ids.push_back(id);
    if (b.full()) ready.emplace_back(owner, std::move(batches[owner]));
  };
  // Durable keys this node holds on disk only (not used since it started) go too; those in
  // memory are the stripes' below.
  if (durable_) {
    durable_->ForEach(gives, [&](const KeyId& id, int policy, const KeyLimiter& state) {
      const size_t stripe = store_.StripeOf(id);
      {
        Store::StripeLock lock(store_, {&stripe, 1});
        if (store_.Find(policy, id) != nullptr) return;
      }
      add(policy, id, state, PolicyNowMs(policies[static_cast<size_t>(policy)], clock_));
      for (auto& [owner, b] : ready) send_batch(owner, std::move(b), false);
      ready.clear();
    });
  }
  for (size_t stripe = 0; stripe < store_.stripe_count(); ++stripe) {
    {
      Store::StripeLock lock(store_, {&stripe, 1});
      for (size_t policy = 0; policy < policies.size(); ++policy) {
        const int pi = static_cast<int>(policy);
        ids.clear();
        store_.KeysIn(stripe, pi, gives, ids);
        const int64_t key_now = PolicyNowMs(policies[policy], clock_);
        for (const KeyId& id : ids) {
          const KeyLimiter state = store_.Unpack(pi, store_.Find(pi, id));
          if (!state.IsFresh(policies[policy].rate, key_now)) add(pi, id, state, key_now);
          store_.Erase(pi, id);
        }
      }
    }
    for (auto& [owner, b] : ready) send_batch(owner, std::move(b), false);
    ready.clear();
  }
  // Splits go with their key: the new owner hands out the same sub-buckets.
  store_.VisitSplits([&](const KeyId& id, Store::Split& split) {
    if (!gives(id)) return false;
    Batch& b = batch_for(to.OwnerOfSlot(RingSlotOf(id)));
    b.splits.push_back(wire::CreateSplitRecord(
        b.fbb, id.lo, id.hi, static_cast<uint16_t>(split.policy), b.fbb.CreateString(split.key),
        split.k, split.epoch, split.valid_until_ms - now, split.rate, split.merging));
    return true;
  });
  // Every other member hears `done`, even with nothing for it: it waits for that. A job for
  // one member's sake (a listed joiner, MemberJoins) says it to that member only: the others
  // may wait for this node's part of a change it has not adopted yet.
  for (size_t owner = 0; owner < to.members().size(); ++owner) {
    if (static_cast<int>(owner) == self) continue;
    if (job.done_to.empty() || job.done_to == to.members()[owner]) {
      flush(owner, true);
    } else if (batches[owner]) {
      flush(owner, false);
    }
  }
  handoff_counters_.keys_sent.fetch_add(stats.keys_sent);
  handoff_counters_.keys_lost.fetch_add(stats.keys_lost);
  return stats;
}

void Node::HandoffOp(Worker& w, int64_t now, OpResult& r) {
  const wire::Handoff* h = w.peer ? w.peer->handoff() : nullptr;
  if (h == nullptr || h->from() == nullptr || h->from()->size() == 0) {
    return r.Fail(wire::Status::BadRequest,
                  "HANDOFF needs the frame's peer.handoff table, naming `from`");
  }
  const std::string from = h->from()->str().substr(0, kMaxNameBytes);
  // Only a peer, only for itself, and only a member of a list this node held lately.
  if (auto refused = PeerOpRefusal(w, "HANDOFF", &from)) {
    return r.Fail(wire::Status::Forbidden, *refused);
  }
  const std::vector<std::shared_ptr<const Membership>> known = KnownMemberships();
  const bool member = std::any_of(known.begin(), known.end(), [&](const auto& m) {
    return IndexOf(m->ring, from) >= 0;
  });
  if (!member) {
    handoff_counters_.refused_batches.fetch_add(1);
    return r.Fail(wire::Status::Forbidden,
                  "hand-off from " + from +
                      " refused: it is not a member of this node's list, nor of the lists it "
                      "held lately");
  }
  if (h->policies() != policy_digest_ || h->key_seed() != KeyIdSeedDigest()) {
    handoff_counters_.refused_batches.fetch_add(1);
    return r.Fail(wire::Status::BadRequest,
                  "hand-off from " + from + " refused: " +
                      (h->policies() != policy_digest_
                           ? "its policy file differs from this node's"
                           : "its key-id seed differs from this node's (the cluster secret "
                             "each node started with)"));
  }
  const auto& policies = policies_.policies();
  int64_t taken = 0, refused = 0;
  std::string first_error;
  const auto refuse = [&](size_t i, const std::string& why) {
    ++refused;
    if (first_error.empty()) first_error = "keys[" + std::to_string(i) + "]: " + why;
  };
  if (const auto* keys = h->keys()) {
    for (flatbuffers::uoffset_t i = 0; i < keys->size(); ++i) {
      const wire::KeyRecord* k = keys->Get(i);
      const KeyId id{k->id_lo(), k->id_hi()};
      if (k->policy() >= policies.size() || (id.lo | id.hi) == 0) {
        refuse(i, "no such policy or key id");
        continue;
      }
      if (!MayHand(from, RingSlotOf(id), known)) {
        handoff_counters_.keys_refused.fetch_add(1);
        refuse(i, "its ring slot " + std::to_string(RingSlotOf(id)) + " is not one this node "
               "gains from " + from);
        continue;
      }
      const int policy = k->policy();
      const Policy& p = policies[policy];
      const std::span<const int64_t> fields =
          k->state() ? std::span<const int64_t>(k->state()->data(), k->state()->size())
                     : std::span<const int64_t>();
      const int64_t key_now = PolicyNowMs(p, clock_);
      Result<std::optional<KeyLimiter>> state = ImportState(p.algorithm, p.rate, fields, key_now);
      if (!state) {
        refuse(i, state.error());
        continue;
      }
      if (!*state) continue;  // fresh by now: nothing to keep
      const size_t stripe = store_.StripeOf(id);
      Store::StripeLock lock(store_, {&stripe, 1});
      if (Slot* slot = store_.Find(policy, id)) {
        // Served here meanwhile (a wait that expired): keep the stricter of the two.
        KeyLimiter mine = store_.Take(policy, slot, key_now);
        KeyLimiter kept = StricterOf(p.rate, std::move(**state), std::move(mine), key_now);
        if (durable_policy_[static_cast<size_t>(policy)]) {
          r.durable_seq = std::max(r.durable_seq, durable_->Write(policy, id, {}, kept, key_now));
        }
        store_.Pack(policy, std::move(kept), slot);
      } else {
        if (durable_policy_[static_cast<size_t>(policy)]) {
          // On disk only (not used since this node started): keep the stricter of the two.
          Result<std::optional<KeyLimiter>> stored = durable_->Read(policy, id, key_now);
          if (!stored) {
            refuse(i, stored.error());
            continue;
          }
          if (*stored) **state = StricterOf(p.rate, std::move(**state), std::move(**stored), key_now);
        }
        if (!store_.TryReserve(policy, store_.NewKeyUnits(policy))) {
          store_.NoteRefusal(policy);
          handoff_counters_.keys_refused.fetch_add(1);
          refuse(i, "the node holds max_keys key units");
          continue;
        }
        if (durable_policy_[static_cast<size_t>(policy)]) {
          // Handed over by id: its strings are not known here (DurableKeyName::kIdOnly).
          r.durable_seq = std::max(r.durable_seq, durable_->Write(policy, id, {}, **state, key_now));
        }
        store_.Pack(policy, std::move(**state), store_.Insert(policy, id));
        if (regions_ && global_[static_cast<size_t>(policy)] && k->share() > 0) {
          regions_->Adopt(policy, id, k->share(), k->state_share(), now);  // its share too
        }
      }
      ++taken;
    }
  }
  if (const auto* splits = h->splits()) {
    for (const wire::SplitRecord* s : *splits) {
      const KeyId id{s->id_lo(), s->id_hi()};
      if (s->policy() >= policies.size() || s->key() == nullptr || s->key()->size() == 0 ||
          s->key()->size() > kMaxKeyBytes || protocol::SplitError(s->k(), 0) ||
          !MayHand(from, RingSlotOf(id), known)) {
        continue;
      }
      const size_t stripe = store_.StripeOf(id);
      Store::StripeLock lock(store_, {&stripe, 1});
      if (store_.FindSplit(id) != nullptr) continue;
      Store::Split& split = store_.AddSplit(id);
      split.policy = s->policy();
      split.key = s->key()->str();
      split.k = s->k();
      split.epoch = s->epoch();
      split.valid_until_ms = now + std::clamp<int64_t>(s->valid_ms(), 0, 24 * 3600 * 1000);
      split.rate = split.last_tick_rate = std::max<int64_t>(0, s->rate());
      split.merging = s->merging();
      handoff_counters_.splits_received.fetch_add(1);
    }
  }
  handoff_counters_.keys_received.fetch_add(taken);
  if (taken > 0 && leaving_.load()) {
    // Sent here by a member that did not know this node leaves: they go on to their owner
    // by this node's list, before this node's last `done`.
    std::lock_guard<std::mutex> lock(handoff_mu_);
    if (jobs_.empty()) {
      const std::shared_ptr<const Membership> m = membership_.load();
      jobs_.push_back({m, m, {}});
      handoff_counters_.jobs.fetch_add(1);
      jobs_cv_.notify_all();
    }
  }
  // A `done` ends waits for `from`'s keys: only for a generation this node could have seen
  // (not one far in the future, which would make it skip every later wait for `from`).
  if (h->done() && h->generation() <= WallClockGeneration() + kMaxGenerationAheadMs) {
    Handed(from, h->generation());
  }
  r.reply.granted = taken;
  if (refused > 0) {
    r.error = std::to_string(refused) + " keys not taken; first: " + first_error;
  }
}

}  // namespace limiter
