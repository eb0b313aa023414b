#include "common/share_allocation.h"

#include <algorithm>
#include <numeric>

namespace limiter {

Status GlobalScopeError(Algorithm algorithm) {
  if (algorithm == Algorithm::kTokenBucket || algorithm == Algorithm::kGcra) return Status::Ok();
  return Error{"scope: global takes token_bucket or gcra, not " +
               std::string(AlgorithmName(algorithm)) +
               " (a window's count stays when the shares move within it, so the regions could "
               "admit more than L in one window)"};
}

int64_t ShareQuantum(Algorithm algorithm, const Rate& rate) {
  if (algorithm == Algorithm::kTokenBucket || algorithm == Algorithm::kGcra) {
    return (rate.limit() + rate.burst() - 1) / rate.burst();
  }
  return 1;
}

namespace {

// Region indices in the order remainders go: the largest unmet want first, then the lowest
// index.
std::vector<size_t> RemainderOrder(const std::vector<int64_t>& unmet) {
  std::vector<size_t> order(unmet.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return unmet[a] > unmet[b]; });
  return order;
}

}  // namespace

std::vector<int64_t> AllocateShares(int64_t limit, std::span<const int64_t> demands, int64_t floor,
                                    int64_t quantum) {
  const size_t n = demands.size();
  std::vector<int64_t> share(n, 0);
  if (n == 0 || limit <= 0) return share;
  const int64_t regions = static_cast<int64_t>(n);
  const int64_t q = std::max<int64_t>(1, quantum);
  const std::vector<int64_t> demand(demands.begin(), demands.end());
  if (limit / q < regions) {
    // Not a quantum for everyone: one each for those that want most, the rest to the first.
    const std::vector<size_t> order = RemainderOrder(demand);
    int64_t left = limit;
    for (size_t r : order) {
      if (left < q) break;
      share[r] = q;
      left -= q;
    }
    share[order.front()] += left;
    return share;
  }
  const int64_t floor_fit = std::min(std::max<int64_t>(0, floor), limit / regions);
  std::vector<int64_t> want(n);
  for (size_t r = 0; r < n; ++r) want[r] = std::max({demand[r], floor_fit, q});
  // Water-filling: the equal split of what is left among the unsatisfied never falls, so it
  // stays at least limit / regions >= q.
  std::vector<size_t> active(n);
  std::iota(active.begin(), active.end(), 0);
  int64_t left = limit;
  while (!active.empty()) {
    const int64_t k = static_cast<int64_t>(active.size());
    const int64_t fair = left / k;
    std::vector<size_t> still;
    for (size_t r : active) {
      if (want[r] <= fair) {
        share[r] = want[r];
        left -= want[r];
      } else {
        still.push_back(r);
      }
    }
    if (still.size() == active.size()) {  // nobody satisfied: the equal split, and remainders
      std::vector<int64_t> unmet(n, 0);
      for (size_t r : active) {
        share[r] = fair;
        unmet[r] = want[r] - fair;
      }
      left -= fair * k;
      for (size_t r : RemainderOrder(unmet)) {
        if (left == 0) break;
        if (unmet[r] > 0) ++share[r], --left;
      }
      return share;
    }
    active = std::move(still);
  }
  // Everyone has what it wants: the spare is spread evenly, remainders by demand.
  const int64_t each = left / regions;
  for (int64_t& s : share) s += each;
  left -= each * regions;
  for (size_t r : RemainderOrder(demand)) {
    if (left == 0) break;
    ++share[r], --left;
  }
  return share;
}

std::optional<Rate> ShareRate(Algorithm algorithm, const Rate& policy_rate, int64_t share) {
  if (share <= 0) return std::nullopt;
  // floor(B * L_r / L) without overflow: B and L_r are at most 2^60 / W each, W >= 1.
  const __int128 burst = static_cast<__int128>(policy_rate.burst()) * share / policy_rate.limit();
  int64_t b = static_cast<int64_t>(burst);
  if (algorithm != Algorithm::kTokenBucket && algorithm != Algorithm::kGcra) {
    b = std::max<int64_t>(b, 1);  // a window's burst is not used
  }
  if (b < 1) return std::nullopt;  // below the quantum: it could admit nothing
  return Rate(share, policy_rate.window_ms(), b);
}

KeyLimiter Reshaped(const KeyLimiter& state, const Rate& from, const Rate& to, int64_t now) {
  switch (state.algorithm()) {
    case Algorithm::kTokenBucket: {
      const auto& s = std::get<TokenBucket::State>(state.state());
      const int64_t can = std::max<int64_t>(0, from.capacity_scaled() - state.InEffect(from, now));
      TokenBucket::State out;
      out.tokens_scaled = std::min(to.capacity_scaled(), can);
      out.last_ms = s.last_ms == TokenBucket::kFresh ? now : std::max(now, s.last_ms);
      return KeyLimiter(KeyLimiter::State(out));
    }
    case Algorithm::kGcra: {
      const int64_t can = std::max<int64_t>(0, from.capacity_scaled() - state.InEffect(from, now));
      const int64_t missing = to.capacity_scaled() - std::min(to.capacity_scaled(), can);
      Gcra::State out;
      out.tat_ms = now + missing / to.limit();
      out.tat_frac = missing % to.limit();
      return KeyLimiter(KeyLimiter::State(out));
    }
    default:
      return state;  // the windows count units, whatever the limit
  }
}

}  // namespace limiter
