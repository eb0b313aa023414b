// limiterctl regions: what the nodes of one region know of the others (README "Regions").
//   --policy P --key K: the key's owner answers with every region's share of it, its demand,
//     the age of that region's last report for the key, and the link's health;
//   neither: each node answers with its links to the other regions.
// --json prints one object; its fields are documented in the README and stay stable.
#include <iomanip>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "client/ctl/commands.h"
#include "client/ctl/ops.h"
#include "common/member_list.h"
#include "protocol/ring.h"
#include "protocol/rules.h"

namespace limiter::ctl {
namespace {

using Json = nlohmann::ordered_json;

std::string Age(int64_t ms) {
  if (ms < 0) return "never";
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << static_cast<double>(ms) / 1000 << " s";
  return out.str();
}

std::string Link(const wire::RegionState& r, bool self) {
  if (self) return "(this region)";
  if (r.link_age_ms() < 0) return "never heard";
  return std::string(r.link_up() ? "up" : "DOWN") + ", heard " + Age(r.link_age_ms()) + " ago";
}

Json RegionJson(const wire::RegionState& r, bool self) {
  return Json{{"region", r.region() ? r.region()->str() : ""},
              {"self", self},
              {"share", r.share()},
              {"demand", r.demand()},
              {"pending_share", r.pending_share()},
              {"report_age_ms", r.report_age_ms()},
              {"link_age_ms", r.link_age_ms()},
              {"link_up", r.link_up()}};
}

// Asks `node` one REGIONS op; fills `regions` (this region first) or returns an error.
std::string Ask(const std::string& node, const RegionsArgs& args, bool about_key,
                std::vector<Json>& json, std::ostream& text) {
  Result<std::unique_ptr<NodeConnection>> c = NodeConnection::Connect(node, 2000, args.access);
  if (!c) return c.error();
  RequestBuilder b;
  if (about_key) {
    b.Regions(1, args.policy, args.key, args.tenant);
  } else {
    b.Regions(1);
  }
  Result<const wire::OpReply*> r = OneOp(**c, b);
  if (!r) return r.error();
  if ((*r)->status() != wire::Status::Ok) return Refusal(**r);
  const auto* regions = (*r)->regions();
  if (regions == nullptr || regions->size() == 0) return "the node sent no regions";
  for (flatbuffers::uoffset_t i = 0; i < regions->size(); ++i) {
    const wire::RegionState& s = *regions->Get(i);
    const bool self = i == 0;
    json.push_back(RegionJson(s, self));
    const std::string name = (s.region() ? s.region()->str() : "") + (self ? "*" : "");
    text << "  " << std::left << std::setw(16) << name << std::right;
    if (about_key) {
      text << std::setw(10) << (s.share() < 0 ? std::string("?") : std::to_string(s.share()))
           << std::setw(10) << (s.demand() < 0 ? std::string("?") : std::to_string(s.demand()))
           << std::setw(10)
           << (self && s.pending_share() > 0 ? std::to_string(s.pending_share()) : std::string("-"))
           << std::setw(12) << (self ? std::string("-") : Age(s.report_age_ms())) << "  ";
    }
    text << Link(s, self) << '\n';
  }
  return "";
}

}  // namespace

int RunRegions(const RegionsArgs& args, std::ostream& out, std::ostream& err) {
  Result<std::vector<std::string>> members = ParseMemberList(args.cluster);
  if (!members) {
    err << "limiterctl regions: --cluster: " << members.error() << '\n';
    return 2;
  }
  const bool about_key = !args.policy.empty();
  if (about_key && args.key.empty()) {
    err << "limiterctl regions: --policy needs --key\n";
    return 2;
  }
  if (about_key) {
    // The key's owner in this region holds its share: route as the gateways do.
    const Ring ring(*members);
    const std::string owner = ring.Owner(args.tenant.empty() ? args.key : args.tenant);
    std::vector<Json> regions;
    std::ostringstream text;
    if (std::string e = Ask(owner, args, true, regions, text); !e.empty()) {
      err << "limiterctl regions: " << owner << ": " << e << '\n';
      return 1;
    }
    if (args.json) {
      out << Json{{"policy", args.policy}, {"key", args.key}, {"node", owner}, {"regions", regions}}
                 .dump()
          << '\n';
      return 0;
    }
    out << args.policy << " '" << args.key << "' on " << owner
        << " (units per window; * this region)\n"
        << "  " << std::left << std::setw(16) << "region" << std::right << std::setw(10) << "share"
        << std::setw(10) << "demand" << std::setw(10) << "pending" << std::setw(12) << "report age"
        << "  link\n"
        << text.str();
    return 0;
  }
  Json nodes = Json::array();
  int failed = 0;
  for (const std::string& node : *members) {
    std::vector<Json> regions;
    std::ostringstream text;
    if (std::string e = Ask(node, args, false, regions, text); !e.empty()) {
      ++failed;
      err << "limiterctl regions: " << node << ": " << e << '\n';
      nodes.push_back(Json{{"node", node}, {"error", e}});
      continue;
    }
    nodes.push_back(Json{{"node", node}, {"regions", regions}});
    if (!args.json) out << node << '\n' << text.str();
  }
  if (args.json) out << Json{{"nodes", nodes}}.dump() << '\n';
  return failed == static_cast<int>(members->size()) ? 1 : 0;
}

}  // namespace limiter::ctl
