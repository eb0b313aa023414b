// Member lists: "host:port" strings, given statically or found by resolving one DNS name
// (a Kubernetes headless service gives one address per pod).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "limiter/status.h"

namespace limiter {

// Splits "a:1,b:2" into members; an error names the first malformed one.
Result<std::vector<std::string>> ParseMemberList(const std::string& text);

// Resolves "name:port" to "address:port" for every address (IPv6 as "[addr]:port"),
// sorted and without repeats. Blocks on DNS.
Result<std::vector<std::string>> ResolveMembers(const std::string& name_and_port);

// The generation of a member list that DNS just answered: the wall-clock time in ms since the
// Unix epoch, so that a later answer is newer on every process whose clocks roughly agree.
// (A static list's generation comes from its configuration.)
uint64_t DnsGeneration();
// The wall clock in ms since the Unix epoch: the generation of a list a node announces when it
// leaves or joins (server/peers.h), comparable with DnsGeneration's.
uint64_t WallClockGeneration();

}  // namespace limiter
