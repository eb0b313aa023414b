#include "protocol/ring.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace limiter {
namespace {

std::vector<std::string> Nodes(int n) {
  std::vector<std::string> nodes;
  for (int i = 0; i < n; ++i) {
    nodes.push_back("10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1) +
                    ":7450");
  }
  return nodes;
}

std::vector<std::string> Tenants(int n) {
  std::vector<std::string> tenants;
  for (int i = 0; i < n; ++i) tenants.push_back("tenant-" + std::to_string(i));
  return tenants;
}

TEST(Ring, TheBusiestNodeHoldsAtMostOnePointOneTimesTheMean) {
  const std::vector<std::string> tenants = Tenants(200'000);
  for (int n : {3, 4, 5, 8, 10, 16, 24, 32, 40, 50, 64}) {
    const Ring ring(Nodes(n));
    std::vector<int> held(static_cast<size_t>(n), 0);
    for (const std::string& t : tenants) ++held[ring.OwnerIndex(t)];
    const double mean = 200'000.0 / n;
    const int busiest = *std::max_element(held.begin(), held.end());
    EXPECT_LE(busiest, 1.1 * mean) << n << " nodes: busiest " << busiest << ", mean " << mean;
  }
}

TEST(Ring, AddingANodeMovesAboutItsShare) {
  const std::vector<std::string> tenants = Tenants(200'000);
  for (int n : {3, 4, 8, 16, 32, 63}) {
    std::vector<std::string> members = Nodes(n);
    const Ring before(members);
    members.push_back("10.9.9.9:7450");
    const Ring after(members);
    int moved = 0;
    for (const std::string& t : tenants) moved += before.Owner(t) != after.Owner(t);
    // Ideal: the new node's 1/(n+1) of the keys, and nothing else.
    const double ideal = 200'000.0 / (n + 1);
    EXPECT_LE(moved, 1.1 * ideal) << n << " -> " << n + 1 << " nodes moved " << moved;
    // Every key that moves, moves to the new node.
    int to_new = 0;
    for (const std::string& t : tenants) to_new += after.Owner(t) == "10.9.9.9:7450";
    EXPECT_EQ(to_new, moved);
    RecordProperty("moved_" + std::to_string(n), moved);
  }
}

TEST(Ring, EveryProcessDerivesTheSameRingFromTheSameSet) {
  const Ring a({"b:1", "a:1", "c:1"});
  const Ring b({"c:1", "a:1", "b:1", "a:1"});
  EXPECT_EQ(a.version(), b.version());
  EXPECT_EQ(a.members(), b.members());
  for (const std::string& t : Tenants(1000)) EXPECT_EQ(a.Owner(t), b.Owner(t));
  EXPECT_NE(a.version(), Ring({"a:1", "b:1"}).version());
  EXPECT_EQ(Ring().version(), 0u);
  EXPECT_TRUE(Ring().empty());
}

TEST(Ring, SharesAddUpAndAreEven) {
  const Ring ring(Nodes(7));
  const std::vector<double> shares = ring.Shares();
  double total = 0;
  for (double s : shares) {
    total += s;
    EXPECT_NEAR(s, 1.0 / 7, 0.01);
  }
  EXPECT_NEAR(total, 1.0, 1e-9);
}

}  // namespace
}  // namespace limiter
