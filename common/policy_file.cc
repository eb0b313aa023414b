#include "common/policy_file.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <map>
#include <sstream>

#include "common/duration.h"
#include "common/read_file.h"

namespace limiter {
namespace {

// Unwinds the loader to ParsePolicies with the first problem found; never escapes it.
struct LoadError {
  std::string message;
};

struct Field {
  YAML::Node key;
  YAML::Node value;
};

class Loader {
 public:
  explicit Loader(const std::string& source) : source_(source) {}

  PolicySet Load(const YAML::Node& root);

 private:
  [[noreturn]] void Fail(const YAML::Mark& mark, const std::string& field,
                         const std::string& what) const;
  [[noreturn]] void Fail(const YAML::Node& node, const std::string& field,
                         const std::string& what) const {
    Fail(node.Mark(), field, what);
  }

  // The fields of a map, checked against `known`; duplicate and unknown fields fail.
  std::map<std::string, Field> Fields(const YAML::Node& map, const std::string& field,
                                      std::initializer_list<std::string_view> known) const;
  std::string Scalar(const Field& f, const std::string& field) const;
  int64_t PositiveInt(const Field& f, const std::string& field) const;
  int64_t DurationMs(const Field& f, const std::string& field) const;
  bool Bool(const Field& f, const std::string& field) const;

  Policy ParsePolicy(const YAML::Node& node);
  Rate ParseRate(const std::map<std::string, Field>& fields, const YAML::Node& where,
                 const std::string& prefix, bool burst_allowed) const;
  void ParseFallback(const Field& f, Policy& policy) const;
  void ResolveParents(std::vector<Policy>& policies);

  const std::string& source_;
  std::string subject_;  // "policy 'NAME'" or "policies[i]", for messages
  std::vector<YAML::Mark> parent_marks_;
};

void Loader::Fail(const YAML::Mark& mark, const std::string& field,
                  const std::string& what) const {
  std::ostringstream out;
  out << source_;
  if (!mark.is_null()) out << ':' << mark.line + 1 << ':' << mark.column + 1;
  out << ": ";
  if (!subject_.empty()) out << subject_ << ", ";
  if (!field.empty()) out << "field '" << field << "': ";
  out << what;
  throw LoadError{out.str()};
}

std::map<std::string, Field> Loader::Fields(const YAML::Node& map, const std::string& field,
                                            std::initializer_list<std::string_view> known) const {
  if (!map.IsMap()) Fail(map, field, "expected a map of fields");
  std::map<std::string, Field> fields;
  const std::string prefix = field.empty() ? "" : field + ".";
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) Fail(kv.first, field, "field names must be plain words");
    const std::string name = kv.first.Scalar();
    bool is_known = false;
    std::string list;
    for (std::string_view k : known) {
      is_known = is_known || k == name;
      list += (list.empty() ? "" : ", ") + std::string(k);
    }
    if (!is_known) Fail(kv.first, prefix + name, "unknown field (known: " + list + ")");
    if (auto it = fields.find(name); it != fields.end()) {
      Fail(kv.first, prefix + name,
           "given twice (first at line " + std::to_string(it->second.key.Mark().line + 1) + ")");
    }
    fields.emplace(name, Field{kv.first, kv.second});
  }
  return fields;
}

std::string Loader::Scalar(const Field& f, const std::string& field) const {
  if (!f.value.IsScalar()) Fail(f.value, field, "expected a single value, got a list or map");
  return f.value.Scalar();
}

int64_t Loader::PositiveInt(const Field& f, const std::string& field) const {
  const std::string text = Scalar(f, field);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) Fail(f.value, field, "'" + text + "' is too large");
  if (ec != std::errc() || end != text.data() + text.size()) {
    Fail(f.value, field, "expected a positive integer, got '" + text + "'");
  }
  if (value <= 0) Fail(f.value, field, "must be a positive integer, got " + text);
  return value;
}

int64_t Loader::DurationMs(const Field& f, const std::string& field) const {
  const std::string text = Scalar(f, field);
  const std::optional<int64_t> ms = ParseDurationMs(text);
  if (!ms) {
    Fail(f.value, field,
         "expected a duration such as 250ms, 1s, 5m, 1h or 1d, got '" + text + "'");
  }
  if (*ms <= 0) Fail(f.value, field, "must be at least 1ms, got '" + text + "'");
  return *ms;
}

bool Loader::Bool(const Field& f, const std::string& field) const {
  const std::string text = Scalar(f, field);
  if (text == "true") return true;
  if (text == "false") return false;
  Fail(f.value, field, "expected true or false, got '" + text + "'");
}

