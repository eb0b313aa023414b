#include "server/hot_keys.h"

#include <algorithm>
#include <unordered_map>

#include "common/mutex.h"
#include "server/authenticator.h"
#include "server/sub_rates.h"

namespace limiter {
namespace {

// After the last client's view of a split lapses, wait this much more before reopening the
// key: a client counts its view's validity from when the reply arrives, a little later.
constexpr int64_t kReopenMarginMs = 500;
constexpr size_t kReportedHotKeys = 20;

}  // namespace

HotKeys::HotKeys(const PolicyTable& policies, const Clock& clock, Store& store,
                 const Authenticator& auth, HotKeyOptions options)
    : policies_(policies), clock_(clock), store_(store), auth_(auth), options_(options) {
  sub_rates_.resize(policies.size());
  for (size_t i = 0; i < policies.size(); ++i) {
    if (!Splittable(static_cast<int>(i))) continue;
    for (int index = 0; index < options_.split_k; ++index) {
      sub_rates_[i].push_back(*SubRate(policies.at(static_cast<int>(i)), options_.split_k, index));
    }
  }
  // Epochs name a split's sub-buckets, which must start drained: begin from the clock, so a
  // restarted node does not reuse the epochs of its previous life.
  split_epoch_.store(static_cast<uint32_t>(clock.NowMs()));
  last_tick_ms_ = clock.NowMs();
}

HotKeys::Sampler& HotKeys::AddSampler() {
  MutexLock lock(mu_);
  samplers_.push_back(std::make_unique<Sampler>(options_.sketch_capacity));
  return *samplers_.back();
}

void HotKeys::Sample(Sampler& s, int policy, std::string_view key, const KeyId& id,
                     uint16_t split_k, uint16_t split_index, uint64_t weight, bool denied) {
  std::string_view name = key;
  if (split_k != 0) {
    s.display_.clear();
    protocol::AppendSubBucketRoutingKey(s.display_, key, split_index);
    name = s.display_;
  }
  MutexLock lock(s.mu_);
  s.sketch_.Add(policy, name, id.lo, weight, denied, split_k);
}

int64_t HotKeys::ReopenMarginMs() const {
  // A split token is honoured clock_skew_ms past its time on another node's clock.
  return kReopenMarginMs + auth_.token_grace_ms();
}

bool HotKeys::Splittable(int policy) const {
  const Policy& p = policies_.at(policy);
  // A split key's sub-buckets live on other nodes than its tenant, so only keys outside any
  // nesting split. A global key's region share lives with its one owner here, so it is not
  // split either. A durable key is not split: its sub-buckets would be memory-only state on
  // other nodes, and a restart of any of them would lose charges of a key that promises to
  // keep them. Calendar windows (daily, monthly quotas) are not either: their gateways lease
  // them.
  if (p.durable || p.calendar) return false;
  return p.parent_index < 0 && !policies_.parent(policy) && !policies_.global(policy) &&
         SubRate(p, options_.split_k, options_.split_k - 1).has_value();
}

std::optional<Rate> HotKeys::SubBucketRate(int policy, uint16_t k, uint16_t index) const {
  const std::vector<Rate>& cached = sub_rates_[static_cast<size_t>(policy)];
  if (cached.empty()) return std::nullopt;  // the policy cannot split
  if (k == options_.split_k && index < cached.size()) return cached[index];
  return SubRate(policies_.at(policy), k, index);
}

std::optional<int64_t> HotKeys::HandOut(int policy, const KeyId& id, Store::Split& split,
                                        int64_t now) {
  if (split.merging && now >= split.valid_until_ms + ReopenMarginMs()) {
    Drain(policy, id, now);  // reopen now: every client's view has lapsed
    store_.EraseSplit(id);
    return std::nullopt;
  }
  if (split.merging) return std::max<int64_t>(0, split.valid_until_ms - now);
  split.valid_until_ms = std::max(split.valid_until_ms, now + options_.split_valid_ms);
  return options_.split_valid_ms;
}

HotKeys::View HotKeys::MakeView(int policy, std::string_view key, const Store::Split& split,
                                int64_t valid_ms, int64_t now) const {
  View v;
  v.k = split.k;
  v.epoch = split.epoch;
  v.valid_ms = valid_ms;
  v.token = auth_.SignSplit(policies_.at(policy).name, key, split.k, split.epoch, valid_ms);
  // Merging, and no view left to hand out: until it reopens, come back then.
  if (valid_ms == 0) v.retry_after_ms = split.valid_until_ms + ReopenMarginMs() - now;
  return v;
}

std::optional<HotKeys::View> HotKeys::ViewOf(int policy, const KeyId& id, std::string_view key,
                                             int64_t now) {
  if (!store_.has_splits()) return std::nullopt;
  Store::Split* split = store_.FindSplit(id);
  if (split == nullptr) return std::nullopt;
  const std::optional<int64_t> valid = HandOut(policy, id, *split, now);
  if (!valid) return std::nullopt;  // reopened
  return MakeView(policy, key, *split, *valid, now);
}

std::optional<HotKeys::View> HotKeys::Renew(int policy, const KeyId& id, std::string_view key,
                                            int64_t reported, int64_t now) {
  const size_t stripe = store_.StripeOf(id);
  Store::StripeLock lock(store_, {&stripe, 1});
  Store::Split* split = store_.FindSplit(id);
  if (split == nullptr) return std::nullopt;  // not split (any more)
  split->reported_ops += reported;
  const std::optional<int64_t> valid = HandOut(policy, id, *split, now);
  if (!valid) return std::nullopt;  // reopened
  return MakeView(policy, key, *split, *valid, now);
}

std::optional<HotKeys::View> HotKeys::Inspect(int policy, const KeyId& id, std::string_view key,
                                              int64_t now) {
  const Store::Split* split = store_.FindSplit(id);
  if (split == nullptr) return std::nullopt;
  View v;
  v.k = split->k;
  v.epoch = split->epoch;
  v.valid_ms = std::max<int64_t>(0, split->valid_until_ms - now);
  v.token = auth_.SignSplit(policies_.at(policy).name, key, split->k, split->epoch, v.valid_ms);
  return v;
}

bool HotKeys::SplitInForce(int policy, std::string_view key, uint16_t k, uint32_t epoch,
                           int64_t now, std::optional<View>& now_view) {
  const KeyId id = protocol::LimitId(policies_.at(policy), key, {});
  const size_t stripe = store_.StripeOf(id);
  Store::StripeLock lock(store_, {&stripe, 1});
  Store::Split* split = store_.FindSplit(id);
  if (split != nullptr && split->k == k && split->epoch == epoch) return true;
  now_view.reset();
  if (split != nullptr) {
    if (const std::optional<int64_t> valid = HandOut(policy, id, *split, now)) {
      now_view = MakeView(policy, key, *split, *valid, now);
    }
  }
  return false;
}

void HotKeys::Drain(int policy, const KeyId& id, int64_t now) {
  const Policy& p = policies_.at(policy);
  KeyLimiter drained(p.algorithm);
  drained.Decide(p.rate, now, FullAllowance(p.algorithm, p.rate));
  Slot* slot = store_.Find(policy, id);
  if (slot == nullptr) {
    if (!store_.TryReserve(policy, store_.NewKeyUnits(policy))) {
      store_.NoteRefusal(policy);  // no room: the key stays without a slot, as a new key
      return;
    }
    slot = store_.Insert(policy, id);
  }
  store_.Pack(policy, std::move(drained), slot);
}

void HotKeys::StartSplit(int policy, const std::string& key, int64_t rate, int64_t now) {
  const Policy& p = policies_.at(policy);
  const KeyId id = protocol::LimitId(p, key, {});
  const size_t stripe = store_.StripeOf(id);
  Store::StripeLock lock(store_, {&stripe, 1});
  if (store_.FindSplit(id) != nullptr) return;
  // The key's slot stays while it is split, so that it can reopen drained.
  if (store_.Find(policy, id) == nullptr) {
    if (!store_.TryReserve(policy, store_.NewKeyUnits(policy))) {
      store_.NoteRefusal(policy);
      return;
    }
    store_.Pack(policy, KeyLimiter(p.algorithm), store_.Insert(policy, id));
  }
  Store::Split& split = store_.AddSplit(id);
  split.policy = policy;
  split.key = key;
  split.k = static_cast<uint16_t>(options_.split_k);
  split.epoch = split_epoch_.fetch_add(1) + 1;
  split.valid_until_ms = now;
  // Until clients report what they send to the sub-buckets, the rate that split it.
  split.rate = split.last_tick_rate = rate;
}

void HotKeys::Tick() {
  const int64_t now = clock_.NowMs();
  MutexLock tick_lock(mu_);
  const int64_t elapsed = std::max<int64_t>(1, now - last_tick_ms_);
  last_tick_ms_ = now;

  // The workers' sketches, rolled and merged: ops per second in the last epoch.
  struct Merged {
    int policy;
    std::string key;
    int64_t ops = 0;
    int64_t denied = 0;
    uint16_t tag = 0;
  };
  std::unordered_map<uint64_t, Merged> merged;
  for (const auto& s : samplers_) {
    MutexLock lock(s->mu_);
    s->sketch_.Roll();
    for (const HotKeySketch::Entry& e : s->sketch_.Top(s->sketch_.size())) {
      if (e.last == 0) continue;
      Merged& m = merged.try_emplace(e.hash, Merged{e.policy, e.key}).first->second;
      m.ops += static_cast<int64_t>(e.last);
      m.denied += static_cast<int64_t>(e.denied_last);
      m.tag = e.tag;
    }
  }
  std::vector<Merged> ranked;
  int64_t total = 0;
  for (auto& [hash, m] : merged) {
    m.ops = m.ops * 1000 / elapsed;
    m.denied = m.denied * 1000 / elapsed;
    total += m.ops;
    ranked.push_back(std::move(m));
  }
  std::sort(ranked.begin(), ranked.end(),
            [](const Merged& a, const Merged& b) { return a.ops > b.ops; });

  // Split what got hot.
  const HotKeyOptions& hot = options_;
  for (const Merged& m : ranked) {
    const bool over = (hot.split_above > 0 && m.ops >= hot.split_above) ||
                      (hot.split_share > 0 && m.ops >= 1000 &&
                       static_cast<double>(m.ops) >= hot.split_share * static_cast<double>(total));
    if (over && m.tag == 0 && Splittable(m.policy)) StartSplit(m.policy, m.key, m.ops, now);
  }

  // Merge back what cooled down: the rate is what clients report sending to the sub-buckets.
  const int64_t merge_below = hot.merge_below > 0 ? hot.merge_below : hot.split_above / 4;
  store_.VisitSplits([&](const KeyId& id, Store::Split& split) {
    // Clients report when they renew, about once a validity/2: smooth over two ticks.
    const int64_t tick_rate = split.reported_ops * 1000 / elapsed;
    split.rate = std::max(tick_rate, split.last_tick_rate);
    split.last_tick_rate = tick_rate;
    split.reported_ops = 0;
    if (!split.merging) {
      split.cool_ticks = split.rate < merge_below ? split.cool_ticks + 1 : 0;
      split.merging = split.cool_ticks >= 3;
    }
    if (split.merging && now >= split.valid_until_ms + ReopenMarginMs()) {
      Drain(split.policy, id, now);
      return true;  // erase: reopened
    }
    return false;
  });

  // What HOTKEYS reports: the hottest keys, split keys with their sub-buckets' reported
  // rate (the key itself gets few ops once split).
  top_.clear();
  for (const Merged& m : ranked) {
    if (top_.size() == kReportedHotKeys) break;
    top_.push_back({policies_.at(m.policy).name, m.key, m.ops, m.denied, m.tag});
  }
  store_.VisitSplits([&](const KeyId&, Store::Split& split) {
    mu_.AssertHeld();  // Tick's, held around the visit
    const std::string& name = policies_.at(split.policy).name;
    auto it = std::find_if(top_.begin(), top_.end(), [&](const HotKey& k) {
      return k.split_k == 0 && k.policy == name && k.key == split.key;
    });
    if (it == top_.end()) it = top_.insert(top_.end(), {name, split.key});
    it->split_k = split.k;
    it->rate = std::max(it->rate, split.rate);
    return false;
  });
  std::sort(top_.begin(), top_.end(),
            [](const HotKey& a, const HotKey& b) { return a.rate > b.rate; });
  if (top_.size() > kReportedHotKeys) top_.resize(kReportedHotKeys);
}

std::vector<HotKeys::HotKey> HotKeys::Top() const {
  MutexLock lock(mu_);
  return top_;
}

}  // namespace limiter
