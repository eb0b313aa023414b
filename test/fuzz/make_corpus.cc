// Writes the frame fuzzer's seed corpus: one file per case, each a byte stream of frames as a
// client would send it on one connection. Run by hand when the protocol or the fuzz policies
// change, then commit the files; tests never regenerate them:
//   build/test/fuzz/limiter_make_corpus test/fuzz/corpus
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/rate.h"
#include "protocol/frame_codec.h"
#include "protocol/key_id.h"
#include "protocol/request_builder.h"
#include "protocol/rules.h"
#include "protocol/state_transfer.h"
#include "protocol/wire.h"
#include "test/fuzz/frame_fuzz_target.h"

namespace limiter::fuzz {
namespace {

using Bytes = std::vector<uint8_t>;
using Pairs = std::vector<std::pair<std::string_view, std::string_view>>;

Bytes Framed(std::span<const uint8_t> body) {
  Bytes out;
  AppendFrame(out, body);
  return out;
}

Bytes Cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// One frame holding what `add` puts in a RequestBuilder.
template <class AddOps>
Bytes Request(AddOps add) {
  RequestBuilder b;
  add(b);
  return Framed(b.Finish());
}

// Requests RequestBuilder never builds: unknown op types, missing fields, ops with fields
// their type does not take.
class RawRequest {
 public:
  struct Limit {
    const char* policy;  // nullptr: field absent
    const char* key;
  };
  struct Op {
    uint64_t id = 0;
    wire::OpType type = wire::OpType::Check;
    bool with_limits = true;
    std::vector<Limit> limits = {};
    const char* tenant = nullptr;
    int64_t cost = 1;
    const char* operation = nullptr;
    int64_t leased_at_ms = 0;
  };

  RawRequest& Add(const Op& op) {
    std::vector<flatbuffers::Offset<wire::Limit>> limits;
    for (const Limit& l : op.limits) {
      const auto policy = l.policy ? fbb_.CreateString(l.policy) : 0;
      const auto key = l.key ? fbb_.CreateString(l.key) : 0;
      limits.push_back(wire::CreateLimit(fbb_, policy, key));
    }
    const auto limit_vector = op.with_limits ? fbb_.CreateVector(limits) : 0;
    const auto tenant = op.tenant ? fbb_.CreateString(op.tenant) : 0;
    const auto operation = op.operation ? fbb_.CreateString(op.operation) : 0;
    ops_.push_back(wire::CreateOp(fbb_, op.id, op.type, limit_vector, tenant, op.cost, operation,
                                  /*dry_run=*/false, op.leased_at_ms));
    return *this;
  }
  Bytes Finish(bool with_ops = true) {
    const auto ops = with_ops ? fbb_.CreateVector(ops_) : 0;
    fbb_.Finish(wire::CreateRequest(fbb_, 0, ops));
    return Framed({fbb_.GetBufferPointer(), fbb_.GetSize()});
  }