PolicySet Loader::Load(const YAML::Node& root) {
  if (!root.IsDefined() || root.IsNull()) {
    Fail(YAML::Mark::null_mark(), "policies", "missing: the file must hold a 'policies' list");
  }
  auto top = Fields(root, "", {"policies"});
  auto it = top.find("policies");
  if (it == top.end()) Fail(root, "policies", "missing: the file must hold a 'policies' list");
  const YAML::Node list = it->second.value;
  if (!list.IsSequence()) Fail(list, "policies", "expected a list of policies");
  if (list.size() == 0) Fail(list, "policies", "the list is empty");

  std::vector<Policy> policies;
  std::map<std::string, int> first_line;
  for (size_t i = 0; i < list.size(); ++i) {
    subject_ = "policies[" + std::to_string(i) + "]";
    Policy policy = ParsePolicy(list[i]);
    if (auto [pos, inserted] = first_line.emplace(policy.name, policy.line); !inserted) {
      Fail(list[i]["name"], "name",
           "duplicate policy name (first defined at line " + std::to_string(pos->second) + ")");
    }
    policies.push_back(std::move(policy));
  }
  ResolveParents(policies);
  subject_.clear();
  return PolicySet(source_, std::move(policies));
}

Policy Loader::ParsePolicy(const YAML::Node& node) {
  // Name the policy in messages as early as possible, even about its other fields.
  if (node.IsMap() && node["name"] && node["name"].IsScalar()) {
    subject_ = "policy '" + node["name"].Scalar() + "'";
  }
  auto fields = Fields(node, "", {"name", "algorithm", "limit", "window", "burst", "class",
                                  "parent", "costs", "mode", "lease", "fallback", "durable",
                                  "scope"});
  auto require = [&](const char* name) -> const Field& {
    auto it = fields.find(name);
    if (it == fields.end()) Fail(node, name, "missing (it is required)");
    return it->second;
  };
  auto optional = [&](const char* name) -> const Field* {
    auto it = fields.find(name);
    return it == fields.end() ? nullptr : &it->second;
  };

  Policy p;
  p.line = node.Mark().line + 1;
  p.name = Scalar(require("name"), "name");
  if (p.name.empty() || p.name.size() > 64 ||
      p.name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-") !=
          std::string::npos) {
    Fail(require("name").value, "name",
         "must be 1 to 64 letters, digits, '_', '.' or '-', got '" + p.name + "'");
  }
  subject_ = "policy '" + p.name + "'";

  if (const Field* f = optional("algorithm")) {
    const std::string text = Scalar(*f, "algorithm");
    const std::optional<Algorithm> a = ParseAlgorithm(text);
    if (!a) {
      Fail(f->value, "algorithm",
           "unknown algorithm '" + text + "' (known: " + std::string(AlgorithmNameList()) + ")");
    }
    p.algorithm = *a;
  }
  const bool bucket = p.algorithm == Algorithm::kTokenBucket || p.algorithm == Algorithm::kGcra ||
                      p.algorithm == Algorithm::kLeakyBucket;
  p.rate = ParseRate(fields, node, "", bucket);

  const Field& cls = require("class");
  const std::string cls_text = Scalar(cls, "class");
  const std::optional<LimitClass> limit_class = ParseLimitClass(cls_text);
  if (!limit_class) {
    Fail(cls.value, "class",
         "unknown class '" + cls_text + "' (known: security, contract, billing, capacity)");
  }
  p.limit_class = *limit_class;

  if (const Field* f = optional("parent")) {
    p.parent = Scalar(*f, "parent");
    if (p.parent.empty()) Fail(f->value, "parent", "must name a policy");
  }
  parent_marks_.push_back(optional("parent") ? optional("parent")->value.Mark() : YAML::Mark());

  if (const Field* f = optional("costs")) {
    if (!f->value.IsMap()) Fail(f->value, "costs", "expected a map of operation: cost");
    for (const auto& kv : f->value) {
      if (!kv.first.IsScalar() || kv.first.Scalar().empty()) {
        Fail(kv.first, "costs", "operation names must be non-empty words");
      }
      const std::string op = kv.first.Scalar();
      for (const auto& [seen, cost] : p.costs) {
        if (seen == op) Fail(kv.first, "costs." + op, "given twice");
      }
      const int64_t cost = PositiveInt(Field{kv.first, kv.second}, "costs." + op);
      if (cost > kMaxCost) {
        Fail(kv.second, "costs." + op, "must be at most " + std::to_string(kMaxCost));
      }
      p.costs.emplace_back(op, cost);
    }
  }
  p.mode = p.limit_class == LimitClass::kSecurity ? LeaseMode::kStrict : LeaseMode::kLease;
  if (const Field* f = optional("mode")) {
    const std::string text = Scalar(*f, "mode");
    if (text == "lease") {
      p.mode = LeaseMode::kLease;
    } else if (text == "strict") {
      p.mode = LeaseMode::kStrict;
    } else {
      Fail(f->value, "mode", "expected lease or strict, got '" + text + "'");
    }
  }
  if (const Field* f = optional("lease")) {
    if (p.mode != LeaseMode::kLease) Fail(f->key, "lease", "only applies to mode: lease");
    auto lease = Fields(f->value, "lease", {"size", "ttl"});
    if (auto it = lease.find("size"); it != lease.end()) {
      p.lease.size = PositiveInt(it->second, "lease.size");
      const int64_t most = bucket ? p.rate.burst() : p.rate.limit();
      if (p.lease.size > most) {
        Fail(it->second.value, "lease.size",
             "must not exceed " + std::string(bucket ? "the burst" : "the limit") + " (" +
                 std::to_string(most) + "), got " + std::to_string(p.lease.size));
      }
    }
    if (auto it = lease.find("ttl"); it != lease.end()) {
      p.lease.ttl_ms = DurationMs(it->second, "lease.ttl");
    }
  }
  if (const Field* f = optional("fallback")) {
    ParseFallback(*f, p);
  } else if (p.limit_class == LimitClass::kCapacity) {
    Fail(node, "fallback",
         "missing: capacity limits need fallback.max_concurrency (their local load shedder)");
  }
  if (const Field* f = optional("durable")) p.durable = Bool(*f, "durable");
  if (const Field* f = optional("scope")) {
    const std::string text = Scalar(*f, "scope");
    if (text == "region") {
      p.scope = Scope::kRegion;
    } else if (text == "global") {
      p.scope = Scope::kGlobal;
    } else {
      Fail(f->value, "scope", "expected region or global, got '" + text + "'");
    }
  }
  return p;
}

