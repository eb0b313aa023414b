#include "common/key_limiter.h"

#include <type_traits>

namespace limiter {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// The algorithm whose State is S.
template <class S>
struct AlgoOf;
template <>
struct AlgoOf<FixedWindow::State> {
  using type = FixedWindow;
};
template <>
struct AlgoOf<SlidingLog::State> {
  using type = SlidingLog;
};
template <>
struct AlgoOf<SlidingWindow::State> {
  using type = SlidingWindow;
};
template <>
struct AlgoOf<TokenBucket::State> {
  using type = TokenBucket;
};
template <>
struct AlgoOf<Gcra::State> {
  using type = Gcra;
};
template <>
struct AlgoOf<LeakyBucket::State> {
  using type = LeakyBucket;
};

template <class S>
using Algo = typename AlgoOf<std::decay_t<S>>::type;

}  // namespace

Status SupportsRate(Algorithm algorithm, const Rate& rate) {
  if (algorithm == Algorithm::kSlidingWindow && rate.limit() > SlidingWindow::kMaxLimit) {
    return Error{"sliding_window supports limits up to " +
                 std::to_string(SlidingWindow::kMaxLimit) + ", got " +
                 std::to_string(rate.limit())};
  }
  return Status::Ok();
}

KeyLimiter::KeyLimiter(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kFixedWindow:
      state_.emplace<FixedWindow::State>();
      break;
    case Algorithm::kSlidingLog:
      state_.emplace<SlidingLog::State>();
      break;
    case Algorithm::kSlidingWindow:
      state_.emplace<SlidingWindow::State>();
      break;
    case Algorithm::kTokenBucket:
      state_.emplace<TokenBucket::State>();
      break;
    case Algorithm::kGcra:
      state_.emplace<Gcra::State>();
      break;
    case Algorithm::kLeakyBucket:
      state_.emplace<LeakyBucket::State>();
      break;
  }
}

LimitDecision KeyLimiter::Decide(const Rate& rate, int64_t now_ms, int64_t cost) {
  return std::visit([&](auto& s) { return Algo<decltype(s)>::Decide(rate, s, now_ms, cost); },
                    state_);
}

LimitDecision KeyLimiter::Peek(const Rate& rate, int64_t now_ms, int64_t cost) const {
  return std::visit(
      [&](const auto& s) {
        using A = Algo<decltype(s)>;
        if constexpr (std::is_same_v<A, SlidingLog>) {
          return SlidingLog::Peek(rate, s, now_ms, cost);  // a log is not copied
        } else {
          auto copy = s;
          return A::Decide(rate, copy, now_ms, cost);
        }
      },
      state_);
}

int64_t KeyLimiter::Available(const Rate& rate, int64_t now_ms) const {
  const LimitDecision d = Peek(rate, now_ms, 1);
  return d.allowed ? d.remaining + 1 : 0;
}

bool KeyLimiter::IsFresh(const Rate& rate, int64_t now_ms) const {
  return std::visit([&](const auto& s) { return Algo<decltype(s)>::IsFresh(rate, s, now_ms); },
                    state_);
}

int64_t ChargeScale(Algorithm algorithm, const Rate& rate) {
  switch (algorithm) {
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra:
    case Algorithm::kLeakyBucket:
      return rate.window_ms();
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingLog:
    case Algorithm::kSlidingWindow:
      return 1;
  }
  return 1;
}

int64_t FullAllowance(Algorithm algorithm, const Rate& rate) {
  switch (algorithm) {
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra:
    case Algorithm::kLeakyBucket:
      return rate.burst();
    case Algorithm::kFixedWindow:
    case Algorithm::kSlidingLog:
    case Algorithm::kSlidingWindow:
      return rate.limit();
  }
  return rate.limit();
}

int64_t KeyLimiter::InEffect(const Rate& rate, int64_t now_ms) const {
  return std::visit([&](const auto& s) { return Algo<decltype(s)>::InEffect(rate, s, now_ms); },
                    state_);
}

int64_t KeyLimiter::Refund(const Rate& rate, int64_t now_ms, int64_t amount,
                           int64_t charged_at_ms) {
  return std::visit(
      [&](auto& s) { return Algo<decltype(s)>::Refund(rate, s, now_ms, amount, charged_at_ms); },
      state_);
}

std::vector<std::pair<std::string_view, int64_t>> KeyLimiter::Fields() const {
  return std::visit(
      Overloaded{
          [](const FixedWindow::State& s) -> std::vector<std::pair<std::string_view, int64_t>> {
            return {{"window_start_ms", s.window_start_ms}, {"count", s.count}};
          },
          [](const SlidingLog::State& s) -> std::vector<std::pair<std::string_view, int64_t>> {
            return {{"entries", static_cast<int64_t>(s.entries.size())},
                    {"total", s.total},
                    {"oldest_ms", s.entries.empty() ? 0 : s.entries.front().t_ms},
                    {"newest_ms", s.entries.empty() ? 0 : s.entries.back().t_ms},
                    {"seen_ms", s.seen_ms}};
          },
          [](const SlidingWindow::State& s) -> std::vector<std::pair<std::string_view, int64_t>> {
            return {{"window_start_ms", s.window_start_ms}, {"curr", s.curr}, {"prev", s.prev}};
          },
          [](const TokenBucket::State& s) -> std::vector<std::pair<std::string_view, int64_t>> {
            if (s.last_ms == TokenBucket::kFresh) return {{"fresh", 1}};
            return {{"tokens_scaled", s.tokens_scaled}, {"last_ms", s.last_ms}};
          },
          [](const Gcra::State& s) -> std::vector<std::pair<std::string_view, int64_t>> {
            return {{"tat_ms", s.tat_ms}, {"tat_frac", s.tat_frac}};
          },
          [](const LeakyBucket::State& s) -> std::vector<std::pair<std::string_view, int64_t>> {
            return {{"level_scaled", s.level_scaled}, {"last_ms", s.last_ms}};
          },
      },
      state_);
}

}  // namespace limiter
