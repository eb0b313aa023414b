#include "client/split_views.h"

#include <algorithm>

#include "common/protocol.h"
#include "common/rate.h"

namespace limiter {

KeyId SplitViews::IdOf(const Policy& p, std::string_view key) {
  return protocol::LimitId(p, key, {});
}

std::optional<SubBucket> SplitViews::Pick(const Policy& p, std::string_view key, int64_t now_us,
                                          bool* renew) {
  *renew = false;
  if (p.parent_index >= 0) return std::nullopt;  // nested keys are never split
  std::lock_guard<std::mutex> lock(mu_);
  if (views_.empty()) return std::nullopt;
  auto it = views_.find(IdOf(p, key));
  if (it == views_.end()) return std::nullopt;
  View& view = it->second;
  if (now_us >= view.valid_until_us) {
    views_.erase(it);  // lapsed: ask the key's owner again
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
  std::lock_guard<std::mutex> lock(mu_);
  if (a.split_k == 0 || a.split_valid_ms <= 0) {
    views_.erase(split_id);
    return;
  }
  View& view = views_[split_id];
  if (view.sub.epoch != a.split_epoch) {
    view.sub.index = static_cast<uint16_t>(split_id.lo % a.split_k);  // gateways start apart
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

void SplitViews::NoteOther(const Policy& p, std::string_view key, bool allowed) {
  std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  auto it = views_.find(IdOf(p, key));
  if (it == views_.end()) return false;
  View& view = it->second;
  ++view.denials;
  return view.other_tries < 8 || view.other_wins * 4 >= view.other_tries || view.denials % 16 == 0;
}

std::optional<SplitViews::Renewal> SplitViews::TakeRenewal(const KeyId& split_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = views_.find(split_id);
  if (it == views_.end()) return std::nullopt;
  Renewal r{it->second.policy, it->second.key, std::min(it->second.sent, kMaxCost)};
  it->second.sent = 0;
  return r;
}

void SplitViews::RenewalFailed(const KeyId& split_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = views_.find(split_id);
  if (it != views_.end()) it->second.renewing = false;  // try again with the next op
}

}  // namespace limiter
