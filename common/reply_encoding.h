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

#include "common/wire.h"

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
  // HOTKEYS.
  struct HotKey {
    std::string_view policy;
    std::string_view key;
    int64_t rate = 0;
    int32_t denied_permille = 0;
    uint16_t split_k = 0;
  };
  const std::vector<HotKey>* hot_keys = nullptr;
};

flatbuffers::Offset<wire::OpReply> EncodeOpReply(flatbuffers::FlatBufferBuilder& fbb, uint64_t id,
                                                 const ReplyFields& f);

// A frame's hello answer: who this node is and which member list its ring comes from.
flatbuffers::Offset<wire::HelloReply> EncodeHelloReply(flatbuffers::FlatBufferBuilder& fbb,
                                                       std::string_view node,
                                                       uint32_t max_frame_bytes,
                                                       const ReplyFields::Owner& ring);

}  // namespace limiter
