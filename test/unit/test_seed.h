// Seeds for property tests: LIMITER_TEST_SEED when set, else a fresh random one. The test
// prints it on failure (SCOPED_TRACE) so a failing run can be repeated exactly.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

namespace limiter::testing {

inline uint64_t TestSeed() {
  if (const char* env = std::getenv("LIMITER_TEST_SEED")) return std::strtoull(env, nullptr, 10);
  return (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
}

inline std::string SeedTrace(uint64_t seed) {
  return "LIMITER_TEST_SEED=" + std::to_string(seed) + " repeats this run";
}

}  // namespace limiter::testing
