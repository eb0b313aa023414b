// SplitViews: what this gateway knows of hot keys their owners split into sub-buckets
// (hot keys, docs/design.md). A view is valid for as long as the owner said, and renewed half way
// through, reporting the ops this gateway sent to the sub-buckets since; ops go to the
// sub-buckets in turn, each gateway starting at a different one. A view an answer found out
// of date is forgotten (the next op asks the owner) or replaced by the split the answer
// carries. A view also knows which sub-buckets have admitted anything for this gateway: one
// that has not may be new, and a new sub-bucket starts drained.
//
// Thread-safety: any thread; one mutex guards the views. A gateway with no split in view
// (nearly always) answers Pick from an atomic flag, with no lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "client/transport.h"
#include "common/mutex.h"
#include "common/policy.h"
#include "protocol/key_id.h"
#include "protocol/sub_bucket.h"

namespace limiter {

class SplitViews {
 public:
  // `salt`: where this gateway starts in each split's sub-buckets (gateways start apart).
  explicit SplitViews(uint64_t salt = 0) : salt_(salt) {}

  // The key a view is kept under: (policy, key) (only keys that do not nest split).
  static KeyId IdOf(const Policy& p, std::string_view key);

  // The sub-bucket for the next op on the key `id` (IdOf: a request's own id, for a policy
  // that does not nest) of policy `p` (in turn, counted as sent), or nullopt when it is not
  // (known to be) split. *renew: the view is due for renewal (RenewSplit).
  std::optional<SubBucket> Pick(const Policy& p, const KeyId& id, int64_t now_us, bool* renew);
  // The owner's answer about the key's split (a Split or SplitChanged status, a SPLIT reply).
  void Learn(const Policy& p, std::string_view key, const OpAnswer& a, int64_t now_us);
  // An answer found the view `stale` out of date: forgotten, unless the view is newer already.
  void Forget(const Policy& p, std::string_view key, const SubBucket& stale);
  // Sub-bucket `sub` admitted an op (or granted units) for this gateway.
  void NoteOpened(const Policy& p, std::string_view key, const SubBucket& sub);
  // Whether `sub` is of the view held now and has admitted nothing for this gateway yet: it
  // may be new, drained until the next millisecond or so. For the key itself (sub.k 0):
  // whether this gateway saw its split end lately (merging, merged, a view that lapsed) and
  // the key has admitted nothing since: its owner reopens it drained.
  bool MayBeNew(const Policy& p, std::string_view key, const SubBucket& sub, int64_t now_us);
  // Whether any key is in that state (cheap: checked before any other work on every answer).
  bool AnyReopening() const { return any_reopening_.load(std::memory_order_relaxed); }
  // After a denial by one sub-bucket: whether to try one other. Always while such second
  // tries pay off now and then; when nearly all fail (the key is over its limit everywhere),
  // only one denial in 16, so a denied request costs the cluster one op, not two.
  bool TryOther(const Policy& p, std::string_view key);
  void NoteOther(const Policy& p, std::string_view key, bool allowed);

  // A renewal: the view's policy, key and the ops sent since the last one (reset), or nullopt
  // when the view is gone.
  struct Renewal {
    const Policy* policy = nullptr;
    std::string key;
    int64_t sent = 0;
  };
  std::optional<Renewal> TakeRenewal(const KeyId& split_id);
  void RenewalFailed(const KeyId& split_id);

 private:
  struct View {
    const Policy* policy = nullptr;
    std::string key;
    SubBucket sub;  // k and epoch; index: the next to use
    int64_t valid_until_us = 0;
    int64_t renew_at_us = 0;
    int64_t sent = 0;
    bool renewing = false;
    uint64_t opened = 0;       // bit i: sub-bucket i admitted something in this epoch
    uint32_t other_tries = 0;  // second tries after a denial, and how many were allowed
    uint32_t other_wins = 0;
    uint32_t denials = 0;
  };
  // The key's split ended as far as this gateway saw: it may reopen drained.
  void MarkReopening(const KeyId& split_id, int64_t now_us) LIMITER_REQUIRES(mu_);
  // After views_ changed: the flag Pick reads first.
  void NoteViews() LIMITER_REQUIRES(mu_) {
    any_views_.store(!views_.empty(), std::memory_order_relaxed);
  }

  const uint64_t salt_;
  Mutex mu_;
  std::unordered_map<KeyId, View, KeyIdHash> views_ LIMITER_GUARDED_BY(mu_);
  std::atomic<bool> any_views_{false};  // !views_.empty(), read without mu_
  // Keys whose split this gateway saw end, until when that matters (µs).
  std::unordered_map<KeyId, int64_t, KeyIdHash> reopening_ LIMITER_GUARDED_BY(mu_);
  std::atomic<bool> any_reopening_{false};  // !reopening_.empty(), read without mu_
};

}  // namespace limiter