 private:
  flatbuffers::FlatBufferBuilder fbb_;
  std::vector<flatbuffers::Offset<wire::Op>> ops_;
};

// "m7". (Not "m" + std::to_string(7): g++ 12 -O3 warns on it, a false -Wrestrict.)
std::string Numbered(std::string_view prefix, uint64_t n) {
  std::string s(prefix);
  s += std::to_string(n);
  return s;
}

Bytes Header(uint32_t declared) {
  const auto h = EncodeFrameHeader(declared);
  return Bytes(h.begin(), h.end());
}

// Bytes that look like nothing: a fixed linear congruential sequence.
Bytes Garbage(size_t n, uint32_t seed) {
  Bytes out(n);
  for (uint8_t& b : out) {
    seed = seed * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(seed >> 24);
  }
  return out;
}

std::vector<std::pair<std::string, Bytes>> Corpus() {
  constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
  constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
  const std::string key256(256, 'k');
  const std::string key300(300, 'k');
  const std::string op65(65, 'o');
  const std::string policy100(100, 'p');

  const Bytes check = Request([](RequestBuilder& b) { b.Check(1, "quota", "user-1"); });
  const Bytes lease = Request([](RequestBuilder& b) { b.Lease(2, "api_key", "key-1", "acme", 4); });
  const Bytes stats = Request([](RequestBuilder& b) { b.Stats(3); });

  std::vector<std::pair<std::string, Bytes>> c;
  // Valid requests, every op type and policy.
  c.emplace_back("check_fixed_window", check);
  c.emplace_back("check_nested_tenant",
                 Request([](RequestBuilder& b) { b.Check(2, "api_key", "key-1", "acme"); }));
  c.emplace_back("check_nested_three_deep",
                 Request([](RequestBuilder& b) { b.Check(3, "recent", "key-1", "acme"); }));
  c.emplace_back("check_operation_costs", Request([](RequestBuilder& b) {
                   b.Check(4, "api_key", "key-2", "acme", 1, "report");
                   b.Check(5, "smooth", "s-1", {}, 1, "bulk");
                   b.Check(6, "api_key", "key-3", "acme", 1, "export");
                   b.Check(7, "api_key", "key-4", "acme", 1, "unlisted");
                 }));
  c.emplace_back("check_dry_run", Request([](RequestBuilder& b) {
                   b.Check(8, "meter", "m-1", {}, 3, {}, /*dry_run=*/true);
                 }));
  c.emplace_back("check_many", Request([](RequestBuilder& b) {
                   const Pairs limits = {
                       {"quota", "u-1"}, {"meter", "u-1"}, {"smooth", "u-1"}, {"recent", "k-1"}};
                   b.CheckMany(9, limits, "acme", 2);
                 }));
  c.emplace_back("check_many_dry_run", Request([](RequestBuilder& b) {
                   const Pairs limits = {{"tenant", "acme"}, {"api_key", "k-1"}, {"login", "bob"}};
                   b.CheckMany(10, limits, "acme", 1, /*dry_run=*/true);
                 }));
  c.emplace_back("check_until_denied", Request([](RequestBuilder& b) {
                   for (uint64_t id = 0; id < 8; ++id) b.Check(id, "login", "alice");
                 }));
  c.emplace_back("check_many_new_keys", Request([](RequestBuilder& b) {
                   for (uint64_t id = 0; id < 64; ++id) b.Check(id, "meter", Numbered("m", id));
                 }));
  c.emplace_back("lease", lease);
  c.emplace_back("lease_sliding_log",
                 Request([](RequestBuilder& b) { b.Lease(11, "recent", "key-1", "acme", 8); }));
  c.emplace_back("lease_then_return", Cat({lease, Request([](RequestBuilder& b) {
                                             b.Return(12, "api_key", "key-1", "acme", 2, kStartMs,
                                                      1);
                                           })}));
  c.emplace_back("return_untracked_key", Request([](RequestBuilder& b) {
                   b.Return(13, "meter", "never-seen", {}, 1, 0, 1);
                 }));
  c.emplace_back("inspect_each_policy", Request([](RequestBuilder& b) {
                   for (const char* p : {"tenant", "quota", "login", "meter", "smooth", "recent"}) {
                     b.Check(14, p, "i-1", "acme");
                     b.Inspect(15, p, "i-1");
                   }
                 }));
  c.emplace_back("stats", stats);
  c.emplace_back("hello", Request([](RequestBuilder& b) { b.Hello("fuzz-seed"); }));
  c.emplace_back("hello_check", Request([](RequestBuilder& b) {
                   b.Hello("fuzz-seed");
                   b.Check(16, "quota", "user-2");
                 }));
  c.emplace_back("pipelined", Cat({check, lease, stats}));
  c.emplace_back("batch_every_op", Request([](RequestBuilder& b) {
                   b.Check(17, "tenant", "acme");
                   b.Lease(18, "meter", "m-1", {}, 5);
                   b.Return(19, "meter", "m-1", {}, 5, kStartMs, 2);
                   b.Inspect(20, "meter", "m-1");
                   b.Stats(21);
                 }));

  // Framing.
  c.emplace_back("truncated_frame", Bytes(check.begin(), check.end() - 3));
  c.emplace_back("truncated_header", Bytes(check.begin(), check.begin() + 2));
  c.emplace_back("pipelined_then_truncated", Cat({check, Bytes(lease.begin(), lease.end() - 1)}));
  c.emplace_back("bad_frame_zero_length", Cat({Header(0), check}));
  c.emplace_back("bad_frame_huge_length", Header(UINT32_MAX));
  c.emplace_back("bad_frame_above_max", Cat({Header(kDefaultMaxFrameBytes + 1), Garbage(16, 1)}));
  c.emplace_back("check_then_bad_frame", Cat({check, Header(0)}));

  // Bodies that are not Requests.
  c.emplace_back("garbage", Framed(Garbage(64, 7)));
  c.emplace_back("one_byte_body", Framed(Garbage(1, 3)));
  Bytes bad_root = check;
  bad_root[kFrameHeaderBytes + 3] = 0x7f;  // the root offset points far outside the body
  c.emplace_back("verifier_failing", bad_root);
  {
    flatbuffers::FlatBufferBuilder fbb;
    fbb.Finish(wire::CreateReply(fbb, 0, 0, fbb.CreateString("a reply sent as a request")));
    c.emplace_back("reply_as_request", Framed({fbb.GetBufferPointer(), fbb.GetSize()}));
  }
  c.emplace_back("no_ops_vector", RawRequest().Finish(/*with_ops=*/false));
  c.emplace_back("empty_ops_vector", RawRequest().Finish());

  // Ops the node must refuse, one case each.
  c.emplace_back(
      "unknown_op_type",
      RawRequest()
          .Add({.id = 22, .type = static_cast<wire::OpType>(7), .limits = {{"quota", "u"}}})
          .Add({.id = 23, .type = static_cast<wire::OpType>(255)})
          .Finish());
  c.emplace_back(
      "no_limits",
      RawRequest().Add({.id = 24, .with_limits = false}).Add({.id = 25, .limits = {}}).Finish());
  c.emplace_back("limit_fields_absent", RawRequest()
                                            .Add({.id = 26, .limits = {{nullptr, "u"}}})
                                            .Add({.id = 27, .limits = {{"quota", nullptr}}})
                                            .Finish());
  c.emplace_back("empty_key", Request([](RequestBuilder& b) { b.Check(28, "quota", ""); }));
  c.emplace_back("key_256_bytes",
                 Request([&](RequestBuilder& b) { b.Check(29, "quota", key256); }));
  c.emplace_back("key_300_bytes",
                 Request([&](RequestBuilder& b) { b.Check(30, "quota", key300); }));
  c.emplace_back("tenant_300_bytes",
                 Request([&](RequestBuilder& b) { b.Check(31, "api_key", "k", key300); }));
  c.emplace_back("operation_65_bytes",
                 Request([&](RequestBuilder& b) { b.Check(32, "quota", "u", {}, 1, op65); }));
  c.emplace_back("unknown_policy", Request([&](RequestBuilder& b) {
                   b.Check(33, "nope", "u");
                   b.Check(34, policy100, "u");
                 }));
  c.emplace_back("missing_tenant", Request([](RequestBuilder& b) { b.Check(35, "recent", "k"); }));
  c.emplace_back("repeated_limit", Request([](RequestBuilder& b) {
                   const Pairs limits = {{"quota", "u"}, {"meter", "u"}, {"quota", "u"}};
                   b.CheckMany(36, limits, {}, 1);
                 }));
  c.emplace_back("ancestor_named_too", Request([](RequestBuilder& b) {
                   const Pairs limits = {{"tenant", "acme"}, {"recent", "k"}, {"api_key", "k"}};
                   b.CheckMany(37, limits, "acme", 1);
                 }));
  c.emplace_back("limits_16_and_17", Request([](RequestBuilder& b) {
                   std::vector<std::string> keys;
                   for (uint64_t i = 0; i < 17; ++i) keys.push_back(Numbered("u", i));
                   Pairs limits;
                   for (const std::string& k : keys) limits.emplace_back("meter", k);
                   b.CheckMany(38, std::span(limits).first(16), {}, 1);
                   b.CheckMany(39, limits, {}, 1);
                 }));
  c.emplace_back("cost_0", Request([](RequestBuilder& b) { b.Check(40, "quota", "u", {}, 0); }));
  c.emplace_back("cost_negative", Request([](RequestBuilder& b) {
                   b.Check(41, "quota", "u", {}, -1);
                   b.Check(42, "quota", "u", {}, kI64Min);
                 }));
  c.emplace_back("cost_huge", Request([](RequestBuilder& b) {
                   b.Check(43, "quota", "u", {}, kMaxCost);
                   b.Check(44, "quota", "u", {}, kMaxCost + 1);
                   b.Check(45, "quota", "u", {}, kI64Max);
                   b.Check(46, "meter", "u", {}, kMaxCost, {}, /*dry_run=*/true);
                 }));
  c.emplace_back("lease_strict_policy",
                 Request([](RequestBuilder& b) { b.Lease(47, "login", "alice", {}, 1); }));
  c.emplace_back("lease_cost_huge", Request([](RequestBuilder& b) {
                   b.Lease(48, "meter", "u", {}, kMaxCost);
                   b.Lease(49, "meter", "u", {}, kI64Max);
                   b.Lease(50, "meter", "u", {}, 0);
                 }));
  c.emplace_back(
      "lease_two_limits",
      RawRequest()
          .Add({.id = 51, .type = wire::OpType::Lease, .limits = {{"meter", "a"}, {"meter", "b"}}})
          .Finish());
  c.emplace_back("lease_with_operation", RawRequest()
                                             .Add({.id = 52,
                                                   .type = wire::OpType::Lease,
                                                   .limits = {{"api_key", "k"}},
                                                   .tenant = "acme",
                                                   .operation = "report"})
                                             .Finish());
  c.emplace_back("return_leased_at_future", Request([](RequestBuilder& b) {
                   b.Return(53, "api_key", "key-1", "acme", 1, kI64Max, 1);
                 }));
  c.emplace_back("return_leased_at_negative", Request([](RequestBuilder& b) {
                   b.Return(54, "api_key", "key-1", "acme", 1, -1, 1);
                 }));
  c.emplace_back("return_huge", Request([](RequestBuilder& b) {
                   b.Check(55, "meter", "r", {}, 30);
                   b.Return(56, "meter", "r", {}, kMaxCost, 0, 1);
                   b.Return(57, "meter", "r", {}, kI64Max, 0, UINT64_MAX);
                 }));
  c.emplace_back("return_without_lease_id", Request([](RequestBuilder& b) {
                   b.Lease(58, "meter", "w", {}, 3);
                   b.Return(59, "meter", "w", {}, 3, kStartMs, 0);
                 }));
  c.emplace_back("return_strict_policy", Request([](RequestBuilder& b) {
                   b.Check(60, "login", "bob");
                   b.Return(61, "login", "bob", {}, 1000, 0, 1);
                 }));
  c.emplace_back("inspect_nested_with_and_without_tenant", Request([](RequestBuilder& b) {
                   b.Check(62, "api_key", "k-2", "acme");
                   b.Inspect(63, "api_key", "k-2", "acme");
                   b.Inspect(64, "api_key", "k-2");
                 }));
  {
    // At the key bound, reclaiming expired keys can take a key the op itself found: K
    // below, fresh again 20 ms after its CHECK. Fill the bound, wait, CHECK K and a new key.
    Bytes s = Request([](RequestBuilder& b) { b.Check(58, "tenant", "own-key"); });
    s = Cat({s, Request([](RequestBuilder& b) {
               for (uint64_t id = 0; id < 100; ++id) b.Check(id, "quota", Numbered("z", id));
             })});
    for (int i = 0; i < 8; ++i) s = Cat({s, RawRequest().Finish()});  // 3 ms each
    s = Cat({s, Request([](RequestBuilder& b) {
               const Pairs limits = {{"tenant", "own-key"}, {"quota", "after-reclaim"}};
               b.CheckMany(59, limits, {}, 1);
             })});
    c.emplace_back("reclaim_own_key_at_bound", s);
  }
  // Node-to-node ops, as a peer sends them (and a gateway must not): member-list changes, a
  // hand-off of real key ids (the fuzz nodes' seed) under the auth node's policy digest, a
  // region report. Each session replays them: refused for a gateway, checked for the peer.
  {
    const auto peer_frame = [](auto make) {
      flatbuffers::FlatBufferBuilder fbb;
      const auto [type, peer] = make(fbb);
      return Framed(FinishPeerRequest(fbb, type, peer));
    };
    const auto name = [](flatbuffers::FlatBufferBuilder& fbb, std::string_view n) {
      return fbb.CreateString(n.data(), n.size());
    };
    c.emplace_back("peer_members_leaving_joining",
                   Cat({peer_frame([&](flatbuffers::FlatBufferBuilder& fbb) {
                          return std::pair{wire::OpType::Members,
                                           wire::CreatePeer(fbb, 0, 5, 0, name(fbb, kFuzzPeer))};
                        }),
                        peer_frame([&](flatbuffers::FlatBufferBuilder& fbb) {
                          return std::pair{wire::OpType::Members,
                                           wire::CreatePeer(fbb, 0, 6, 0, 0, name(fbb, kFuzzPeer))};
                        }),
                        peer_frame([&](flatbuffers::FlatBufferBuilder& fbb) {
                          return std::pair{
                              wire::OpType::Members,
                              wire::CreatePeer(fbb, 0, 7, 0, 0, name(fbb, "10.0.0.3:7450"))};
                        })}));
    c.emplace_back(
        "peer_members_list", peer_frame([&](flatbuffers::FlatBufferBuilder& fbb) {
          const std::vector<flatbuffers::Offset<flatbuffers::String>> list = {
              name(fbb, kFuzzSelf), name(fbb, kFuzzPeer), name(fbb, "10.0.0.4:7450")};
          return std::pair{wire::OpType::Members, wire::CreatePeer(fbb, fbb.CreateVector(list), 9)};
        }));
    const Policy& quota = SharedFuzzAuthNode().policies.policies()[3];
    KeyLimiter spent(quota.algorithm);
    spent.Decide(quota.rate, kStartMs, 1000);  // the whole window's 1000 units
    std::vector<int64_t> spent_window;
    ExportState(spent, kStartMs, spent_window);
    c.emplace_back("peer_handoff", peer_frame([&](flatbuffers::FlatBufferBuilder& fbb) {
                     std::vector<flatbuffers::Offset<wire::KeyRecord>> keys;
                     for (int i = 0; i < 8; ++i) {
                       const KeyId id = protocol::LimitId(quota, Numbered("handed-", i), {});
                       keys.push_back(wire::CreateKeyRecord(fbb, id.lo, id.hi, 3,
                                                            fbb.CreateVector(spent_window), 0, 0));
                     }
                     const auto h = wire::CreateHandoff(
                         fbb, name(fbb, kFuzzPeer), 2,
                         SharedFuzzAuthNode().node.policy_table().digest(), KeyIdSeedDigest(),
                         kStartMs, fbb.CreateVector(keys), 0, true);
                     return std::pair{wire::OpType::Handoff, wire::CreatePeer(fbb, 0, 0, h)};
                   }));
    c.emplace_back(
        "peer_regions_report", peer_frame([&](flatbuffers::FlatBufferBuilder& fbb) {
          const std::vector<wire::KeyDemand> keys = {wire::KeyDemand(1, 2, 100, 10, 0)};
          const auto report = wire::CreateRegionReport(fbb, name(fbb, "eu"), name(fbb, kFuzzPeer),
                                                       0, 0, fbb.CreateVectorOfStructs(keys));
          return std::pair{wire::OpType::Regions, wire::CreatePeer(fbb, 0, 0, 0, 0, 0, report)};
        }));
  }
  return c;
}

}  // namespace
}  // namespace limiter::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  std::filesystem::create_directories(dir);
  for (const auto& [name, bytes] : limiter::fuzz::Corpus()) {
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
      return 1;
    }
  }
  return 0;
}
