#include "bench/cluster_workload.h"

#include <algorithm>
#include <cmath>

#include "common/policy.h"

namespace limiter::bench {

std::optional<Scenario> FindScenario(const std::string& name) {
  Scenario s;
  if (name == "50k") return s;
  if (name == "500k") {
    s.rate = 500'000;
    s.gateways = 100;
    s.nodes = 4;
    return s;
  }
  return std::nullopt;
}

Result<Scenario> ResolveScenario(const std::string& name, double rate, int gateways,
                                 const std::string& spread) {
  std::optional<Scenario> found = FindScenario(name);
  if (!found) return Error{"unknown scenario '" + name + "' (known: 50k, 500k)"};
  if (rate > 0) found->rate = rate;
  if (gateways > 0) found->gateways = gateways;
  if (found->gateways > 65535) return Error{"--gateways: at most 65535"};
  if (spread != "even" && spread != "random" && spread != "sticky") {
    return Error{"--spread must be even, random or sticky, got '" + spread + "'"};
  }
  return *found;
}

Zipf::Zipf(int64_t n, double s) : cdf_(static_cast<size_t>(n)) {
  double sum = 0;
  for (int64_t r = 0; r < n; ++r) {
    sum += 1.0 / std::pow(static_cast<double>(r + 1), s);
    cdf_[static_cast<size_t>(r)] = sum;
  }
  for (double& c : cdf_) c /= sum;
}

int64_t Zipf::Draw(double u) const {
  return std::min<int64_t>(static_cast<int64_t>(cdf_.size()) - 1,
                           std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
}

Workload::Workload(const Scenario& s)
    : s_(s), zipf_keys_(s.keys, s.zipf_s), zipf_accounts_(s.accounts, s.zipf_s) {
  for (int64_t k = 0; k < s.keys; ++k) keys_.push_back("k" + std::to_string(k));
  for (int64_t t = 0; t < s.tenants; ++t) tenants_.push_back("t" + std::to_string(t));
  for (int64_t a = 0; a < s.accounts; ++a) accounts_.push_back("a" + std::to_string(a));
}

const std::string& Workload::tenant_of_key(size_t key) const {
  return tenants_[key * static_cast<size_t>(s_.tenants) / static_cast<size_t>(s_.keys)];
}

std::pair<size_t, size_t> Workload::keys_of_tenant(size_t t) const {
  const size_t keys = static_cast<size_t>(s_.keys), tenants = static_cast<size_t>(s_.tenants);
  // The smallest key k with k * tenants / keys >= t, for t and t + 1.
  auto first = [&](size_t tenant) { return (tenant * keys + tenants - 1) / tenants; };
  const size_t from = first(t);
  return {from, first(t + 1) - from};
}

Arrival Workload::Draw(std::mt19937_64& rng) const {
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double endpoint = uniform(rng);
  if (endpoint < s_.login_share) {
    Arrival a;
    a.kind = kLogin;
    a.index = static_cast<size_t>(zipf_accounts_.Draw(uniform(rng)));
    a.request.policy = "login";
    a.request.key = accounts_[a.index];
    return a;
  }
  Arrival a;
  a.index = static_cast<size_t>(zipf_keys_.Draw(uniform(rng)));
  a.request.policy = "api_key";
  a.request.key = keys_[a.index];
  a.request.tenant = tenant_of_key(a.index);
  if (endpoint < s_.login_share + s_.report_share) {
    a.request.operation = kReportOperation;
    a.cost = 20;
  }
  return a;
}

Arrival Workload::ForKey(size_t index, std::mt19937_64& rng) const {
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  Arrival a;
  a.index = index;
  a.request.policy = "api_key";
  a.request.key = keys_[index];
  a.request.tenant = tenant_of_key(index);
  if (uniform(rng) < s_.report_share) {
    a.request.operation = kReportOperation;
    a.cost = 20;
  }
  return a;
}

CheckedArrivals::CheckedArrivals(const PolicySet& policies) {
  for (int k = 0; k < kKinds; ++k) {
    const Policy& p = *policies.Find(KindPolicy(static_cast<Kind>(k)));
    const bool strict = p.mode == LeaseMode::kStrict;
    checked_[static_cast<size_t>(k)][0] = strict || !policies.LeasesAlike(p, "");
    checked_[static_cast<size_t>(k)][1] = strict || !policies.LeasesAlike(p, kReportOperation);
  }
}

}  // namespace limiter::bench
