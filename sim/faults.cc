#include "sim/faults.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <optional>
#include <sstream>

namespace limiter::sim {
namespace {

std::string Trim(std::string s) {
  const auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) out.push_back(Trim(part));
  return out;
}

std::vector<std::string> Words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::optional<double> Number(const std::string& s) {
  double v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || p != end || !std::isfinite(v) || v < 0) return std::nullopt;
  return v;
}

std::optional<int64_t> Integer(const std::string& s) {
  int64_t v = 0;
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || p != end || v < 0) return std::nullopt;
  return v;
}

// "4s", "4.5s", "500ms" in microseconds.
std::optional<int64_t> Time(const std::string& s) {
  double scale = 0;
  std::string digits;
  if (s.size() > 2 && s.ends_with("ms")) {
    scale = 1e3;
    digits = s.substr(0, s.size() - 2);
  } else if (s.size() > 1 && s.ends_with("s")) {
    scale = 1e6;
    digits = s.substr(0, s.size() - 1);
  } else {
    return std::nullopt;
  }
  const std::optional<double> v = Number(digits);
  if (!v || *v * scale > 1e15) return std::nullopt;
  return static_cast<int64_t>(std::llround(*v * scale));
}

// Parses one clause, or says what is wrong with it.
Result<Fault> Clause(const std::string& clause) {
  const std::vector<std::string> parts = Split(clause, ',');
  const std::vector<std::string> w = Words(parts.front());
  Fault f;
  f.text = clause;
  auto at = [&](size_t i) -> Status {
    if (w.size() != i + 2 || w[i] != "at") {
      return Error{"expected 'at TIME' after '" + (i ? w[i - 1] : std::string()) + "'"};
    }
    const std::optional<int64_t> t = Time(w[i + 1]);
    if (!t) {
      return Error{"'" + w[i + 1] + "' is not a time (say 4s, 4.5s or 500ms)"};
    }
    f.at_us = *t;
    return Status::Ok();
  };
  auto node_number = [&](const std::string& s) -> Status {
    const std::optional<int64_t> n = Integer(s);
    if (!n || *n < 1 || *n > 1024) {
      return Error{"'" + s + "' is not a node number (1, 2, ...)"};
    }
    f.node = static_cast<int>(*n - 1);
    return Status::Ok();
  };
  std::vector<std::string> ends;  // the words the optional parts may start with
  if (w.size() >= 2 && w[0] == "kill" && w[1] == "node") {
    f.kind = Fault::Kind::kKill;
    if (w.size() < 3) {
      return Error{"expected 'kill node N at T'"};
    }
    if (Status s = node_number(w[2]); !s.ok()) return s;
    if (Status s = at(3); !s.ok()) return s;
    ends = {"restart"};
  } else if (w.size() >= 2 && w[0] == "partition" && (w[1] == "gateways" || w[1] == "gateway")) {
    f.kind = Fault::Kind::kPartition;
    if (w.size() < 6 || w[3] != "from" || w[4] != "node") {
      return Error{"expected 'partition gateways A-B from node N at T'"};
    }
    const std::vector<std::string> range = Split(w[2], '-');
    const size_t dashes = static_cast<size_t>(std::count(w[2].begin(), w[2].end(), '-'));
    const std::optional<int64_t> a = range.empty() ? std::nullopt : Integer(range.front());
    const std::optional<int64_t> b = range.size() == 2 ? Integer(range[1]) : a;
    if (range.size() != dashes + 1 || range.size() > 2 || !a || !b || *a < 1 || *b < *a ||
        *b > 65535) {
      return Error{"'" + w[2] + "' is not a gateway range (say 1-20, or 3)"};
    }
    f.gateway_from = static_cast<int>(*a - 1);
    f.gateway_to = static_cast<int>(*b - 1);
    if (Status s = node_number(w[5]); !s.ok()) return s;
    if (Status s = at(6); !s.ok()) return s;
    ends = {"heal"};
  } else if (w.size() >= 2 && w[0] == "slow" && w[1] == "node") {
    f.kind = Fault::Kind::kSlow;
    if (w.size() < 5) return Error{"expected 'slow node N by X at T'"};
    if (Status s = node_number(w[2]); !s.ok()) return s;
    const std::optional<double> x = w[3] == "by" ? Number(w[4]) : std::nullopt;
    if (!x || *x < 1 || *x > 1000) {
      return Error{"expected 'by X' with X from 1 to 1000 after 'slow node N'"};
    }
    f.factor = *x;
    if (Status s = at(5); !s.ok()) return s;
    ends = {"until"};
  } else if (w.size() >= 2 && w[0] == "add" && w[1] == "node") {
    f.kind = Fault::Kind::kAddNode;
    if (Status s = at(2); !s.ok()) return s;
  } else if (w.size() >= 2 && w[0] == "hot" && w[1] == "tenant") {
    f.kind = Fault::Kind::kHotTenant;
    size_t i = 2;
    if (w.size() > 2 && w[2] != "at") {
      const std::optional<int64_t> t = Integer(w[2]);
      if (!t) {
        return Error{"'" + w[2] + "' is not a tenant number"};
      }
      f.tenant = *t;
      i = 3;
    }
    if (Status s = at(i); !s.ok()) return s;
    ends = {"until", "rate"};
  } else {
    return Error{
        "unknown fault (known: kill node, partition gateways, slow node, add node, "
        "hot tenant)"};
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    std::vector<std::string> e = Words(parts[i]);
    if (e.size() == 2 && e[0] == "rate" &&
        std::find(ends.begin(), ends.end(), "rate") != ends.end()) {
      const std::optional<double> r =
          Number(e[1].ends_with("/s") ? e[1].substr(0, e[1].size() - 2) : e[1]);
      if (!r || *r <= 0 || *r > 1e7) {
        return Error{"'" + e[1] + "' is not a rate (requests/s, up to 10,000,000)"};
      }
      f.rate = *r;
      continue;
    }
    // "until T" reads better than "until at T"; both are taken.
    if (e.size() == 2 && e[0] == "until") e.insert(e.begin() + 1, "at");
    if (e.size() != 3 || e[1] != "at" || std::find(ends.begin(), ends.end(), e[0]) == ends.end()) {
      std::string allowed;
      for (const std::string& x : ends) {
        allowed += (allowed.empty() ? "'" : ", '") + x +
                   (x == "rate"    ? " R'"
                    : x == "until" ? " T'"
                                   : " at T'");
      }
      return Error{"'" + parts[i] + "' is not " +
                   (ends.empty() ? "allowed here" : "one of " + allowed)};
    }
    const std::optional<int64_t> t = Time(e[2]);
    if (!t) {
      return Error{"'" + e[2] + "' is not a time (say 4s, 4.5s or 500ms)"};
    }
    if (*t <= f.at_us) {
      return Error{"'" + parts[i] + "' must come after " + w.back()};
    }
    if (f.until_us >= 0) {
      return Error{"'" + parts[i] + "' comes twice"};
    }
    f.until_us = *t;
  }
  return f;
}

}  // namespace

