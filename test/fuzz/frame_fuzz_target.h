// The frame fuzzer's entry point and the node it drives. The libFuzzer binary
// (limiter_frame_fuzzer) and the corpus test, which runs every seed in an ordinary build,
// link the same code.
//
// Not thread-safe: libFuzzer and the tests feed one input at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/policy.h"
#include "server/node.h"

namespace limiter::fuzz {

// Nesting three deep (recent -> api_key -> tenant), every algorithm, a strict security
// policy, lease settings and operation costs up to the maximum.
inline constexpr std::string_view kPolicies = R"(policies:
  - name: tenant
    algorithm: gcra
    limit: 50
    window: 1s
    burst: 100
    class: contract
  - name: api_key
    algorithm: token_bucket
    limit: 10
    window: 1s
    burst: 20
    class: contract
    parent: tenant
    costs: {report: 5, export: 1000000000}
    lease: {size: 4, ttl: 500ms}
  - name: recent
    algorithm: sliding_log
    limit: 8
    window: 2s
    class: contract
    parent: api_key
  - name: quota
    algorithm: fixed_window
    limit: 1000
    window: 1m
    class: billing
  - name: login
    algorithm: gcra
    limit: 5
    window: 1m
    class: security
  - name: meter
    algorithm: leaky_bucket
    limit: 30
    window: 10s
    class: contract
  - name: smooth
    algorithm: sliding_window
    limit: 12
    window: 3s
    class: contract
    costs: {bulk: 12}
)";

inline constexpr int64_t kStartMs = 1'000'000'000;
inline constexpr int64_t kStepMs = 3;  // the clock moves this much before each frame

// One node for the whole process, as a server keeps one across connections: the store
// carries state from input to input. Windows of minutes at most, few keys and rare sweeps,
// so that keys expire and the fuzzer reaches the key bound and reclaiming at it.
struct FuzzNode {
  FuzzNode();
  ManualClock clock{kStartMs};
  PolicySet policies;
  Node node;
  Node::Worker& worker;
  uint64_t frames = 0;
  std::vector<uint64_t> request_copy;  // aligned copies for VerifiedRequest/VerifiedReply
  std::vector<uint64_t> reply_copy;
};
FuzzNode& SharedFuzzNode();

// A second node that requires the gateway secret `kFuzzSecret`, holds the peer secret
// `kFuzzPeerSecret`, and is a member of a two-node cluster (kFuzzSelf, kFuzzPeer), so that
// node-to-node ops (member-list changes, hand-offs) reach their real checks.
inline constexpr std::string_view kFuzzSecret = "fuzz-cluster-secret-0123456789";
inline constexpr std::string_view kFuzzPeerSecret = "fuzz-peer-secret-0123456789ab";
inline constexpr std::string_view kFuzzSelf = "10.0.0.1:7450";
inline constexpr std::string_view kFuzzPeer = "10.0.0.2:7450";
// The fuzz nodes' key-id seed, fixed so that seeds (make_corpus) can name real key ids and the
// hand-off's digest of it matches.
inline constexpr uint64_t kFuzzKeySeed = 0x66757a7a2d6b6579;
struct FuzzAuthNode {
  FuzzAuthNode();
  ManualClock clock{kStartMs};
  PolicySet policies;
  Node node;
  Node::Worker& worker;
  std::vector<uint64_t> request_copy;
  std::vector<uint64_t> reply_copy;
};
FuzzAuthNode& SharedFuzzAuthNode();

// Feeds `input` to the shared node as one connection's byte stream, as the server does:
// each whole frame is handled, a framing error gets the error frame and ends the stream, a
// partial frame at the end is left unread. Appends the reply frames to `replies`. Aborts
// with a message when a reply does not verify or does not answer its request op for op:
// the node sending what clients must reject is a bug.
void FeedStream(std::span<const uint8_t> input, std::vector<uint8_t>& replies);

// The same stream on a connection to the node that requires the secret: without a
// handshake, after a gateway's (the gateway secret), or after a peer's (the peer secret, for
// kFuzzPeer). Unauthenticated, no input may open the connection (it cannot make the proof)
// and every refusal closes it; as a gateway, no input may make it a peer, change the member
// list or hand the node a key. Returns the frames handled before the node closed the
// connection or the input ended.
enum class Role { kNone, kGateway, kPeer };
size_t FeedSession(std::span<const uint8_t> input, Role role, std::vector<uint8_t>& replies);

}  // namespace limiter::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
