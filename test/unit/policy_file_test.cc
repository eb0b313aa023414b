#include "common/policy_file.h"

#include <gtest/gtest.h>

#include <string>

#include "common/calendar.h"
#include "test/support/build_paths.h"

namespace limiter {
namespace {

Result<PolicySet> Parse(const std::string& text) { return ParsePolicies(text, "policies.yaml"); }

// The error for `text`, which must not load.
std::string ErrorOf(const std::string& text) {
  Result<PolicySet> r = Parse(text);
  EXPECT_FALSE(r.ok()) << "loaded although it should not:\n" << text;
  return r.ok() ? "" : r.error();
}

TEST(PolicyFile, LoadsTheIssueExample) {
  Result<PolicySet> r = Parse(R"(
policies:
  - name: tenant
    algorithm: gcra
    limit: 1000
    window: 1s            # ms, s, m, h, d
    class: contract       # security | contract | billing | capacity
  - name: api_key
    algorithm: token_bucket
    limit: 100
    window: 1s
    burst: 200
    class: contract
    parent: tenant        # charged together with its tenant
    costs: {report: 20}   # operation -> cost; default 1
)");
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_EQ(r->policies().size(), 2u);
  const Policy& tenant = r->policies()[0];
  EXPECT_EQ(tenant.name, "tenant");
  EXPECT_EQ(tenant.algorithm, Algorithm::kGcra);
  EXPECT_EQ(tenant.rate, Rate(1000, 1000, 1000));
  EXPECT_EQ(tenant.limit_class, LimitClass::kContract);
  EXPECT_EQ(tenant.mode, LeaseMode::kLease);
  EXPECT_EQ(tenant.parent_index, -1);
  const Policy* key = r->Find("api_key");
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(key->rate, Rate(100, 1000, 200));
  EXPECT_EQ(key->parent_index, 0);
  EXPECT_EQ(key->CostOf("report"), 20);
  EXPECT_EQ(key->CostOf("read"), 1);
  ASSERT_EQ(r->Chain(*key).size(), 2u);
  EXPECT_EQ(r->Chain(*key)[1], &tenant);
  EXPECT_EQ(key->line, 8);
}

TEST(PolicyFile, LoadsTheBundledExampleWithEveryClassAndSetting) {
  Result<PolicySet> r = LoadPolicyFile(testing::SourcePath("examples/policies.yaml"));
  ASSERT_TRUE(r.ok()) << r.error();
  const Policy* login = r->Find("login");
  ASSERT_NE(login, nullptr);
  EXPECT_EQ(login->limit_class, LimitClass::kSecurity);
  EXPECT_EQ(login->mode, LeaseMode::kStrict);
  ASSERT_TRUE(login->fallback.local_rate.has_value());
  EXPECT_EQ(*login->fallback.local_rate, Rate(2, 60'000, 2));
  const Policy* daily = r->Find("tenant_daily");
  ASSERT_NE(daily, nullptr);
  EXPECT_TRUE(daily->durable);
  EXPECT_NE(daily->calendar, nullptr);
  EXPECT_EQ(daily->rate.window_ms(), 86'400'000);
  const Policy* capacity = r->Find("search_capacity");
  ASSERT_NE(capacity, nullptr);
  EXPECT_EQ(capacity->fallback.max_concurrency, 64);
  EXPECT_EQ(capacity->fallback.max_queue, 128);
  EXPECT_EQ(capacity->fallback.queue_timeout_ms, 20);
  const Policy* global = r->Find("partner_global");
  ASSERT_NE(global, nullptr);
  EXPECT_EQ(global->scope, Scope::kGlobal);
  EXPECT_TRUE(global->fallback.allow_overshoot);
  const Policy* key = r->Find("api_key");
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(key->lease.size, 10);
  EXPECT_EQ(key->lease.ttl_ms, 1000);
  EXPECT_EQ(login->max_keys, 1'000'000);
  EXPECT_EQ(key->max_keys, 0);
}

TEST(PolicyFile, UnknownFieldNamesFileLineAndField) {
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: tenant\n"
                    "    limit: 10\n"
                    "    window: 1s\n"
                    "    class: contract\n"
                    "    brust: 20\n"),
            "policies.yaml:6:5: policy 'tenant', field 'brust': unknown field (known: name, "
            "algorithm, limit, window, align, timezone, burst, class, parent, costs, mode, lease, "
            "fallback, durable, scope, max_keys)");
}

TEST(PolicyFile, MaxKeysIsAPositiveCountOfKeyUnits) {
  Result<PolicySet> r = Parse(
      "policies:\n"
      "  - {name: a, limit: 1, window: 1s, class: contract, max_keys: 5000}\n"
      "  - {name: b, limit: 1, window: 1s, class: contract}\n");
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->policies()[0].max_keys, 5000);
  EXPECT_EQ(r->policies()[1].max_keys, 0);  // none: a share of the node's
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, limit: 1, window: 1s, class: contract, "
                    "max_keys: 0}\n"),
            "policies.yaml:2:64: policy 'a', field 'max_keys': must be a positive integer, "
            "got 0");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, limit: 1, window: 1s, class: contract, "
                    "max_keys: many}\n"),
            "policies.yaml:2:64: policy 'a', field 'max_keys': expected a positive integer, "
            "got 'many'");
}

