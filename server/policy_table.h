// PolicyTable: the node's policy set with what the node derives from it once, shared by its
// parts: each policy's index by name, and per policy whether the node keeps it durable, shares
// it between regions, charges it through leases, or nests others under it; and the digest
// peers compare before they take this node's keys or reports.
//
// Immutable after construction; any thread.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/policy.h"

namespace limiter {

class PolicyTable {
 public:
  // `durable_store`: the node has a database for durable policies; `regions`: it names a
  // region, so global policies are enforced as its share.
  PolicyTable(const PolicySet& policies, bool durable_store, bool regions);

  const PolicySet& set() const { return set_; }
  const Policy& at(int policy) const { return set_.policies()[static_cast<size_t>(policy)]; }
  size_t size() const { return set_.policies().size(); }
  // The policy's index, or -1.
  int Find(std::string_view name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? -1 : it->second;
  }

  bool durable(int policy) const { return durable_[static_cast<size_t>(policy)]; }
  bool global(int policy) const { return global_[static_cast<size_t>(policy)]; }
  bool leased(int policy) const { return leased_[static_cast<size_t>(policy)]; }
  bool parent(int policy) const { return parent_[static_cast<size_t>(policy)]; }
  // Some policy runs on a calendar (its time is the wall clock's window time).
  bool calendars() const { return calendars_; }
  // What a record's reader depends on: the policies' order, algorithms and rates.
  uint64_t digest() const { return digest_; }
  // The policy's part of its keys' ids (protocol::PolicyIdSeed): made once, after the
  // process's key-id seed is set.
  uint64_t id_seed(int policy) const { return id_seeds_[static_cast<size_t>(policy)]; }

 private:
  const PolicySet& set_;
  std::unordered_map<std::string_view, int> index_;
  std::vector<bool> durable_;  // durable, and the node has a database
  std::vector<bool> global_;   // scope: global, and the node names a region
  std::vector<bool> leased_;   // a LEASE can charge it (lease mode, or an ancestor of one)
  std::vector<bool> parent_;   // some policy nests under it
  std::vector<uint64_t> id_seeds_;
  bool calendars_ = false;
  uint64_t digest_ = 0;
};

}  // namespace limiter
