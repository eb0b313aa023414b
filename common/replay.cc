#include "common/replay.h"

#include <deque>
#include <string_view>
#include <unordered_map>

#include "common/key_limiter.h"
#include "common/policy.h"

namespace limiter {
namespace {

// Admitted cost of one key within the last window, to find the worst window.
class WindowSum {
 public:
  // Adds `cost` admitted at `t` and returns the admitted cost in (t-W, t].
  int64_t Add(int64_t t, int64_t cost, int64_t window_ms) {
    while (!admitted_.empty() && admitted_.front().first <= t - window_ms) {
      sum_ -= admitted_.front().second;
      admitted_.pop_front();
    }
    admitted_.emplace_back(t, cost);
    sum_ += cost;
    return sum_;
  }

 private:
  std::deque<std::pair<int64_t, int64_t>> admitted_;
  int64_t sum_ = 0;
};

struct KeyReplay {
  explicit KeyReplay(Algorithm a) : limiter(a) {}
  KeyLimiter limiter;
  WindowSum window;
};

}  // namespace

ReplayResult Replay(const std::vector<TraceRow>& trace, Algorithm algorithm, const Rate& rate,
                    const Policy* policy) {
  ReplayResult result;
  result.algorithm = algorithm;
  std::unordered_map<std::string_view, KeyReplay> keys;
  std::unordered_map<std::string_view, size_t> label_index;
  for (const TraceRow& row : trace) {
    const int64_t cost = row.cost ? *row.cost : policy ? policy->CostOf(row.label) : 1;
    auto [label_it, new_label] = label_index.try_emplace(row.label, result.by_label.size());
    if (new_label) result.by_label.push_back({row.label, 0, 0});
    ReplayResult::Label& label = result.by_label[label_it->second];
    ++label.offered;
    ++result.offered;
    result.offered_cost += cost;

    KeyReplay& key = keys.try_emplace(row.key, algorithm).first->second;
    if (!key.limiter.Decide(rate, row.t_ms, cost).allowed) continue;
    ++label.accepted;
    ++result.accepted;
    result.accepted_cost += cost;
    const int64_t in_window = key.window.Add(row.t_ms, cost, rate.window_ms());
    if (in_window > result.worst_window) {
      result.worst_window = in_window;
      result.worst_key = row.key;
    }
  }
  return result;
}

}  // namespace limiter