TEST(PolicyFile, AGlobalPolicyNeedsAnAlgorithmWhoseShareCanMove) {
  const std::string error = ErrorOf(
      "policies:\n  - {name: a, algorithm: sliding_log, limit: 5, window: 1s, class: contract, "
      "scope: global}\n");
  EXPECT_NE(error.find("policy 'a', field 'scope': scope: global takes token_bucket or gcra, "
                       "not sliding_log"),
            std::string::npos)
      << error;
  EXPECT_NE(ErrorOf("policies:\n  - {name: a, algorithm: leaky_bucket, limit: 5, window: 1s, "
                    "class: contract, scope: global}\n")
                .find("not leaky_bucket"),
            std::string::npos);
}

TEST(PolicyFile, WrongTypeNamesTheValue) {
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: tenant\n"
                    "    limit: lots\n"
                    "    window: 1s\n"
                    "    class: contract\n"),
            "policies.yaml:3:12: policy 'tenant', field 'limit': expected a positive integer, "
            "got 'lots'");
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: tenant\n"
                    "    limit: [1, 2]\n"
                    "    window: 1s\n"
                    "    class: contract\n"),
            "policies.yaml:3:12: policy 'tenant', field 'limit': expected a single value, got a "
            "list or map");
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: tenant\n"
                    "    limit: 10\n"
                    "    window: 1.5s\n"
                    "    class: contract\n"),
            "policies.yaml:4:13: policy 'tenant', field 'window': expected a duration such as "
            "250ms, 1s, 5m, 1h or 1d, got '1.5s'");
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: tenant\n"
                    "    limit: 10\n"
                    "    window: 1s\n"
                    "    class: contract\n"
                    "    durable: yes please\n"),
            "policies.yaml:6:14: policy 'tenant', field 'durable': expected true or false, got "
            "'yes please'");
  EXPECT_EQ(ErrorOf("policies: {tenant: 1}\n"),
            "policies.yaml:1:11: field 'policies': expected a list of policies");
}

TEST(PolicyFile, NegativeOrZeroLimitIsRejected) {
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: tenant\n"
                    "    limit: -5\n"
                    "    window: 1s\n"
                    "    class: contract\n"),
            "policies.yaml:3:12: policy 'tenant', field 'limit': must be a positive integer, "
            "got -5");
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: tenant\n"
                    "    limit: 0\n"
                    "    window: 1s\n"
                    "    class: contract\n"),
            "policies.yaml:3:12: policy 'tenant', field 'limit': must be a positive integer, "
            "got 0");
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: tenant\n"
                    "    limit: 10\n"
                    "    window: 0s\n"
                    "    class: contract\n"),
            "policies.yaml:4:13: policy 'tenant', field 'window': must be at least 1ms, got '0s'");
}

TEST(PolicyFile, UnknownAlgorithmListsTheKnownOnes) {
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: tenant\n"
                    "    algorithm: magic\n"
                    "    limit: 10\n"
                    "    window: 1s\n"
                    "    class: contract\n"),
            "policies.yaml:3:16: policy 'tenant', field 'algorithm': unknown algorithm 'magic' "
            "(known: fixed_window, sliding_log, sliding_window, token_bucket, gcra, "
            "leaky_bucket)");
}

TEST(PolicyFile, ParentCycleIsNamed) {
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - {name: a, limit: 1, window: 1s, class: contract, parent: b}\n"
                    "  - {name: b, limit: 1, window: 1s, class: contract, parent: c}\n"
                    "  - {name: c, limit: 1, window: 1s, class: contract, parent: a}\n"),
            "policies.yaml:2:62: policy 'a', field 'parent': parent cycle: a -> b -> c -> a");
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - {name: a, limit: 1, window: 1s, class: contract, parent: a}\n"),
            "policies.yaml:2:62: policy 'a', field 'parent': parent cycle: a -> a");
}

