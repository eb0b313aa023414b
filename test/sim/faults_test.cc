// The --faults grammar: every kind of clause, and every kind of mistake with its message.
#include "sim/faults.h"

#include <gtest/gtest.h>

namespace limiter::sim {
namespace {

TEST(SimFaults, ParsesEveryKind) {
  Result<std::vector<Fault>> f = ParseFaults(
      "kill node 1 at 4s, restart at 7s; partition gateways 1-20 from node 2 at 500ms, heal at "
      "1.5s; slow node 3 by 4 at 2s, until 3s; add node at 6s; hot tenant 7 at 2s, until 8s, "
      "rate 1000/s; hot tenant at 1s");
  ASSERT_TRUE(f.ok()) << f.error();
  ASSERT_EQ(f->size(), 6u);
  const std::vector<Fault>& v = *f;
  EXPECT_EQ(v[0].kind, Fault::Kind::kKill);
  EXPECT_EQ(v[0].node, 0);
  EXPECT_EQ(v[0].at_us, 4'000'000);
  EXPECT_EQ(v[0].until_us, 7'000'000);
  EXPECT_EQ(v[1].kind, Fault::Kind::kPartition);
  EXPECT_EQ(v[1].gateway_from, 0);
  EXPECT_EQ(v[1].gateway_to, 19);
  EXPECT_EQ(v[1].node, 1);
  EXPECT_EQ(v[1].at_us, 500'000);
  EXPECT_EQ(v[1].until_us, 1'500'000);
  EXPECT_EQ(v[2].kind, Fault::Kind::kSlow);
  EXPECT_EQ(v[2].factor, 4);
  EXPECT_EQ(v[2].until_us, 3'000'000);
  EXPECT_EQ(v[3].kind, Fault::Kind::kAddNode);
  EXPECT_EQ(v[3].at_us, 6'000'000);
  EXPECT_EQ(v[3].until_us, -1);
  EXPECT_EQ(v[4].kind, Fault::Kind::kHotTenant);
  EXPECT_EQ(v[4].tenant, 7);
  EXPECT_EQ(v[4].rate, 1000);
  EXPECT_EQ(v[4].until_us, 8'000'000);
  EXPECT_EQ(v[5].tenant, 1000);  // the defaults
  EXPECT_EQ(v[5].rate, 30'000);
  EXPECT_TRUE(ParseFaults("").ok());
  EXPECT_TRUE(ParseFaults("  ").value().empty());
}

TEST(SimFaults, EveryMistakeNamesItsClause) {
  const std::pair<const char*, const char*> bad[] = {
      {"kill node 1", "expected 'at TIME'"},
      {"kill node 0 at 1s", "not a node number"},
      {"kill node 1 at 4", "not a time"},
      {"kill node 1 at 4s, restart at 3s", "must come after"},
      {"kill node 1 at 4s, heal at 5s", "one of 'restart at T'"},
      {"partition gateways 5-2 from node 1 at 1s", "not a gateway range"},
      {"partition gateways 1-2 node 1 at 1s", "expected 'partition gateways A-B"},
      {"slow node 1 by 0.5 at 1s", "from 1 to 1000"},
      {"add node at 1s, until 2s", "allowed here"},
      {"hot tenant x at 1s", "not a tenant number"},
      {"hot tenant at 1s, rate -3", "not a rate"},
      {"reboot everything at 1s", "unknown fault"},
      {"kill node", "expected 'kill node N at T'"},
      {"partition gateways 1- from node 1 at 1s", "not a gateway range"},
      {"kill node 1 at 1s, restart at 2s, restart at 3s", "comes twice"},
      {"kill node 1 at 1s,", "empty part"},
  };
  for (const auto& [spec, message] : bad) {
    Result<std::vector<Fault>> f = ParseFaults(spec);
    ASSERT_FALSE(f.ok()) << spec;
    EXPECT_NE(f.error().find(message), std::string::npos) << spec << ": " << f.error();
    EXPECT_NE(f.error().find(spec), std::string::npos) << f.error();
  }
}

TEST(SimFaults, NumbersAreCheckedAgainstTheFleet) {
  Result<std::vector<Fault>> f = ParseFaults("kill node 4 at 1s");
  ASSERT_TRUE(f.ok());
  EXPECT_NE(CheckFaults(*f, 3, 10, 100).error().find("node 4 does not exist"), std::string::npos);
  // A node added before the fault is there.
  f = ParseFaults("add node at 1s; kill node 4 at 2s");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(CheckFaults(*f, 3, 10, 100).ok());
  f = ParseFaults("partition gateways 1-11 from node 1 at 1s");
  EXPECT_NE(CheckFaults(*f, 3, 10, 100).error().find("10 gateways"), std::string::npos);
  f = ParseFaults("hot tenant 100 at 1s");
  EXPECT_NE(CheckFaults(*f, 3, 10, 100).error().find("100 tenants"), std::string::npos);
}

}  // namespace
}  // namespace limiter::sim
