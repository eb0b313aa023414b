#include "common/member_list.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace limiter {
namespace {

TEST(Membership, ParsesAStaticList) {
  Result<std::vector<std::string>> m = ParseMemberList("10.0.0.1:7450, 10.0.0.2:7450,[::1]:9");
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_EQ(*m, (std::vector<std::string>{"10.0.0.1:7450", "10.0.0.2:7450", "[::1]:9"}));
  EXPECT_EQ(ParseMemberList("a:1,b").error(), "member 'b' is not HOST:PORT with a port 1-65535");
  EXPECT_EQ(ParseMemberList("a:0").error(), "member 'a:0' is not HOST:PORT with a port 1-65535");
  EXPECT_EQ(ParseMemberList("a:70000").error(),
            "member 'a:70000' is not HOST:PORT with a port 1-65535");
  EXPECT_EQ(ParseMemberList("").error(), "member '' is not HOST:PORT with a port 1-65535");
}

TEST(Membership, ResolvesOneNameToEveryAddress) {
  Result<std::vector<std::string>> m = ResolveMembers("localhost:7450");
  ASSERT_TRUE(m.ok()) << m.error();
  EXPECT_NE(std::find(m->begin(), m->end(), "127.0.0.1:7450"), m->end());
  EXPECT_TRUE(std::is_sorted(m->begin(), m->end()));
  EXPECT_EQ(ResolveMembers("localhost").error(),
            "'localhost' is not NAME:PORT with a port 1-65535");
}

}  // namespace
}  // namespace limiter
