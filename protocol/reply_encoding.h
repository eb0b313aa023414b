// Encoding one op's reply: the node's answer in wire form, apart from the command logic that
// decides it (the protocol module's other half; the rules are in protocol.h). Everything is
// borrowed for the duration of the call; fields left empty are left out of the message.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "protocol/wire.h"

namespace limiter {

struct ReplyFields {
  wire::Status status = wire::Status::Ok;
  std::string_view error;
  bool allowed = false;
  int64_t retry_after_ms = 0;
  int denied_by = -1;
  std::string_view denied_policy;
  std::span<const wire::LimitResult> results;
  // LEASE and RETURN.
  int64_t granted = 0;
  int64_t granted_at_ms = 0;
  int64_t lease_ttl_ms = 0;
  int64_t suggested_lease = 0;
  uint64_t lease_id = 0;
  // INSPECT.
  struct State {
    std::string_view algorithm;
    bool tracked = false;
    std::span<const std::pair<std::string_view, int64_t>> fields;
  };
  const State* state = nullptr;
  // STATS.
  const std::vector<std::pair<std::string, int64_t>>* stats = nullptr;
  // WrongOwner: the node's member list, its ring and generation, and the key's owner by it.
  struct Owner {
    std::span<const std::string> members;
    uint64_t ring_version = 0;
    uint64_t generation = 0;
    std::string_view owner;
  };
  const Owner* wrong_owner = nullptr;
  // A split key (SPLIT, or status Split).
  uint16_t split_k = 0;
  uint32_t split_epoch = 0;
  int64_t split_valid_ms = 0;
  std::span<const uint8_t> split_token;  // empty: none (a node without a cluster secret)
  // HOTKEYS.
  struct HotKey {
    std::string_view policy;
    std::string_view key;
    int64_t rate = 0;
    int32_t denied_permille = 0;
    uint16_t split_k = 0;
  };
  const std::vector<HotKey>* hot_keys = nullptr;
  // REGIONS: this region first, then the others.
  struct Region {
    std::string_view region;
    int64_t share = -1;
    int64_t demand = -1;
    int64_t report_age_ms = -1;
    int64_t link_age_ms = -1;
    int64_t pending_share = 0;
    bool link_up = false;
  };
  const std::vector<Region>* regions = nullptr;
};

// A frame's hello answer: who this node is and which member list its ring comes from.
flatbuffers::Offset<wire::HelloReply> EncodeHelloReply(flatbuffers::FlatBufferBuilder& fbb,
                                                       std::string_view node,
                                                       uint32_t max_frame_bytes,
                                                       const ReplyFields::Owner& ring,
                                                       std::span<const uint8_t> proof = {});

namespace reply_encoding {  // its helpers

inline flatbuffers::Offset<flatbuffers::String> Str(flatbuffers::FlatBufferBuilder& fbb,
                                                    std::string_view s) {
  return fbb.CreateString(s.data(), s.size());
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> Members(
    flatbuffers::FlatBufferBuilder& fbb, std::span<const std::string> members);

}  // namespace reply_encoding

// One op's reply. Inline: a node encodes one per op, most of them a CHECK's with few fields.
inline flatbuffers::Offset<wire::OpReply> EncodeOpReply(flatbuffers::FlatBufferBuilder& fbb,
                                                        uint64_t id, const ReplyFields& f) {
  // Children first: FlatBuffers builds a table after everything it points to. Errors and
  // policy names repeat across a frame's ops (a flood of refused keys, a tenant's denials):
  // each distinct one is written once per reply.
  const auto error = f.error.empty() ? 0 : fbb.CreateSharedString(f.error.data(), f.error.size());
  const auto denied_policy =
      f.denied_policy.empty()
          ? 0
          : fbb.CreateSharedString(f.denied_policy.data(), f.denied_policy.size());
  const auto results =
      f.results.empty() ? 0 : fbb.CreateVectorOfStructs(f.results.data(), f.results.size());
  flatbuffers::Offset<wire::KeyState> state;
  if (f.state) {
    std::vector<flatbuffers::Offset<wire::Stat>> fields;
    for (const auto& [name, value] : f.state->fields) {
      fields.push_back(wire::CreateStat(fbb, reply_encoding::Str(fbb, name), value));
    }
    const auto algorithm = reply_encoding::Str(fbb, f.state->algorithm);
    state = wire::CreateKeyState(fbb, algorithm, f.state->tracked, fbb.CreateVector(fields));
  }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::Stat>>> stats;
  if (f.stats) {
    std::vector<flatbuffers::Offset<wire::Stat>> list;
    for (const auto& [name, value] : *f.stats) {
      list.push_back(wire::CreateStat(fbb, fbb.CreateString(name), value));
    }
    stats = fbb.CreateVector(list);
  }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> members;
  flatbuffers::Offset<flatbuffers::String> owner;
  if (f.wrong_owner) {
    members = reply_encoding::Members(fbb, f.wrong_owner->members);
    owner = reply_encoding::Str(fbb, f.wrong_owner->owner);
  }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::HotKey>>> hot;
  if (f.hot_keys) {
    std::vector<flatbuffers::Offset<wire::HotKey>> list;
    for (const ReplyFields::HotKey& k : *f.hot_keys) {
      const auto policy = reply_encoding::Str(fbb, k.policy);
      const auto key = reply_encoding::Str(fbb, k.key);
      list.push_back(wire::CreateHotKey(fbb, policy, key, k.rate, k.denied_permille, k.split_k));
    }
    hot = fbb.CreateVector(list);
  }
  flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<wire::RegionState>>> regions;
  if (f.regions) {
    std::vector<flatbuffers::Offset<wire::RegionState>> list;
    for (const ReplyFields::Region& r : *f.regions) {
      list.push_back(wire::CreateRegionState(fbb, reply_encoding::Str(fbb, r.region), r.share,
                                             r.demand, r.report_age_ms, r.link_age_ms,
                                             r.pending_share, r.link_up));
    }
    regions = fbb.CreateVector(list);
  }
  const auto split_token =
      f.split_token.empty() ? 0 : fbb.CreateVector(f.split_token.data(), f.split_token.size());
  // Scalars at their default are left out (as FlatBuffers would), tested here: most replies
  // are a CHECK's, and AddElement is a call per field.
  wire::OpReplyBuilder b(fbb);
  b.add_id(id);
  if (f.status != wire::Status::Ok) b.add_status(f.status);
  if (!error.IsNull()) b.add_error(error);
  if (f.allowed) b.add_allowed(true);
  if (f.retry_after_ms != 0) b.add_retry_after_ms(f.retry_after_ms);
  if (f.denied_by != -1) b.add_denied_by(f.denied_by);
  if (!denied_policy.IsNull()) b.add_denied_policy(denied_policy);
  if (!results.IsNull()) b.add_results(results);
  if (f.granted != 0) b.add_granted(f.granted);
  if (f.granted_at_ms != 0) b.add_granted_at_ms(f.granted_at_ms);
  if (f.lease_ttl_ms != 0) b.add_lease_ttl_ms(f.lease_ttl_ms);
  if (f.suggested_lease != 0) b.add_suggested_lease(f.suggested_lease);
  if (f.lease_id != 0) b.add_lease_id(f.lease_id);
  if (!state.IsNull()) b.add_state(state);
  if (!stats.IsNull()) b.add_stats(stats);
  if (f.wrong_owner) {
    b.add_ring_version(f.wrong_owner->ring_version);
    b.add_members(members);
    b.add_generation(f.wrong_owner->generation);
    b.add_owner(owner);
  }
  if (f.split_k != 0) {
    b.add_split_k(f.split_k);
    b.add_split_epoch(f.split_epoch);
    b.add_split_valid_ms(f.split_valid_ms);
    if (!split_token.IsNull()) b.add_split_token(split_token);
  }
  if (!hot.IsNull()) b.add_hot_keys(hot);
  if (!regions.IsNull()) b.add_regions(regions);
  return b.Finish();
}

}  // namespace limiter
