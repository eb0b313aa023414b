// A fault schedule for a simulation (`limiter-bench sim --faults SPEC`): clauses separated by
// ';', each a fault with optional ", <end> at T" parts; SimNetwork (sim/network.h) carries out
// the faults on the network. Nodes and gateways are numbered from 1; times are
// simulated seconds from the start ("4s", "4.5s", "500ms").
//
//   kill node N at T [, restart at T2]         the process dies (peers get resets); a restart
//                                              comes back empty, as after kill -9
//   partition gateways A-B from node N at T [, heal at T2]
//                                              frames between them vanish (deadlines fire)
//   slow node N by X at T [, until T2]         its service times multiplied by X
//   add node at T                              a new member joins (ring change, hand-off)
//   hot tenant [N] at T [, until T2] [, rate R]
//                                              R requests/s (default 30000) more, spread over
//                                              tenant N's keys (default tenant 1000)
//
// Parsing is pure; errors name the clause and what was expected.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "limiter/status.h"

namespace limiter::sim {

struct Fault {
  enum class Kind { kKill, kPartition, kSlow, kAddNode, kHotTenant };
  Kind kind = Kind::kKill;
  int64_t at_us = 0;
  int64_t until_us = -1;                 // restart, heal, until; -1: never
  int node = 0;                          // 0-based
  int gateway_from = 0, gateway_to = 0;  // 0-based, inclusive
  double factor = 1;                     // slow
  int64_t tenant = 1000;                 // hot tenant
  double rate = 30'000;
  std::string text;  // the clause, for the report
};

// Every fault of `spec` (empty: none), or an error naming the bad clause.
Result<std::vector<Fault>> ParseFaults(const std::string& spec);

// Checks node and gateway numbers against the fleet (`nodes` at the start; each add node adds
// one from its time on): ok, or the first fault that names what the fleet does not have.
Status CheckFaults(const std::vector<Fault>& faults, int nodes, int gateways, int64_t tenants);

}  // namespace limiter::sim