Result<std::vector<Fault>> ParseFaults(const std::string& spec) {
  std::vector<Fault> out;
  if (Trim(spec).empty()) return out;
  for (const std::string& clause : Split(spec, ';')) {
    if (clause.empty()) continue;
    if (clause.back() == ',' || clause.find(",,") != std::string::npos) {
      return Error{"--faults: in '" + clause + "': an empty part between commas"};
    }
    Result<Fault> f = Clause(clause);
    if (!f) return Error{"--faults: in '" + clause + "': " + f.error()};
    out.push_back(std::move(*f));
  }
  return out;
}

Status CheckFaults(const std::vector<Fault>& faults, int nodes, int gateways, int64_t tenants) {
  std::vector<int64_t> adds;
  for (const Fault& f : faults) {
    if (f.kind == Fault::Kind::kAddNode) adds.push_back(f.at_us);
  }
  for (const Fault& f : faults) {
    const bool names_node = f.kind == Fault::Kind::kKill || f.kind == Fault::Kind::kPartition ||
                            f.kind == Fault::Kind::kSlow;
    if (names_node) {
      const int64_t present =
          nodes + std::count_if(adds.begin(), adds.end(), [&](int64_t t) { return t < f.at_us; });
      if (f.node >= present) {
        return Error{"--faults: in '" + f.text + "': node " + std::to_string(f.node + 1) +
                     " does not exist then (" + std::to_string(present) + " nodes)"};
      }
    }
    if (f.kind == Fault::Kind::kPartition && f.gateway_to >= gateways) {
      return Error{"--faults: in '" + f.text + "': there are " + std::to_string(gateways) +
                   " gateways"};
    }
    if (f.kind == Fault::Kind::kHotTenant && f.tenant >= tenants) {
      return Error{"--faults: in '" + f.text + "': there are " + std::to_string(tenants) +
                   " tenants (0 to " + std::to_string(tenants - 1) + ")"};
    }
  }
  return Status::Ok();
}

}  // namespace limiter::sim