TEST(PolicyFile, DuplicateNameSaysWhereTheFirstIs) {
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - {name: a, limit: 1, window: 1s, class: contract}\n"
                    "  - {name: a, limit: 2, window: 1s, class: contract}\n"),
            "policies.yaml:3:12: policy 'a', field 'name': duplicate policy name (first defined "
            "at line 2)");
}

TEST(PolicyFile, UnknownParent) {
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - {name: key, limit: 1, window: 1s, class: contract, parent: tenant}\n"),
            "policies.yaml:2:64: policy 'key', field 'parent': unknown parent 'tenant'");
}

TEST(PolicyFile, MoreBadFiles) {
  EXPECT_EQ(ErrorOf(""),
            "policies.yaml: field 'policies': missing: the file must hold a "
            "'policies' list");
  EXPECT_EQ(ErrorOf("policies: []\n"), "policies.yaml:1:11: field 'policies': the list is empty");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, window: 1s, class: contract}\n"),
            "policies.yaml:2:5: policy 'a', field 'limit': missing (it is required)");
  EXPECT_EQ(ErrorOf("policies:\n  - {limit: 1, window: 1s, class: contract}\n"),
            "policies.yaml:2:5: policies[0], field 'name': missing (it is required)");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a b, limit: 1, window: 1s, class: contract}\n"),
            "policies.yaml:2:12: policy 'a b', field 'name': must be 1 to 64 letters, digits, "
            "'_', '.' or '-', got 'a b'");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, limit: 1, window: 1s}\n"),
            "policies.yaml:2:5: policy 'a', field 'class': missing (it is required)");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, limit: 1, window: 1s, class: vip}\n"),
            "policies.yaml:2:44: policy 'a', field 'class': unknown class 'vip' (known: "
            "security, contract, billing, capacity)");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, limit: 1, limit: 2, window: 1s, class: contract}\n"),
            "policies.yaml:2:25: policy 'a', field 'limit': given twice (first at line 2)");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, algorithm: fixed_window, limit: 5, burst: 9, "
                    "window: 1s, class: contract}\n"),
            "policies.yaml:2:50: policy 'a', field 'burst': only token_bucket, gcra and "
            "leaky_bucket have a burst");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, limit: 1, window: 1s, class: capacity}\n"),
            "policies.yaml:2:5: policy 'a', field 'fallback': missing: capacity limits need "
            "fallback.max_concurrency (their local load shedder)");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, limit: 1, window: 1s, class: billing, fallback: "
                    "{overshoot: true}}\n"),
            "policies.yaml:2:53: policy 'a', field 'fallback': billing limits fail open and "
            "reconcile; they take no fallback settings");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, limit: 1, window: 1s, class: security, fallback: "
                    "{overshoot: true}}\n"),
            "policies.yaml:2:65: policy 'a', field 'fallback.overshoot': unknown field (known: "
            "limit, window, burst)");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, limit: 5, window: 1s, class: contract, lease: "
                    "{size: 6}}\n"),
            "policies.yaml:2:68: policy 'a', field 'lease.size': must not exceed the burst (5), "
            "got 6");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, limit: 5, window: 1s, class: contract, costs: "
                    "{report: 0}}\n"),
            "policies.yaml:2:70: policy 'a', field 'costs.report': must be a positive integer, "
            "got 0");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, limit: 1099511627776, window: 1d, class: "
                    "contract}\n"),
            "policies.yaml:2:22: policy 'a', field 'limit': limit (or burst) times window in ms "
            "must stay below 2^60, got 1099511627776 x 86400000");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, limit: 99999999999999999999, window: 1s, class: "
                    "contract}\n"),
            "policies.yaml:2:22: policy 'a', field 'limit': '99999999999999999999' is too large");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a\n"),
            "policies.yaml:3:1: not valid YAML: end of map flow not found");
  EXPECT_EQ(ErrorOf("rules: []\n"),
            "policies.yaml:1:1: field 'rules': unknown field (known: policies)");
}

