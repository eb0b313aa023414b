#include "common/trace.h"

#include <gtest/gtest.h>

namespace limiter {
namespace {

std::string ErrorOf(const std::string& text) {
  Result<std::vector<TraceRow>> r = ParseTrace(text, "t.csv");
  EXPECT_FALSE(r.ok()) << "parsed although it should not:\n" << text;
  return r.ok() ? "" : r.error();
}

TEST(Trace, CostAndLabelMayBeMissingOrEmpty) {
  Result<std::vector<TraceRow>> r = ParseTrace(
      "t_ms,key,cost,label\r\n"
      "0,a\r\n"
      "5,b,,steady\r\n"
      "\r\n"
      "5,\"c,d\",3\n"
      "9,\"say \"\"hi\"\"\",2,\"\"\n",
      "t.csv");
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->size(), 4u);
  const auto& rows = *r;
  EXPECT_EQ(rows[0].key, "a");
  EXPECT_FALSE(rows[0].cost.has_value());
  EXPECT_EQ(rows[0].label, "");
  EXPECT_EQ(rows[1].label, "steady");
  EXPECT_FALSE(rows[1].cost.has_value());
  EXPECT_EQ(rows[2].key, "c,d");
  EXPECT_EQ(rows[2].cost, 3);
  EXPECT_EQ(rows[2].line, 5);
  EXPECT_EQ(rows[3].key, "say \"hi\"");
  EXPECT_EQ(rows[3].t_ms, 9);
}

TEST(Trace, AShorterHeaderIsAllowed) {
  Result<std::vector<TraceRow>> r = ParseTrace("t_ms,key\n1,a\n2,b\n", "t.csv");
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->size(), 2u);
  EXPECT_EQ(ErrorOf("t_ms,key\n1,a,4\n"),
            "t.csv:2: expected at most 2 fields (as in the header), got 3");
}

TEST(Trace, BadRowsNameTheLineAndTheReason) {
  const std::string h = "t_ms,key,cost,label\n";
  EXPECT_EQ(ErrorOf(""), "t.csv: empty; expected the header t_ms,key,cost,label and then rows");
  EXPECT_EQ(ErrorOf("time,key\n1,a\n"),
            "t.csv:1: the header must be t_ms,key,cost,label (cost and label may be left out), "
            "got 'time,key'");
  EXPECT_EQ(ErrorOf(h + "0,a\nx,a\n"),
            "t.csv:3: t_ms must be a non-negative integer (milliseconds), got 'x'");
  EXPECT_EQ(ErrorOf(h + "-1,a\n"),
            "t.csv:2: t_ms must be a non-negative integer (milliseconds), got '-1'");
  EXPECT_EQ(ErrorOf(h + "10,a\n9,a\n"),
            "t.csv:3: t_ms 9 is earlier than the previous row's 10 (t_ms must be non-decreasing)");
  EXPECT_EQ(ErrorOf(h + "1,,1\n"), "t.csv:2: key is empty");
  EXPECT_EQ(ErrorOf(h + "1,a,0\n"), "t.csv:2: cost must be a positive integer, got '0'");
  EXPECT_EQ(ErrorOf(h + "1,a,-2\n"), "t.csv:2: cost must be a positive integer, got '-2'");
  EXPECT_EQ(ErrorOf(h + "1,a,two\n"), "t.csv:2: cost must be a positive integer, got 'two'");
  EXPECT_EQ(ErrorOf(h + "1,a,5000000000\n"),
            "t.csv:2: cost 5000000000 is above the maximum of 1000000000");
  EXPECT_EQ(ErrorOf(h + "1,a,1,x,extra\n"),
            "t.csv:2: expected at most 4 fields (as in the header), got 5");
  EXPECT_EQ(ErrorOf(h + "1\n"), "t.csv:2: expected at least t_ms and key, got one field");
  EXPECT_EQ(ErrorOf(h + "1,\"a\n"), "t.csv:2: unterminated quoted field");
  EXPECT_EQ(ErrorOf(h + "1,\"a\"b\n"), "t.csv:2: text after a closing quote");
  EXPECT_EQ(ErrorOf(h + "1,a\"b\n"), "t.csv:2: a quote inside an unquoted field");
  EXPECT_EQ(ErrorOf(h + "1," + std::string(257, 'k') + "\n"),
            "t.csv:2: key is longer than 256 bytes");
}

TEST(Trace, MissingFile) {
  Result<std::vector<TraceRow>> r = LoadTraceFile("/nonexistent/trace.csv");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "/nonexistent/trace.csv: cannot open the trace file");
}

}  // namespace
}  // namespace limiter
