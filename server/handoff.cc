#include "server/handoff.h"

#include <algorithm>

#include "common/limits.h"
#include "common/member_list.h"
#include "protocol/rules.h"
#include "protocol/state_transfer.h"
#include "protocol/wire.h"
#include "server/durable_store.h"
#include "server/policy_clock.h"
#include "server/region_shares.h"
#include "server/store.h"

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

Handoff::Handoff(const PolicyTable& policies, const Clock& clock, Store& store,
                 DurableStore* durable, RegionShares* regions, Ownership& ownership,
                 Options options, FrameBarrier barrier)
    : policies_(policies),
      clock_(clock),
      store_(store),
      durable_(durable),
      regions_(regions),
      ownership_(ownership),
      options_(std::move(options)),
      barrier_(std::move(barrier)) {}

std::optional<HandoffStats> Handoff::RunNext(const Sink& send, std::chrono::milliseconds wait) {
  std::optional<Ownership::Job> job = ownership_.TakeJob(wait);
  if (!job) return std::nullopt;
  const HandoffStats stats =
      Export(*job, send,
             std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.deadline_ms));
  ownership_.JobDone();
  return stats;
}

HandoffStats Handoff::Export(const Ownership::Job& job, const Sink& send,
                             std::chrono::steady_clock::time_point deadline) {
  HandoffStats stats;
  // Frames begun under the old ring may still charge keys it gives away: wait for them to
  // end (later frames see the new ring, and are answered WrongOwner for these keys).
  barrier_(deadline);
  // A leaving node hands its keys by the latest list it knows (a member that left meanwhile
  // is out of it), whichever change queued the job.
  const bool leaving = ownership_.leaving();
  const std::shared_ptr<const ClusterRing> to_list = leaving ? ownership_.current() : job.to;
  const Ring& to = to_list->ring;
  if (to.empty()) return stats;  // nobody left to hand to
  const int self = IndexOf(to, options_.self);
  // A list adopted since the job was made may give a key back to this node (a member that
  // left and came back): the node keeps what it owns now.
  const std::shared_ptr<const ClusterRing> now_list = ownership_.current();
  const int self_now = leaving ? -1 : IndexOf(now_list->ring, options_.self);
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
    const auto handoff = wire::CreateHandoff(fbb, from, to_list->generation, policies_.digest(),
                                             seed, now, records, splits, done);
    const std::span<const uint8_t> body =
        FinishPeerRequest(fbb, wire::OpType::Handoff, wire::CreatePeer(fbb, 0, 0, handoff));
    if (std::chrono::steady_clock::now() >= deadline) {  // too late: nothing more is sent
      stats.keys_lost += keys;
      return;
    }
    ++stats.batches;
    stats.splits_sent += static_cast<int64_t>(b->splits.size());
    const int64_t taken = send(to.members()[owner], body);
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
  const auto& policies = policies_.set().policies();
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
    const auto [share, state_share] = regions_ && policies_.global(policy)
                                          ? regions_->Carried(id)
                                          : std::pair<int64_t, int64_t>{0, 0};
    b.keys.push_back(wire::CreateKeyRecord(b.fbb, id.lo, id.hi, static_cast<uint16_t>(policy),
                                           b.fbb.CreateVector(fields), share, state_share));
    if (policies_.durable(policy)) b.durable_ids.push_back(id);
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
  counters_.keys_sent.fetch_add(stats.keys_sent);
  counters_.keys_lost.fetch_add(stats.keys_lost);
  return stats;
}

std::variant<Handoff::Received, Handoff::Refused> Handoff::Receive(const wire::Handoff& batch,
                                                                   const std::string& from,
                                                                   int64_t now) {
  const wire::Handoff* h = &batch;
  // Only a member of a list this node held lately.
  const std::vector<std::shared_ptr<const ClusterRing>> known = ownership_.KnownLists();
  const bool member = std::any_of(known.begin(), known.end(),
                                  [&](const auto& m) { return IndexOf(m->ring, from) >= 0; });
  if (!member) {
    counters_.refused_batches.fetch_add(1);
    return Refused{wire::Status::Forbidden,
                   "hand-off from " + from +
                       " refused: it is not a member of this node's list, nor of the lists it "
                       "held lately"};
  }
  if (h->policies() != policies_.digest() || h->key_seed() != KeyIdSeedDigest()) {
    counters_.refused_batches.fetch_add(1);
    return Refused{wire::Status::BadRequest,
                   "hand-off from " + from + " refused: " +
                       (h->policies() != policies_.digest()
                            ? "its policy file differs from this node's"
                            : "its key-id seed differs from this node's (the cluster secret "
                              "each node started with)")};
  }
  Received r;
  const auto& policies = policies_.set().policies();
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
      if (!ownership_.MayHand(from, RingSlotOf(id), known)) {
        counters_.keys_refused.fetch_add(1);
        refuse(i, "its ring slot " + std::to_string(RingSlotOf(id)) +
                      " is not one this node "
                      "gains from " +
                      from);
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
        if (policies_.durable(policy)) {
          r.durable_seq = std::max(r.durable_seq, durable_->Write(policy, id, {}, kept, key_now));
        }
        store_.Pack(policy, std::move(kept), slot);
      } else {
        if (policies_.durable(policy)) {
          // On disk only (not used since this node started): keep the stricter of the two.
          Result<std::optional<KeyLimiter>> stored = durable_->Read(policy, id, key_now);
          if (!stored) {
            refuse(i, stored.error());
            continue;
          }
          if (*stored)
            **state = StricterOf(p.rate, std::move(**state), std::move(**stored), key_now);
        }
        if (!store_.TryReserve(policy, store_.NewKeyUnits(policy))) {
          store_.NoteRefusal(policy);
          counters_.keys_refused.fetch_add(1);
          refuse(i, "the node holds max_keys key units");
          continue;
        }
        if (policies_.durable(policy)) {
          // Handed over by id: its strings are not known here (DurableKeyName::kIdOnly).
          r.durable_seq =
              std::max(r.durable_seq, durable_->Write(policy, id, {}, **state, key_now));
        }
        store_.Pack(policy, std::move(**state), store_.Insert(policy, id));
        if (regions_ && policies_.global(policy) && k->share() > 0) {
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
          s->key()->size() > kMaxKeyBytes || !protocol::SplitError(s->k(), 0).ok() ||
          !ownership_.MayHand(from, RingSlotOf(id), known)) {
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
      counters_.splits_received.fetch_add(1);
    }
  }
  counters_.keys_received.fetch_add(taken);
  // Sent here by a member that did not know this node leaves: they go on to their owner by
  // this node's list, before this node's last `done`.
  if (taken > 0 && ownership_.leaving()) ownership_.ForwardReceived();
  // A `done` ends waits for `from`'s keys: only for a generation this node could have seen
  // (not one far in the future, which would make it skip every later wait for `from`).
  if (h->done() && h->generation() <= WallClockGeneration() + kMaxGenerationAheadMs) {
    ownership_.Handed(from, h->generation());
  }
  r.taken = taken;
  if (refused > 0) {
    r.error = std::to_string(refused) + " keys not taken; first: " + first_error;
  }
  return r;
}

}  // namespace limiter
