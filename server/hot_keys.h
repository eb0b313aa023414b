// HotKeys: a node's hot keys (docs/features/hot-keys.md). Operations are sampled into a sketch
// per worker; once a second Tick merges them, splits each key past the threshold into k
// sub-buckets spread over the cluster (placed by hashing "key#i"), and merges back those whose
// clients report little traffic. The key's owner keeps the split's record beside the key
// (Store::Split) and answers the key's ops with a view of it instead of charging it.
//
// The promise through a split and a merge: a key split at T stops charging its own bucket at T,
// and its sub-buckets start drained, so over any interval it admits at most B + L*t/W in all.
// A merge is the same in reverse: the owner stops renewing the split, waits until every view
// of it has lapsed (plus a margin and the clock skew a token is honoured for), and reopens the
// key drained.
//
// Thread-safety: Record on its worker's thread (its sampler's lock is shared only with Tick);
// the view functions need the key's stripe locked (the store's rule for a split's record);
// Tick and Top on any thread, serialized by mu_.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/hot_key_sketch.h"
#include "common/mutex.h"
#include "common/rate.h"
#include "protocol/auth.h"
#include "protocol/key_id.h"
#include "protocol/rules.h"
#include "server/policy_table.h"
#include "server/store.h"

namespace limiter {

class Authenticator;

struct HotKeyOptions {
  size_t sketch_capacity = 256;   // counters per worker
  int sample_every = 4;           // count one operation in this many
  int64_t split_above = 10'000;   // ops/s on this node that split a key; 0: never
  double split_share = 0;         // or this share of the node's ops (at least 1000/s); 0: off
  int split_k = 4;                // sub-buckets: a power of two, 2 to 64
  int64_t merge_below = 0;        // ops/s, for 3 s, that merge it back; 0: split_above / 4
  int64_t split_valid_ms = 2000;  // a client renews its view of a split within this
};

class HotKeys {
 public:
  HotKeys(const PolicyTable& policies, const Clock& clock, Store& store, const Authenticator& auth,
          HotKeyOptions options);

  // One worker's sample of its operations. Owned by HotKeys; stable address.
  class Sampler {
   public:
    explicit Sampler(size_t capacity) : sketch_(capacity) {}

   private:
    friend class HotKeys;
    Mutex mu_;
    HotKeySketch sketch_ LIMITER_GUARDED_BY(mu_);
    uint32_t sampled_ = 0;  // the worker's own
    std::string display_;   // scratch: a sub-bucket's name
  };
  Sampler& AddSampler();

  // Samples one op's own limits (its entries' policy, key, id and split), one op in
  // sample_every. Entries: a range of objects with those members (the node's op entries).
  template <class Entries>
  void Record(Sampler& s, const Entries& entries, size_t own, bool denied);

  // A split key's view, for a reply: its k and epoch, how long the view is valid, and the
  // token that lets another node check it (none without a secret). retry_after_ms: a merging
  // split with no view left to hand out reopens then.
  struct View {
    uint16_t k = 0;
    uint32_t epoch = 0;
    int64_t valid_ms = 0;
    int64_t retry_after_ms = 0;
    std::optional<auth::SplitToken> token;
  };
  // With the key's stripe locked: the view of the key's split to hand one more client, or
  // nullopt when it is not split (or has just reopened, drained).
  std::optional<View> ViewOf(int policy, const KeyId& id, std::string_view key, int64_t now);
  // SPLIT: the same, locking the stripe, after counting the ops a client reports having sent
  // to the sub-buckets.
  std::optional<View> Renew(int policy, const KeyId& id, std::string_view key, int64_t reported,
                            int64_t now);
  // INSPECT: the key's split as it stands, handing out no view; nullopt when not split. With
  // the key's stripe locked.
  std::optional<View> Inspect(int policy, const KeyId& id, std::string_view key, int64_t now);
  // On the key's owner, an op on a sub-bucket of split (k, epoch): true when that is the split
  // in force; else the split now (nullopt: none) is put in `now_view`.
  bool SplitInForce(int policy, std::string_view key, uint16_t k, uint32_t epoch, int64_t now,
                    std::optional<View>& now_view);

  // The policy's sub-buckets split k ways: sub-bucket `index`'s rate, or nullopt when the
  // policy cannot be split (nesting, durable, calendar, global, or k too large for its rate).
  std::optional<Rate> SubBucketRate(int policy, uint16_t k, uint16_t index) const;
  bool Splittable(int policy) const;

  // Once a second: ends the sketches' epoch, splits what got hot, merges back what cooled
  // down, reopens merged keys, and ranks the hottest keys for Top.
  void Tick();
  struct HotKey {
    std::string policy;
    std::string key;     // a sub-bucket shows as "key#i"
    int64_t rate = 0;    // ops/s in the last second
    int64_t denied = 0;  // of those
    uint16_t split_k = 0;
  };
  // The hottest keys at the last tick, hottest first.
  std::vector<HotKey> Top() const;
  const HotKeyOptions& options() const { return options_; }

 private:
  int64_t ReopenMarginMs() const;  // after a merging split's last view lapses
  // How long one more client may use `split`'s sub-buckets (extending it unless it is
  // merging), or nullopt when it has just reopened (drained and erased). Stripe locked.
  std::optional<int64_t> HandOut(int policy, const KeyId& id, Store::Split& split, int64_t now);
  View MakeView(int policy, std::string_view key, const Store::Split& split, int64_t valid_ms,
                int64_t now) const;
  void StartSplit(int policy, const std::string& key, int64_t rate, int64_t now);
  // With the key's stripe locked: the key's slot holds a drained state.
  void Drain(int policy, const KeyId& id, int64_t now);
  void Sample(Sampler& s, int policy, std::string_view key, const KeyId& id, uint16_t split_k,
              uint16_t split_index, uint64_t weight, bool denied);

  const PolicyTable& policies_;
  const Clock& clock_;
  Store& store_;
  const Authenticator& auth_;
  const HotKeyOptions options_;
  // Per policy, the sub-buckets' rates at the configured k; empty when it cannot split.
  std::vector<std::vector<Rate>> sub_rates_;
  std::atomic<uint32_t> split_epoch_{0};

  mutable Mutex mu_;                                                        // Tick and Top
  std::vector<std::unique_ptr<Sampler>> samplers_ LIMITER_GUARDED_BY(mu_);  // (the vector only)
  std::vector<HotKey> top_ LIMITER_GUARDED_BY(mu_);
  int64_t last_tick_ms_ LIMITER_GUARDED_BY(mu_) = 0;
};

template <class Entries>
void HotKeys::Record(Sampler& s, const Entries& entries, size_t own, bool denied) {
  const int every = options_.sample_every > 1 ? options_.sample_every : 1;
  if (++s.sampled_ % static_cast<uint32_t>(every) != 0) return;
  for (size_t i = 0; i < own; ++i) {
    const auto& e = entries[i];
    Sample(s, e.policy, e.key, e.id, e.split_k, e.split_index, static_cast<uint64_t>(every),
           denied);
  }
}

}  // namespace limiter
