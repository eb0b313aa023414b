// Node's hot keys: sampling operations into the workers' sketches, splitting keys that get
// hot into sub-buckets spread over the cluster, and merging them back when they cool down.
//
// The promise through a split and a merge: a key split at time T stops charging its own
// bucket at T (its owner answers its operations with the split instead), and its
// sub-buckets start drained, so from T on the key admits at most L*t/W in any interval of
// length t, and before T at most what its bucket allowed: over any interval, at most
// B + L*t/W in all. A merge is the same in reverse: the owner stops renewing the split,
// waits until every client's view of it has lapsed, and reopens the key drained.
#include <algorithm>
#include <unordered_map>

#include "common/hot_key_sketch.h"
#include "common/protocol.h"
#include "server/node.h"
#include "server/node_internal.h"
#include "server/sub_bucket.h"

namespace limiter {
namespace {

// After the last client's view of a split lapses, wait this much more before reopening the
// key: a client counts its view's validity from when the reply arrives, a little later.
constexpr int64_t kReopenMarginMs = 500;
constexpr size_t kReportedHotKeys = 20;

}  // namespace

int64_t Node::ReopenMarginMs() const {
  // A split token is honoured clock_skew_ms past its time on another node's clock.
  return kReopenMarginMs + (requires_secret_ ? options_.clock_skew_ms : 0);
}

bool Node::Splittable(int policy) const {
  const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
  // A split key's sub-buckets live on other nodes than its tenant, so only keys outside
  // any nesting split. A global key's region share lives with its one owner here, so it is
  // not split either.
  // A durable key is not split: its sub-buckets would be memory-only state on other nodes,
  // and a restart of any of them would lose charges of a key that promises to keep them.
  // Calendar windows (daily, monthly quotas) are not either: their gateways lease them.
  if (p.durable || p.calendar) return false;
  return p.parent_index < 0 && !parents_[static_cast<size_t>(policy)] &&
         !global_[static_cast<size_t>(policy)] &&
         SubRate(p, options_.hot.split_k, options_.hot.split_k - 1).has_value();
}

void Node::Record(Worker& w, bool denied) {
  const int every = std::max(1, options_.hot.sample_every);
  if (++w.sampled % static_cast<uint32_t>(every) != 0) return;
  std::lock_guard<std::mutex> lock(w.hot_mu);
  for (size_t i = 0; i < w.own_limits; ++i) {
    const Entry& e = w.entries[i];
    std::string_view name = e.key;
    if (e.split_k != 0) {
      w.display.clear();
      protocol::AppendSubBucketRoutingKey(w.display, e.key, e.split_index);
      name = w.display;
    }
    w.sketch.Add(e.policy, name, e.id.lo, static_cast<uint64_t>(every), denied, e.split_k);
  }
}

std::optional<int64_t> Node::HandOutView(int policy, const KeyId& id, Store::Split& split,
                                         int64_t now) {
  if (split.merging && now >= split.valid_until_ms + ReopenMarginMs()) {
    Drain(policy, id, now);  // reopen now: every client's view has lapsed
    store_.EraseSplit(id);
    return std::nullopt;
  }
  if (split.merging) return std::max<int64_t>(0, split.valid_until_ms - now);
  split.valid_until_ms = std::max(split.valid_until_ms, now + options_.hot.split_valid_ms);
  return options_.hot.split_valid_ms;
}

bool Node::RedirectToSplit(Worker& w, int64_t now, OpResult& r) {
  if (!store_.has_splits()) return false;
  for (size_t i = 0; i < w.own_limits; ++i) {
    Entry& e = w.entries[i];
    if (e.split_k != 0) continue;
    Store::Split* split = store_.FindSplit(e.id);
    if (split == nullptr) continue;
    const std::optional<int64_t> view = HandOutView(e.policy, e.id, *split, now);
    if (!view) continue;  // reopened
    r.reply.status = wire::Status::Split;
    r.error = "limits[" + std::to_string(i) + "]: the key is split " + std::to_string(split->k) +
              " ways; use its sub-buckets";
    PutSplit(policies_.policies()[static_cast<size_t>(e.policy)], e.key, *split, *view, now, r);
    return true;
  }
  return false;
}

void Node::PutSplit(const Policy& p, std::string_view key, const Store::Split& split,
                    int64_t valid_ms, int64_t now, OpResult& r) {
  r.reply.split_k = split.k;
  r.reply.split_epoch = split.epoch;
  r.reply.split_valid_ms = valid_ms;
  SignSplit(p, key, split.k, split.epoch, valid_ms, r);
  // Merging, and no view left to hand out: until it reopens, come back then.
  if (valid_ms == 0) r.reply.retry_after_ms = split.valid_until_ms + ReopenMarginMs() - now;
}

void Node::SplitInfo(Worker& w, int64_t reported, int64_t now, OpResult& r) {
  Entry& e = w.entries.front();
  const size_t stripe = store_.StripeOf(e.id);
  Store::StripeLock lock(store_, {&stripe, 1});
  r.reply.allowed = true;
  Store::Split* split = store_.FindSplit(e.id);
  if (split == nullptr) return;  // not split (any more): split_k 0
  split->reported_ops += reported;
  const std::optional<int64_t> view = HandOutView(e.policy, e.id, *split, now);
  if (!view) return;  // reopened: split_k 0
  PutSplit(policies_.policies()[static_cast<size_t>(e.policy)], e.key, *split, *view, now, r);
}

void Node::Drain(int policy, const KeyId& id, int64_t now) {
  const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
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

void Node::StartSplit(int policy, const std::string& key, int64_t rate, int64_t now) {
  const Policy& p = policies_.policies()[static_cast<size_t>(policy)];
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
  split.k = static_cast<uint16_t>(options_.hot.split_k);
  split.epoch = split_epoch_.fetch_add(1) + 1;
  split.valid_until_ms = now;
  // Until clients report what they send to the sub-buckets, the rate that split it.
  split.rate = split.last_tick_rate = rate;
}

void Node::Tick() {
  const int64_t now = clock_.NowMs();
  ExpireWaits(now);
  std::lock_guard<std::mutex> tick_lock(hot_mu_);
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
  {
    std::lock_guard<std::mutex> guard(workers_mu_);
    for (const auto& w : workers_) {
      std::lock_guard<std::mutex> lock(w->hot_mu);
      w->sketch.Roll();
      for (const HotKeySketch::Entry& e : w->sketch.Top(w->sketch.size())) {
        if (e.last == 0) continue;
        Merged& m = merged.try_emplace(e.hash, Merged{e.policy, e.key}).first->second;
        m.ops += static_cast<int64_t>(e.last);
        m.denied += static_cast<int64_t>(e.denied_last);
        m.tag = e.tag;
      }
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
  const HotKeyOptions& hot = options_.hot;
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
  hot_keys_.clear();
  for (const Merged& m : ranked) {
    if (hot_keys_.size() == kReportedHotKeys) break;
    hot_keys_.push_back(
        {policies_.policies()[static_cast<size_t>(m.policy)].name, m.key, m.ops, m.denied, m.tag});
  }
  store_.VisitSplits([&](const KeyId&, Store::Split& split) {
    const std::string& name = policies_.policies()[static_cast<size_t>(split.policy)].name;
    auto it = std::find_if(hot_keys_.begin(), hot_keys_.end(), [&](const HotKey& k) {
      return k.split_k == 0 && k.policy == name && k.key == split.key;
    });
    if (it == hot_keys_.end()) it = hot_keys_.insert(hot_keys_.end(), {name, split.key});
    it->split_k = split.k;
    it->rate = std::max(it->rate, split.rate);
    return false;
  });
  std::sort(hot_keys_.begin(), hot_keys_.end(),
            [](const HotKey& a, const HotKey& b) { return a.rate > b.rate; });
  if (hot_keys_.size() > kReportedHotKeys) hot_keys_.resize(kReportedHotKeys);
}

std::vector<Node::HotKey> Node::HotKeys() const {
  std::lock_guard<std::mutex> lock(hot_mu_);
  return hot_keys_;
}

}  // namespace limiter
