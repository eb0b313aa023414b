// Micro benchmarks: one decision on a hot key, per algorithm. Run with
//   build/bench/limiter_micro_bench --benchmark_repetitions=10 --benchmark_report_aggregates_only
// and read the median.
#include <benchmark/benchmark.h>

#include "common/key_limiter.h"

namespace limiter {
namespace {

// Typical API key: 100 per second, burst 200. Time advances 1 ms every 8 decisions, so the
// key alternates between admitting (refilled) and denying, as a hot key does.
template <class Algo>
void DecideHotKey(benchmark::State& bench) {
  const Rate rate(100, 1000, 200);
  typename Algo::State state{};
  int64_t now = 1'000'000;
  uint64_t i = 0;
  for (auto _ : bench) {
    now += (++i & 7) == 0;
    LimitDecision d = Algo::Decide(rate, state, now, 1);
    benchmark::DoNotOptimize(d);
  }
}

BENCHMARK(DecideHotKey<FixedWindow>)->Name("BM_Decide/fixed_window");
BENCHMARK(DecideHotKey<SlidingLog>)->Name("BM_Decide/sliding_log");
BENCHMARK(DecideHotKey<SlidingWindow>)->Name("BM_Decide/sliding_window");
BENCHMARK(DecideHotKey<TokenBucket>)->Name("BM_Decide/token_bucket");
BENCHMARK(DecideHotKey<Gcra>)->Name("BM_Decide/gcra");
BENCHMARK(DecideHotKey<LeakyBucket>)->Name("BM_Decide/leaky_bucket");

}  // namespace
}  // namespace limiter

BENCHMARK_MAIN();
