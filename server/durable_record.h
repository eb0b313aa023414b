// How the node's database (durable_store.h) writes a durable key's state: pure functions, no
// RocksDB, so that they are tested (and fuzzed) on their own.
//
// Key: 'k' + the KeyId (hi, lo), big-endian: one ring slot's keys are adjacent.
// Value: version u8, algorithm u8, flags u8 (kAbsolute: a calendar window's times as they
// are), kind u8, the write's wall-clock ms (8 bytes, little-endian), then as varints the
// policy's name, the key and the tenant (length, bytes), the field count and the fields
// (zigzag): the state's fields as offsets from the policy's clock at the write
// (state_transfer.h), or a calendar window's start and count; then, with flag kWithRate, the
// policy's rate at the write as varints (limit, window ms, burst), so that a state read under
// a changed rate is converted (ConvertFields) rather than dropped. Records written before
// that flag existed have no rate: they are read as if written under the rate of the read,
// and clamped to it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/key_limiter.h"
#include "common/policy.h"
#include "limiter/status.h"
#include "protocol/key_id.h"

namespace limiter {

// Who a record belongs to: the strings its KeyId was made from.
struct DurableKeyName {
  enum Kind : uint8_t { kLimit = 0, kAncestor = 1, kIdOnly = 2 };
  Kind kind = kIdOnly;      // kIdOnly: handed over by id, strings unknown
  std::string_view key;     // kLimit: the key; kAncestor: the tenant
  std::string_view tenant;  // kLimit: the request's tenant (may be empty)
};

namespace durable {

inline constexpr uint8_t kFormatVersion = 1;
inline constexpr char kRecordPrefix = 'k';
inline constexpr uint8_t kAbsolute = 1;
inline constexpr uint8_t kWithRate = 2;

struct Record {
  uint8_t version = 0;
  Algorithm algorithm = Algorithm::kGcra;
  uint8_t flags = 0;
  DurableKeyName::Kind kind = DurableKeyName::kIdOnly;
  int64_t written_wall_ms = 0;
  std::string_view policy, key, tenant;  // into the value decoded
  std::vector<int64_t> fields;
  // With kWithRate: the rate the state was written under (a valid Rate's numbers).
  int64_t limit = 0, window_ms = 0, burst = 0;
};

std::string RecordKey(const KeyId& id);
// The id of a record's key; nullopt when the bytes are not a record's key.
std::optional<KeyId> IdOfRecordKey(std::string_view key);
// The record of a (non-fresh) state of policy p, written at now_ms on the policy's clock and
// wall_ms on the wall clock, into out.
void Encode(const Policy& p, const DurableKeyName& name, const KeyLimiter& state, int64_t now_ms,
            int64_t wall_ms, std::string& out);
// The record (its names point into `value`), or why the bytes are not a record of this format.
// Any input.
Result<Record> Decode(std::string_view value);
// The record's state on the policy's clock reading now_ms, the wall clock reading wall_ms:
// nullopt when it is fresh by now. Written under another rate (a limit or burst lowered or
// raised across a restart), the state is converted to the policy's rate and never decides
// more generously than it would have (an exhausted key stays exhausted). An error when the
// fields are no state of the policy's algorithm (a damaged record).
Result<std::optional<KeyLimiter>> Import(const Policy& p, const Record& r, int64_t now_ms,
                                         int64_t wall_ms);

}  // namespace durable
}  // namespace limiter
