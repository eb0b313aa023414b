// The first seed's workload, shared by `limiter-bench cluster` (real processes) and
// `limiter-bench sim` (simulated time): 200,000 API keys in 20,000 tenants with Zipf
// popularity, a report endpoint that costs 20, and logins under a strict per-account limit.
// Drawing a request is a pure function of the random stream, so a seed repeats a run.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "limiter/client/client.h"
#include "limiter/status.h"

namespace limiter {
class PolicySet;
}

namespace limiter::bench {

// Key popularity is Zipf over key ranks; key rank r belongs to tenant r / keys_per_tenant,
// so the tenants holding the top keys are the few hot ones.
struct Scenario {
  double rate = 50'000;
  int gateways = 40;
  int nodes = 3;  // `sim`'s default fleet (`cluster` starts --nodes local ones)
  int64_t keys = 200'000;
  int64_t tenants = 20'000;
  double zipf_s = 1.0;
  double report_share = 0.01;  // requests to the report endpoint (cost 20)
  double login_share = 0.01;   // login attempts, per account (security, strict)
  int64_t accounts = 100'000;
};

// "50k" or "500k"; nullopt for any other name.
std::optional<Scenario> FindScenario(const std::string& name);
// The scenario `name` with the options that override it (0: the scenario's own), and the
// gateway spread checked; else the error to print.
Result<Scenario> ResolveScenario(const std::string& name, double rate, int gateways,
                                 const std::string& spread);

// Draws ranks 0..n-1 with P(r) proportional to 1/(r+1)^s: a table of the cumulative
// distribution and a binary search.
class Zipf {
 public:
  Zipf(int64_t n, double s);
  int64_t Draw(double u) const;

 private:
  std::vector<double> cdf_;
};

enum Kind { kApiKey, kLogin, kKinds };
inline const char* KindPolicy(Kind k) { return k == kApiKey ? "api_key" : "login"; }

// The report endpoint's operation (cost 20 in the scenario's policy file).
inline constexpr std::string_view kReportOperation = "report";

// One arrival: what it asks, and which key of which kind it is for.
struct Arrival {
  client::Request request;
  Kind kind = kApiKey;
  size_t index = 0;  // key rank (kApiKey) or account rank (kLogin)
  int64_t cost = 1;
};

// The workload's names and popularity; read-only once built, so event loops may share it.
class Workload {
 public:
  explicit Workload(const Scenario& s);
  const std::string& name(Kind k, size_t i) const { return k == kApiKey ? keys_[i] : accounts_[i]; }
  size_t count(Kind k) const { return k == kApiKey ? keys_.size() : accounts_.size(); }
  const std::string& tenant_of_key(size_t key) const;
  // Keys of tenant `t` are ranks [first, first + count).
  std::pair<size_t, size_t> keys_of_tenant(size_t t) const;

  // The next arrival from `rng` (two or three uniform draws).
  Arrival Draw(std::mt19937_64& rng) const;
  // An API-key arrival for key rank `index` (the hot-tenant load), from `rng` for its endpoint.
  Arrival ForKey(size_t index, std::mt19937_64& rng) const;

 private:
  Scenario s_;
  Zipf zipf_keys_;
  Zipf zipf_accounts_;
  std::vector<std::string> keys_, tenants_, accounts_;
};

// Whether an arrival is decided by a CHECK however the client works (a strict policy, or an
// operation a lease cannot pay), worked out once from the policies for each kind and
// endpoint. Precondition: the policies hold every kind's policy (the harnesses check).
class CheckedArrivals {
 public:
  explicit CheckedArrivals(const PolicySet& policies);
  bool operator()(const Arrival& a) const {
    return checked_[a.kind][a.request.operation.empty() ? 0 : 1];
  }

 private:
  std::array<std::array<bool, 2>, kKinds> checked_{};
};

}  // namespace limiter::bench
