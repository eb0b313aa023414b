#include "common/policy_file.h"

#include <map>
#include <memory>
#include <optional>

#include "common/calendar.h"
#include "common/duration.h"
#include "common/key_limiter.h"
#include "common/read_file.h"
#include "common/share_allocation.h"
#include "common/yaml_reader.h"

namespace limiter {
namespace {

using Field = YamlReader::Field;

class Loader {
 public:
  explicit Loader(YamlReader& reader) : r_(reader) {}

  PolicySet Load(const YAML::Node& root);

 private:
  Policy ParsePolicy(const YAML::Node& node);
  std::shared_ptr<const Calendar> ParseCalendar(const std::map<std::string, Field>& fields,
                                                const YAML::Node& where, Algorithm algorithm) const;
  // `window_ms`, when given, is the window instead of the `window` field's.
  Rate ParseRate(const std::map<std::string, Field>& fields, const YAML::Node& where,
                 const std::string& prefix, bool burst_allowed,
                 std::optional<int64_t> window_ms = std::nullopt) const;
  void ParseFallback(const Field& f, Policy& policy) const;
  void ResolveParents(std::vector<Policy>& policies);

  YamlReader& r_;
  std::vector<YAML::Mark> parent_marks_;
};

PolicySet Loader::Load(const YAML::Node& root) {
  if (!root.IsDefined() || root.IsNull()) {
    r_.Fail(YAML::Mark::null_mark(), "policies", "missing: the file must hold a 'policies' list");
  }
  auto top = r_.Fields(root, "", {"policies"});
  auto it = top.find("policies");
  if (it == top.end()) r_.Fail(root, "policies", "missing: the file must hold a 'policies' list");
  const YAML::Node list = it->second.value;
  if (!list.IsSequence()) r_.Fail(list, "policies", "expected a list of policies");
  if (list.size() == 0) r_.Fail(list, "policies", "the list is empty");

  std::vector<Policy> policies;
  std::map<std::string, int> first_line;
  for (size_t i = 0; i < list.size(); ++i) {
    r_.set_subject("policies[" + std::to_string(i) + "]");
    Policy policy = ParsePolicy(list[i]);
    if (auto [pos, inserted] = first_line.emplace(policy.name, policy.line); !inserted) {
      r_.Fail(list[i]["name"], "name",
              "duplicate policy name (first defined at line " + std::to_string(pos->second) + ")");
    }
    policies.push_back(std::move(policy));
  }
  ResolveParents(policies);
  r_.set_subject("");
  return PolicySet(r_.source(), std::move(policies));
}

Policy Loader::ParsePolicy(const YAML::Node& node) {
  // Name the policy in messages as early as possible, even about its other fields.
  if (node.IsMap() && node["name"] && node["name"].IsScalar()) {
    r_.set_subject("policy '" + node["name"].Scalar() + "'");
  }
  auto fields =
      r_.Fields(node, "",
                {"name", "algorithm", "limit", "window", "align", "timezone", "burst", "class",
                 "parent", "costs", "mode", "lease", "fallback", "durable", "scope", "max_keys"});
  auto require = [&](const char* name) -> const Field& {
    auto it = fields.find(name);
    if (it == fields.end()) r_.Fail(node, name, "missing (it is required)");
    return it->second;
  };
  auto optional = [&](const char* name) -> const Field* {
    auto it = fields.find(name);
    return it == fields.end() ? nullptr : &it->second;
  };

  Policy p;
  p.line = node.Mark().line + 1;
  p.name = r_.Scalar(require("name"), "name");
  if (p.name.empty() || p.name.size() > 64 ||
      p.name.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
          std::string::npos) {
    r_.Fail(require("name").value, "name",
            "must be 1 to 64 letters, digits, '_', '.' or '-', got '" + p.name + "'");
  }
  r_.set_subject("policy '" + p.name + "'");

  if (const Field* f = optional("algorithm")) {
    const std::string text = r_.Scalar(*f, "algorithm");
    const std::optional<Algorithm> a = ParseAlgorithm(text);
    if (!a) {
      r_.Fail(f->value, "algorithm",
              "unknown algorithm '" + text + "' (known: " + std::string(AlgorithmNameList()) + ")");
    }
    p.algorithm = *a;
  }
  const bool bucket = p.algorithm == Algorithm::kTokenBucket || p.algorithm == Algorithm::kGcra ||
                      p.algorithm == Algorithm::kLeakyBucket;
  p.calendar = ParseCalendar(fields, node, p.algorithm);
  p.rate = ParseRate(fields, node, "", bucket,
                     p.calendar ? std::optional(p.calendar->nominal_window_ms()) : std::nullopt);
  if (Status s = SupportsRate(p.algorithm, p.rate); !s.ok()) {
    r_.Fail(require("limit").value, "limit", s.error());
  }

  const Field& cls = require("class");
  const std::string cls_text = r_.Scalar(cls, "class");
  const std::optional<LimitClass> limit_class = ParseLimitClass(cls_text);
  if (!limit_class) {
    r_.Fail(cls.value, "class",
            "unknown class '" + cls_text + "' (known: security, contract, billing, capacity)");
  }
  p.limit_class = *limit_class;

  if (const Field* f = optional("parent")) {
    p.parent = r_.Scalar(*f, "parent");
    if (p.parent.empty()) r_.Fail(f->value, "parent", "must name a policy");
  }
  parent_marks_.push_back(optional("parent") ? optional("parent")->value.Mark() : YAML::Mark());

  if (const Field* f = optional("costs")) {
    if (!f->value.IsMap()) r_.Fail(f->value, "costs", "expected a map of operation: cost");
    for (const auto& kv : f->value) {
      if (!kv.first.IsScalar() || kv.first.Scalar().empty()) {
        r_.Fail(kv.first, "costs", "operation names must be non-empty words");
      }
      const std::string op = kv.first.Scalar();
      for (const auto& [seen, cost] : p.costs) {
        if (seen == op) r_.Fail(kv.first, "costs." + op, "given twice");
      }
      const int64_t cost = r_.PositiveInt(Field{kv.first, kv.second}, "costs." + op);
      if (cost > kMaxCost) {
        r_.Fail(kv.second, "costs." + op, "must be at most " + std::to_string(kMaxCost));
      }
      p.costs.emplace_back(op, cost);
    }
  }
  p.mode = p.limit_class == LimitClass::kSecurity ? LeaseMode::kStrict : LeaseMode::kLease;
  if (const Field* f = optional("mode")) {
    const std::string text = r_.Scalar(*f, "mode");
    if (text == "lease") {
      p.mode = LeaseMode::kLease;
    } else if (text == "strict") {
      p.mode = LeaseMode::kStrict;
    } else {
      r_.Fail(f->value, "mode", "expected lease or strict, got '" + text + "'");
    }
  }
  if (const Field* f = optional("lease")) {
    if (p.mode != LeaseMode::kLease) r_.Fail(f->key, "lease", "only applies to mode: lease");
    auto lease = r_.Fields(f->value, "lease", {"size", "ttl"});
    if (auto it = lease.find("size"); it != lease.end()) {
      p.lease.size = r_.PositiveInt(it->second, "lease.size");
      const int64_t most = bucket ? p.rate.burst() : p.rate.limit();
      if (p.lease.size > most) {
        r_.Fail(it->second.value, "lease.size",
                "must not exceed " + std::string(bucket ? "the burst" : "the limit") + " (" +
                    std::to_string(most) + "), got " + std::to_string(p.lease.size));
      }
    }
    if (auto it = lease.find("ttl"); it != lease.end()) {
      p.lease.ttl_ms = r_.DurationMs(it->second, "lease.ttl");
    }
  }
  if (const Field* f = optional("fallback")) {
    ParseFallback(*f, p);
  } else if (p.limit_class == LimitClass::kCapacity) {
    r_.Fail(node, "fallback",
            "missing: capacity limits need fallback.max_concurrency (their local load shedder)");
  }
  if (const Field* f = optional("durable")) p.durable = r_.Bool(*f, "durable");
  if (const Field* f = optional("max_keys")) p.max_keys = r_.PositiveInt(*f, "max_keys");
  if (const Field* f = optional("scope")) {
    const std::string text = r_.Scalar(*f, "scope");
    if (text == "region") {
      p.scope = Scope::kRegion;
    } else if (text == "global") {
      p.scope = Scope::kGlobal;
      if (Status s = GlobalScopeError(p.algorithm); !s.ok()) r_.Fail(f->value, "scope", s.error());
    } else {
      r_.Fail(f->value, "scope", "expected region or global, got '" + text + "'");
    }
  }
  return p;
}

// align: calendar, with its window (1d, 1w or 1mo) and timezone (UTC when none is given); null
// without align, which then rejects what only calendar windows take: a timezone, months.
std::shared_ptr<const Calendar> Loader::ParseCalendar(const std::map<std::string, Field>& fields,
                                                      const YAML::Node& where,
                                                      Algorithm algorithm) const {
  auto optional = [&](const char* name) -> const Field* {
    auto it = fields.find(name);
    return it == fields.end() ? nullptr : &it->second;
  };
  const Field* align = optional("align");
  const Field* timezone = optional("timezone");
  const Field* window = optional("window");
  if (align == nullptr) {
    if (timezone != nullptr) r_.Fail(timezone->key, "timezone", "only applies to align: calendar");
    if (window != nullptr && window->value.IsScalar() && ParseMonths(window->value.Scalar())) {
      r_.Fail(window->value, "window",
              "a window in months needs align: calendar, got '" + window->value.Scalar() + "'");
    }
    return nullptr;
  }
  const std::string text = r_.Scalar(*align, "align");
  if (text != "calendar") r_.Fail(align->value, "align", "expected calendar, got '" + text + "'");
  if (algorithm != Algorithm::kFixedWindow) {
    r_.Fail(align->value, "align",
            "align: calendar takes algorithm: fixed_window, not " +
                std::string(AlgorithmName(algorithm)));
  }
  if (window == nullptr) r_.Fail(where, "window", "missing (it is required)");
  const std::string span = r_.Scalar(*window, "window");
  CalendarUnit unit = CalendarUnit::kDay;
  if (span == "1w") {
    unit = CalendarUnit::kWeek;
  } else if (span == "1mo") {
    unit = CalendarUnit::kMonth;
  } else if (span != "1d") {
    r_.Fail(window->value, "window",
            "align: calendar takes a window of 1d, 1w or 1mo, got '" + span + "'");
  }
  const std::string zone = timezone != nullptr ? r_.Scalar(*timezone, "timezone") : "UTC";
  Result<std::shared_ptr<const Calendar>> calendar = Calendar::Make(unit, zone);
  if (!calendar) {
    r_.Fail(timezone != nullptr ? timezone->value.Mark() : where.Mark(), "timezone",
            calendar.error());
  }
  return *calendar;
}

Rate Loader::ParseRate(const std::map<std::string, Field>& fields, const YAML::Node& where,
                       const std::string& prefix, bool burst_allowed,
                       std::optional<int64_t> window_ms) const {
  auto require = [&](const char* name) -> const Field& {
    auto it = fields.find(name);
    if (it == fields.end()) r_.Fail(where, prefix + name, "missing (it is required)");
    return it->second;
  };
  const Field& limit_field = require("limit");
  const int64_t limit = r_.PositiveInt(limit_field, prefix + "limit");
  const int64_t window =
      window_ms ? *window_ms : r_.DurationMs(require("window"), prefix + "window");
  int64_t burst = limit;
  if (auto it = fields.find("burst"); it != fields.end()) {
    if (!burst_allowed) {
      r_.Fail(it->second.key, prefix + "burst",
              "only token_bucket, gcra and leaky_bucket have a burst");
    }
    burst = r_.PositiveInt(it->second, prefix + "burst");
  }
  if (Status s = Rate::Validate(limit, window, burst); !s.ok()) {
    r_.Fail(limit_field.value, prefix + "limit", s.error());
  }
  return Rate(limit, window, burst);
}

void Loader::ParseFallback(const Field& f, Policy& p) const {
  switch (p.limit_class) {
    case LimitClass::kSecurity: {
      auto fields = r_.Fields(f.value, "fallback", {"limit", "window", "burst"});
      p.fallback.local_rate = ParseRate(fields, f.value, "fallback.", true);
      break;
    }
    case LimitClass::kContract: {
      auto fields = r_.Fields(f.value, "fallback", {"overshoot"});
      if (auto it = fields.find("overshoot"); it != fields.end()) {
        p.fallback.allow_overshoot = r_.Bool(it->second, "fallback.overshoot");
      }
      break;
    }
    case LimitClass::kBilling:
      r_.Fail(f.key, "fallback",
              "billing limits fail open and reconcile; they take no fallback settings");
    case LimitClass::kCapacity: {
      auto fields =
          r_.Fields(f.value, "fallback", {"max_concurrency", "max_queue", "queue_timeout"});
      auto it = fields.find("max_concurrency");
      if (it == fields.end()) {
        r_.Fail(f.value, "fallback.max_concurrency", "missing (capacity limits need it)");
      }
      p.fallback.max_concurrency = r_.PositiveInt(it->second, "fallback.max_concurrency");
      if (auto q = fields.find("max_queue"); q != fields.end()) {
        p.fallback.max_queue = r_.PositiveInt(q->second, "fallback.max_queue");
      }
      if (auto q = fields.find("queue_timeout"); q != fields.end()) {
        p.fallback.queue_timeout_ms = r_.DurationMs(q->second, "fallback.queue_timeout");
      }
      break;
    }
  }
}

void Loader::ResolveParents(std::vector<Policy>& policies) {
  std::map<std::string_view, int> index;
  for (size_t i = 0; i < policies.size(); ++i) index.emplace(policies[i].name, static_cast<int>(i));
  auto fail_at = [&](size_t i, const std::string& what) {
    r_.set_subject("policy '" + policies[i].name + "'");
    r_.Fail(parent_marks_[i], "parent", what);
  };
  for (size_t i = 0; i < policies.size(); ++i) {
    if (policies[i].parent.empty()) continue;
    auto it = index.find(policies[i].parent);
    if (it == index.end()) fail_at(i, "unknown parent '" + policies[i].parent + "'");
    policies[i].parent_index = it->second;
  }
  // Walk up from each policy; meeting the start again is a cycle.
  for (size_t i = 0; i < policies.size(); ++i) {
    std::string path = policies[i].name;
    int at = policies[i].parent_index;
    for (size_t steps = 0; at >= 0 && steps <= policies.size(); ++steps) {
      path += " -> " + policies[static_cast<size_t>(at)].name;
      if (static_cast<size_t>(at) == i) fail_at(i, "parent cycle: " + path);
      at = policies[static_cast<size_t>(at)].parent_index;
    }
  }
}

}  // namespace

Result<PolicySet> ParsePolicies(std::string_view text, const std::string& source) {
  return LoadYaml<PolicySet>(text, source, [](YamlReader& reader, const YAML::Node& root) {
    return Loader(reader).Load(root);
  });
}

Result<PolicySet> LoadPolicyFile(const std::string& path) {
  Result<std::string> text = ReadWholeFile(path, "policy");
  if (!text) return Error{text.error()};
  return ParsePolicies(*text, path);
}

}  // namespace limiter
