// The PolicyTable alone, with no Node: each policy's index by name, the flags the node derives
// once (durable, global, leased, parent, calendars), and the digest peers compare before they
// take each other's keys: the same file gives the same digest, and any change a state's reader
// depends on (order, name, algorithm, limit, window, burst, nesting, scope) gives another.
#include "server/policy_table.h"

#include <gtest/gtest.h>

#include <string>

#include "test/support/policies.h"

namespace limiter {
namespace {

const char* kPolicies = R"(
policies:
  - {name: tenant, algorithm: gcra, limit: 1000, window: 1s, class: contract, mode: strict}
  - {name: key, algorithm: gcra, limit: 100, window: 1s, class: contract, parent: tenant}
  - {name: login, algorithm: token_bucket, limit: 10, window: 1m, class: security, mode: strict}
  - {name: quota, algorithm: fixed_window, limit: 1000, window: 1h, class: billing, durable: true}
  - {name: partner, algorithm: gcra, limit: 120, window: 1s, burst: 12, class: contract,
     mode: strict, scope: global}
  - {name: daily, algorithm: fixed_window, limit: 1000, window: 1d, align: calendar,
     class: billing}
)";

// The digest of a file made from kPolicies by replacing `from` with `to`.
uint64_t DigestWith(const std::string& from, const std::string& to) {
  std::string yaml = kPolicies;
  const size_t at = yaml.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) yaml.replace(at, from.size(), to);
  const PolicySet set = testing::Policies(yaml, "table.yaml");
  return PolicyTable(set, false, false).digest();
}

TEST(PolicyTable, FindsEachPolicyByNameAndNoOtherName) {
  const PolicySet set = testing::Policies(kPolicies, "table.yaml");
  const PolicyTable table(set, false, false);
  ASSERT_EQ(table.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(table.Find(table.at(i).name), i) << table.at(i).name;
    EXPECT_EQ(&table.at(i), &set.policies()[static_cast<size_t>(i)]);
  }
  EXPECT_EQ(table.Find("missing"), -1);
  EXPECT_EQ(table.Find(""), -1);
  EXPECT_EQ(table.Find("Login"), -1);   // names are case-sensitive
  EXPECT_EQ(table.Find("login "), -1);  // and exact
  EXPECT_EQ(&table.set(), &set);
}

TEST(PolicyTable, DurableAndGlobalOnlyWhenTheNodeHasADatabaseAndARegion) {
  const PolicySet set = testing::Policies(kPolicies, "table.yaml");
  const int quota = 3, partner = 4;
  const PolicyTable bare(set, false, false);
  EXPECT_FALSE(bare.durable(quota));   // no database: kept in memory like any key
  EXPECT_FALSE(bare.global(partner));  // no region: the whole limit is this cluster's
  const PolicyTable full(set, true, true);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(full.durable(i), i == quota) << full.at(i).name;
    EXPECT_EQ(full.global(i), i == partner) << full.at(i).name;
  }
}

TEST(PolicyTable, LeasedCoversALeasedPolicyAndItsAncestorsOnly) {
  const PolicySet set = testing::Policies(kPolicies, "table.yaml");
  const PolicyTable table(set, false, false);
  const int tenant = 0, key = 1, login = 2, quota = 3, partner = 4, daily = 5;
  EXPECT_TRUE(table.leased(key));
  EXPECT_TRUE(table.leased(tenant));  // strict itself, but a lease of `key` charges it
  EXPECT_FALSE(table.leased(login));
  EXPECT_TRUE(table.leased(quota));
  EXPECT_FALSE(table.leased(partner));
  EXPECT_TRUE(table.leased(daily));
}

TEST(PolicyTable, ParentMarksThePoliciesOthersNestUnder) {
  const PolicySet set = testing::Policies(kPolicies, "table.yaml");
  const PolicyTable table(set, false, false);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(table.parent(i), i == 0) << table.at(i).name;
  EXPECT_TRUE(table.calendars());
  const PolicySet plain = testing::Policies(R"(
policies:
  - {name: api, algorithm: gcra, limit: 100, window: 1s, class: contract}
)",
                                            "table.yaml");
  EXPECT_FALSE(PolicyTable(plain, true, true).calendars());
  EXPECT_FALSE(PolicyTable(plain, true, true).parent(0));
}

TEST(PolicyTable, TheSameFileGivesTheSameDigestWhateverTheNodeHas) {
  const PolicySet a = testing::Policies(kPolicies, "table.yaml");
  const PolicySet b = testing::Policies(kPolicies, "table.yaml");
  const uint64_t digest = PolicyTable(a, false, false).digest();
  EXPECT_NE(digest, 0u);
  EXPECT_EQ(PolicyTable(b, false, false).digest(), digest);
  // A node with a database or a region reads the same records.
  EXPECT_EQ(PolicyTable(b, true, true).digest(), digest);
}

TEST(PolicyTable, AnyChangeARecordsReaderDependsOnChangesTheDigest) {
  const uint64_t digest = DigestWith("", "");
  const std::pair<const char*, const char*> changes[] = {
      {"name: login, algorithm: token_bucket, limit: 10,",
       "name: login, algorithm: token_bucket, limit: 11,"},                        // limit
      {"limit: 10, window: 1m", "limit: 10, window: 2m"},                          // window
      {"limit: 120, window: 1s, burst: 12", "limit: 120, window: 1s, burst: 13"},  // burst
      {"name: login, algorithm: token_bucket", "name: login, algorithm: gcra"},    // algorithm
      {"name: quota, algorithm: fixed_window", "name: quota, algorithm: sliding_window"},
      {"name: login,", "name: signin,"},                         // name
      {"class: contract, parent: tenant}", "class: contract}"},  // nesting
      {"mode: strict, scope: global}", "mode: strict}"},         // scope
  };
  for (const auto& [from, to] : changes) {
    EXPECT_NE(DigestWith(from, to), digest) << from << " -> " << to;
  }
}

TEST(PolicyTable, TheOrderOfThePoliciesIsPartOfTheDigest) {
  // Records name a policy by its index: the same policies in another order read differently.
  const PolicySet ab = testing::Policies(R"(
policies:
  - {name: a, algorithm: gcra, limit: 100, window: 1s, class: contract}
  - {name: b, algorithm: gcra, limit: 100, window: 1s, class: contract}
)",
                                         "table.yaml");
  const PolicySet ba = testing::Policies(R"(
policies:
  - {name: b, algorithm: gcra, limit: 100, window: 1s, class: contract}
  - {name: a, algorithm: gcra, limit: 100, window: 1s, class: contract}
)",
                                         "table.yaml");
  EXPECT_NE(PolicyTable(ab, false, false).digest(), PolicyTable(ba, false, false).digest());
}

TEST(PolicyTable, WhatNoRecordDependsOnLeavesTheDigest) {
  // A limit's class and its gateways' lease settings decide nothing about a key's state.
  const uint64_t digest = DigestWith("", "");
  EXPECT_EQ(DigestWith("limit: 1000, window: 1h, class: billing, durable: true",
                       "limit: 1000, window: 1h, class: contract, durable: true"),
            digest);
  EXPECT_EQ(DigestWith("class: contract, parent: tenant}",
                       "class: contract, parent: tenant, lease: {size: 5, ttl: 3s}}"),
            digest);
}

}  // namespace
}  // namespace limiter
