#include "client/split_views.h"

#include <algorithm>

#include "common/rate.h"
#include "protocol/rules.h"

namespace limiter {

KeyId SplitViews::IdOf(const Policy& p, std::string_view key) {
  return protocol::LimitId(p, key, {});
}

std::optional<SubBucket> SplitViews::Pick(const Policy& p, const KeyId& id, int64_t now_us,
                                          bool* renew) {
  *renew = false;
  if (p.parent_index >= 0) return std::nullopt;  // nested keys are never split
  if (!any_views_.load(std::memory_order_relaxed)) return std::nullopt;
  MutexLock lock(mu_);
  auto it = views_.find(id);
  if (it == views_.end()) return std::nullopt;
  View& view = it->second;
  if (now_us >= view.valid_until_us) {
    views_.erase(it);  // lapsed: ask the key's owner again
    NoteViews();
    MarkReopening(id, now_us);
    return std::nullopt;
  }
  const SubBucket sub = view.sub;
  view.sub.index = static_cast<uint16_t>((view.sub.index + 1) % view.sub.k);
  ++view.sent;
  *renew = now_us >= view.renew_at_us && !view.renewing;
  view.renewing = view.renewing || *renew;
  return sub;
}

void SplitViews::Learn(const Policy& p, std::string_view key, const OpAnswer& a, int64_t now_us) {
  const KeyId split_id = IdOf(p, key);
  MutexLock lock(mu_);
  if (a.split_k == 0 || a.split_valid_ms <= 0) {
    // Merging (a split with no view left to hand out), or merged under a view held here.
    if (views_.erase(split_id) > 0 || a.split_k != 0) MarkReopening(split_id, now_us);
    NoteViews();
    return;
  }
  View& view = views_[split_id];
  NoteViews();
  if (view.sub.epoch != a.split_epoch || view.sub.k != a.split_k) {
    // Gateways start apart: each at its own place, the same for all its keys' splits.
    view.sub.index =
        static_cast<uint16_t>((split_id.lo + salt_ * 0x9e3779b97f4a7c15ULL) % a.split_k);
    view.opened = 0;  // other sub-buckets
  }
  view.policy = &p;
  view.key = std::string(key);
  view.sub.k = a.split_k;
  view.sub.epoch = a.split_epoch;
  view.sub.token = a.split_token;
  view.sub.token_bytes = a.split_token_bytes;
  view.sub.index = static_cast<uint16_t>(view.sub.index % a.split_k);
  view.valid_until_us = now_us + a.split_valid_ms * 1000;
  view.renew_at_us = now_us + a.split_valid_ms * 1000 / 2;
  view.renewing = false;
}

void SplitViews::Forget(const Policy& p, std::string_view key, const SubBucket& stale) {
  MutexLock lock(mu_);
  auto it = views_.find(IdOf(p, key));
  if (it == views_.end()) return;
  // A renewal (or another op's answer) may have brought the split as it is now meanwhile.
  if (it->second.sub.epoch != stale.epoch || it->second.sub.k != stale.k) return;
  const int64_t now_us = it->second.valid_until_us;  // no later than the view's end
  const KeyId id = it->first;
  views_.erase(it);
  NoteViews();
  MarkReopening(id, now_us);
}

void SplitViews::MarkReopening(const KeyId& split_id, int64_t now_us) {
  // A merge reopens the key within a view's validity (2 s) and a margin of its end; after
  // 10 s the first denial is the key's own.
  constexpr int64_t kRememberUs = 10'000'000;
  constexpr size_t kMaxKeys = 4096;  // keys split at once are few; bounded all the same
  if (reopening_.size() >= kMaxKeys) {
    std::erase_if(reopening_, [&](const auto& e) { return e.second <= now_us; });
    if (reopening_.size() >= kMaxKeys) reopening_.clear();
  }
  reopening_[split_id] = now_us + kRememberUs;
  any_reopening_.store(true, std::memory_order_relaxed);
}

void SplitViews::NoteOpened(const Policy& p, std::string_view key, const SubBucket& sub) {
  MutexLock lock(mu_);
  if (sub.k == 0) {
    if (reopening_.erase(IdOf(p, key)) > 0 && reopening_.empty()) {
      any_reopening_.store(false, std::memory_order_relaxed);
    }
    return;
  }
  auto it = views_.find(IdOf(p, key));
  if (it == views_.end() || it->second.sub.epoch != sub.epoch || sub.index >= 64) return;
  it->second.opened |= uint64_t{1} << sub.index;
}

bool SplitViews::MayBeNew(const Policy& p, std::string_view key, const SubBucket& sub,
                          int64_t now_us) {
  MutexLock lock(mu_);
  if (sub.k == 0) {
    auto it = reopening_.find(IdOf(p, key));
    return it != reopening_.end() && now_us < it->second;
  }
  auto it = views_.find(IdOf(p, key));
  if (it == views_.end() || it->second.sub.epoch != sub.epoch || sub.index >= 64) return false;
  return ((it->second.opened >> sub.index) & 1) == 0;
}

void SplitViews::NoteOther(const Policy& p, std::string_view key, bool allowed) {
  MutexLock lock(mu_);
  auto it = views_.find(IdOf(p, key));
  if (it == views_.end()) return;
  View& view = it->second;
  if (view.other_tries >= 64) {  // a sliding memory: halve both
    view.other_tries /= 2;
    view.other_wins /= 2;
  }
  ++view.other_tries;
  view.other_wins += allowed;
}

bool SplitViews::TryOther(const Policy& p, std::string_view key) {
  MutexLock lock(mu_);
  auto it = views_.find(IdOf(p, key));
  if (it == views_.end()) return false;
  View& view = it->second;
  ++view.denials;
  return view.other_tries < 8 || view.other_wins * 4 >= view.other_tries || view.denials % 16 == 0;
}

std::optional<SplitViews::Renewal> SplitViews::TakeRenewal(const KeyId& split_id) {
  MutexLock lock(mu_);
  auto it = views_.find(split_id);
  if (it == views_.end()) return std::nullopt;
  Renewal r{it->second.policy, it->second.key, std::min(it->second.sent, kMaxCost)};
  it->second.sent = 0;
  return r;
}

void SplitViews::RenewalFailed(const KeyId& split_id) {
  MutexLock lock(mu_);
  auto it = views_.find(split_id);
  if (it != views_.end()) it->second.renewing = false;  // try again with the next op
}

}  // namespace limiter