Rate Loader::ParseRate(const std::map<std::string, Field>& fields, const YAML::Node& where,
                       const std::string& prefix, bool burst_allowed) const {
  auto require = [&](const char* name) -> const Field& {
    auto it = fields.find(name);
    if (it == fields.end()) Fail(where, prefix + name, "missing (it is required)");
    return it->second;
  };
  const Field& limit_field = require("limit");
  const int64_t limit = PositiveInt(limit_field, prefix + "limit");
  const int64_t window = DurationMs(require("window"), prefix + "window");
  int64_t burst = limit;
  if (auto it = fields.find("burst"); it != fields.end()) {
    if (!burst_allowed) {
      Fail(it->second.key, prefix + "burst",
           "only token_bucket, gcra and leaky_bucket have a burst");
    }
    burst = PositiveInt(it->second, prefix + "burst");
  }
  if (auto why = Rate::Invalid(limit, window, burst)) Fail(limit_field.value, prefix + "limit", *why);
  return Rate(limit, window, burst);
}

void Loader::ParseFallback(const Field& f, Policy& p) const {
  switch (p.limit_class) {
    case LimitClass::kSecurity: {
      auto fields = Fields(f.value, "fallback", {"limit", "window", "burst"});
      p.fallback.local_rate = ParseRate(fields, f.value, "fallback.", true);
      break;
    }
    case LimitClass::kContract: {
      auto fields = Fields(f.value, "fallback", {"overshoot"});
      if (auto it = fields.find("overshoot"); it != fields.end()) {
        p.fallback.allow_overshoot = Bool(it->second, "fallback.overshoot");
      }
      break;
    }
    case LimitClass::kBilling:
      Fail(f.key, "fallback",
           "billing limits fail open and reconcile; they take no fallback settings");
    case LimitClass::kCapacity: {
      auto fields = Fields(f.value, "fallback", {"max_concurrency", "max_queue", "queue_timeout"});
      auto it = fields.find("max_concurrency");
      if (it == fields.end()) {
        Fail(f.value, "fallback.max_concurrency", "missing (capacity limits need it)");
      }
      p.fallback.max_concurrency = PositiveInt(it->second, "fallback.max_concurrency");
      if (auto q = fields.find("max_queue"); q != fields.end()) {
        p.fallback.max_queue = PositiveInt(q->second, "fallback.max_queue");
      }
      if (auto q = fields.find("queue_timeout"); q != fields.end()) {
        p.fallback.queue_timeout_ms = DurationMs(q->second, "fallback.queue_timeout");
      }
      break;
    }
  }
}

void Loader::ResolveParents(std::vector<Policy>& policies) {
  std::map<std::string_view, int> index;
  for (size_t i = 0; i < policies.size(); ++i) index.emplace(policies[i].name, static_cast<int>(i));
  auto fail_at = [&](size_t i, const std::string& what) {
    subject_ = "policy '" + policies[i].name + "'";
    Fail(parent_marks_[i], "parent", what);
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
  try {
    const YAML::Node root = YAML::Load(std::string(text));
    Loader loader(source);
    return loader.Load(root);
  } catch (const LoadError& e) {
    return Error{e.message};
  } catch (const YAML::Exception& e) {
    std::ostringstream out;
    out << source;
    if (!e.mark.is_null()) out << ':' << e.mark.line + 1 << ':' << e.mark.column + 1;
    out << ": not valid YAML: " << e.msg;
    return Error{out.str()};
  }
}

Result<PolicySet> LoadPolicyFile(const std::string& path) {
  Result<std::string> text = ReadWholeFile(path, "policy");
  if (!text) return Error{text.error()};
  return ParsePolicies(*text, path);
}

}  // namespace limiter