TEST(PolicyFile, CalendarWindowsTakeTheirNominalLength) {
  Result<PolicySet> r = Parse(
      "policies:\n"
      "  - {name: daily, algorithm: fixed_window, limit: 1000, window: 1d, align: calendar, "
      "class: billing}\n"
      "  - {name: weekly, algorithm: fixed_window, limit: 5000, window: 1w, align: calendar, "
      "timezone: '+05:30', class: billing}\n"
      "  - {name: monthly, algorithm: fixed_window, limit: 20000, window: 1mo, align: calendar, "
      "timezone: Europe/Berlin, class: billing}\n"
      "  - {name: fortnight, algorithm: fixed_window, limit: 10, window: 2w, class: billing}\n");
  ASSERT_TRUE(r.ok()) << r.error();
  const Policy& daily = r->policies()[0];
  ASSERT_TRUE(daily.calendar);
  EXPECT_EQ(daily.calendar->unit(), CalendarUnit::kDay);
  EXPECT_EQ(daily.calendar->timezone(), "UTC");
  EXPECT_EQ(daily.rate, Rate(1000, 86'400'000, 1000));
  const Policy& weekly = r->policies()[1];
  ASSERT_TRUE(weekly.calendar);
  EXPECT_EQ(weekly.calendar->unit(), CalendarUnit::kWeek);
  EXPECT_EQ(weekly.calendar->timezone(), "+05:30");
  EXPECT_EQ(weekly.rate.window_ms(), 7 * 86'400'000);
  const Policy& monthly = r->policies()[2];
  ASSERT_TRUE(monthly.calendar);
  EXPECT_EQ(monthly.calendar->unit(), CalendarUnit::kMonth);
  EXPECT_EQ(monthly.calendar->timezone(), "Europe/Berlin");
  EXPECT_EQ(monthly.rate.window_ms(), int64_t{31} * 86'400'000);
  const Policy& fortnight = r->policies()[3];  // weeks are a plain duration without align
  EXPECT_FALSE(fortnight.calendar);
  EXPECT_EQ(fortnight.rate.window_ms(), 14 * 86'400'000);
}

TEST(PolicyFile, CalendarAlignmentErrorsNameTheField) {
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, algorithm: token_bucket, limit: 5, window: 1d, "
                    "align: calendar, class: contract}\n"),
            "policies.yaml:2:69: policy 'a', field 'align': align: calendar takes algorithm: "
            "fixed_window, not token_bucket");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, limit: 5, window: 1d, align: calendar, "
                    "class: contract}\n"),
            "policies.yaml:2:44: policy 'a', field 'align': align: calendar takes algorithm: "
            "fixed_window, not gcra");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, algorithm: fixed_window, limit: 5, window: 1mo, "
                    "class: contract}\n"),
            "policies.yaml:2:58: policy 'a', field 'window': a window in months needs align: "
            "calendar, got '1mo'");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, algorithm: fixed_window, limit: 5, window: 1d, "
                    "timezone: UTC, class: contract}\n"),
            "policies.yaml:2:62: policy 'a', field 'timezone': only applies to align: calendar");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, algorithm: fixed_window, limit: 5, window: 1d, "
                    "align: midnight, class: contract}\n"),
            "policies.yaml:2:69: policy 'a', field 'align': expected calendar, got 'midnight'");
  EXPECT_EQ(ErrorOf("policies:\n  - {name: a, algorithm: fixed_window, limit: 5, window: 2d, "
                    "align: calendar, class: contract}\n"),
            "policies.yaml:2:58: policy 'a', field 'window': align: calendar takes a window of "
            "1d, 1w or 1mo, got '2d'");
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: a\n"
                    "    algorithm: fixed_window\n"
                    "    limit: 5\n"
                    "    window: 1d\n"
                    "    align: calendar\n"
                    "    timezone: Mars/Olympus\n"
                    "    class: contract\n"),
            "policies.yaml:7:15: policy 'a', field 'timezone': unknown timezone 'Mars/Olympus' "
            "(not in the system tzdata, /usr/share/zoneinfo)");
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: a\n"
                    "    algorithm: fixed_window\n"
                    "    limit: 5\n"
                    "    window: 1w\n"
                    "    align: calendar\n"
                    "    timezone: '+25:00'\n"
                    "    class: contract\n"),
            "policies.yaml:7:15: policy 'a', field 'timezone': timezone '+25:00' is not a valid "
            "UTC offset: expected +HH:MM, -HH:MM or +HH, within 14:00 of UTC");
  EXPECT_NE(ErrorOf("policies:\n  - {name: a, algorithm: fixed_window, limit: 5, window: 1d, "
                    "align: calendar, timezone: '5:30', class: contract}\n")
                .find("field 'timezone': timezone '5:30' is not a time zone"),
            std::string::npos);
}

TEST(PolicyFile, MissingFileIsAClearError) {
  Result<PolicySet> r = LoadPolicyFile("/nonexistent/policies.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error(), "/nonexistent/policies.yaml: cannot open the policy file");
}

}  // namespace
}  // namespace limiter
