#include "common/key_limiter.h"

namespace limiter {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace

KeyLimiter::KeyLimiter(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kFixedWindow: state_.emplace<FixedWindow::State>(); break;
    case Algorithm::kSlidingLog: state_.emplace<SlidingLog::State>(); break;
    case Algorithm::kSlidingWindow: state_.emplace<SlidingWindow::State>(); break;
    case Algorithm::kTokenBucket: state_.emplace<TokenBucket::State>(); break;
    case Algorithm::kGcra: state_.emplace<Gcra::State>(); break;
    case Algorithm::kLeakyBucket: state_.emplace<LeakyBucket::State>(); break;
  }
}

Decision KeyLimiter::Decide(const Rate& rate, int64_t now_ms, int64_t cost) {
  return std::visit(
      Overloaded{
          [&](FixedWindow::State& s) { return FixedWindow::Decide(rate, s, now_ms, cost); },
          [&](SlidingLog::State& s) { return SlidingLog::Decide(rate, s, now_ms, cost); },
          [&](SlidingWindow::State& s) { return SlidingWindow::Decide(rate, s, now_ms, cost); },
          [&](TokenBucket::State& s) { return TokenBucket::Decide(rate, s, now_ms, cost); },
          [&](Gcra::State& s) { return Gcra::Decide(rate, s, now_ms, cost); },
          [&](LeakyBucket::State& s) { return LeakyBucket::Decide(rate, s, now_ms, cost); },
      },
      state_);
}

}  // namespace limiter
