#include "server/durable_record.h"

#include <algorithm>
#include <vector>

#include "common/limits.h"
#include "protocol/state_transfer.h"

namespace limiter::durable {
namespace {

constexpr int64_t kMaxElapsedMs = int64_t{1000} * 86'400'000;  // 1000 days: windows are at most 400

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void PutString(std::string& out, std::string_view s) {
  PutVarint(out, s.size());
  out.append(s);
}

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool Byte(uint8_t& v) {
    if (pos_ >= in_.size()) return false;
    v = static_cast<uint8_t>(in_[pos_++]);
    return true;
  }
  bool Fixed64(int64_t& v) {
    if (in_.size() - pos_ < 8) return false;
    uint64_t u = 0;
    for (int i = 7; i >= 0; --i)
      u = u << 8 | static_cast<uint8_t>(in_[pos_ + static_cast<size_t>(i)]);
    pos_ += 8;
    v = static_cast<int64_t>(u);
    return true;
  }
  bool Varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = 0;
      if (!Byte(b)) return false;
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool String(std::string_view& s, size_t most) {
    uint64_t n = 0;
    if (!Varint(n) || n > most || n > in_.size() - pos_) return false;
    s = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

}  // namespace

std::string RecordKey(const KeyId& id) {
  std::string k(17, '\0');
  k[0] = kRecordPrefix;
  for (int i = 0; i < 8; ++i) {
    k[1 + static_cast<size_t>(i)] = static_cast<char>(id.hi >> (56 - 8 * i));
    k[9 + static_cast<size_t>(i)] = static_cast<char>(id.lo >> (56 - 8 * i));
  }
  return k;
}

std::optional<KeyId> IdOfRecordKey(std::string_view key) {
  if (key.size() != 17 || key[0] != kRecordPrefix) return std::nullopt;
  KeyId id;
  for (size_t i = 0; i < 8; ++i) {
    id.hi = id.hi << 8 | static_cast<uint8_t>(key[1 + i]);
    id.lo = id.lo << 8 | static_cast<uint8_t>(key[9 + i]);
  }
  return id;
}

void Encode(const Policy& p, const DurableKeyName& name, const KeyLimiter& state, int64_t now_ms,
            int64_t wall_ms, std::string& out) {
  thread_local std::vector<int64_t> fields;
  fields.clear();
  const bool absolute = p.calendar != nullptr;
  if (absolute) {
    const auto& s = std::get<FixedWindow::State>(state.state());
    fields = {s.window_start_ms, s.count};
  } else {
    ExportState(state, now_ms, fields);
  }
  out.clear();
  out.push_back(static_cast<char>(kFormatVersion));
  out.push_back(static_cast<char>(p.algorithm));
  out.push_back(static_cast<char>((absolute ? kAbsolute : 0) | kWithRate));
  out.push_back(static_cast<char>(name.kind));
  const uint64_t wall = static_cast<uint64_t>(wall_ms);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(wall >> (8 * i)));
  PutString(out, p.name);
  PutString(out, name.key);
  PutString(out, name.tenant);
  PutVarint(out, fields.size());
  for (int64_t f : fields) {
    PutVarint(out, (static_cast<uint64_t>(f) << 1) ^ static_cast<uint64_t>(f >> 63));
  }
  PutVarint(out, static_cast<uint64_t>(p.rate.limit()));
  PutVarint(out, static_cast<uint64_t>(p.rate.window_ms()));
  PutVarint(out, static_cast<uint64_t>(p.rate.burst()));
}

Result<Record> Decode(std::string_view value) {
  Record r;
  Reader in(value);
  uint8_t algorithm = 0, kind = 0;
  if (!in.Byte(r.version)) return Error{"empty record"};
  if (r.version != kFormatVersion) {
    return Error{"record of format " + std::to_string(r.version) + ", this limiterd reads format " +
                 std::to_string(kFormatVersion)};
  }
  if (!in.Byte(algorithm) || algorithm > static_cast<uint8_t>(Algorithm::kLeakyBucket) ||
      !in.Byte(r.flags) || !in.Byte(kind) || kind > DurableKeyName::kIdOnly ||
      !in.Fixed64(r.written_wall_ms)) {
    return Error{"malformed record header"};
  }
  r.algorithm = static_cast<Algorithm>(algorithm);
  r.kind = static_cast<DurableKeyName::Kind>(kind);
  uint64_t n = 0;
  if (!in.String(r.policy, kMaxNameBytes) || !in.String(r.key, kMaxKeyBytes) ||
      !in.String(r.tenant, kMaxKeyBytes) || !in.Varint(n) || n > value.size()) {
    return Error{"malformed record names"};
  }
  r.fields.resize(n);
  for (int64_t& f : r.fields) {
    uint64_t z = 0;
    if (!in.Varint(z)) return Error{"malformed record fields"};
    f = static_cast<int64_t>(z >> 1) ^ -static_cast<int64_t>(z & 1);
  }
  if (r.flags & kWithRate) {
    uint64_t limit = 0, window = 0, burst = 0;
    if (!in.Varint(limit) || !in.Varint(window) || !in.Varint(burst) ||
        limit > static_cast<uint64_t>(INT64_MAX) || window > static_cast<uint64_t>(INT64_MAX) ||
        burst > static_cast<uint64_t>(INT64_MAX)) {
      return Error{"malformed record rate"};
    }
    r.limit = static_cast<int64_t>(limit);
    r.window_ms = static_cast<int64_t>(window);
    r.burst = static_cast<int64_t>(burst);
    if (!Rate::Validate(r.limit, r.window_ms, r.burst).ok()) return Error{"malformed record rate"};
  }
  if (!in.done()) return Error{"trailing bytes in record"};
  return r;
}

Result<std::optional<KeyLimiter>> Import(const Policy& p, const Record& r, int64_t now_ms,
                                         int64_t wall_ms) {
  if (((r.flags & kAbsolute) != 0) != (p.calendar != nullptr)) {
    return Error{"the policy's align: calendar changed since the record was written"};
  }
  if (r.flags & kAbsolute) {
    // A calendar window: its start and count as they are, on the calendar's clock.
    if (r.fields.size() != 2) return Error{"calendar record: expected 2 fields"};
    const int64_t start = r.fields[0], count = r.fields[1];
    const int64_t w = p.rate.window_ms();
    if (count < 0 || start < 0 || start % w != 0) {
      return Error{"calendar record: field out of range"};
    }
    // A count over a limit lowered since: the limit (the window stays used up).
    KeyLimiter k(FixedWindow::State{start, std::min(count, p.rate.limit())});
    if (k.IsFresh(p.rate, now_ms)) return std::optional<KeyLimiter>();
    return std::optional<KeyLimiter>(std::move(k));
  }
  // Time went by since the write: as much as the wall clock says, never less than none, and
  // never more than kMaxElapsedMs (a write time from a broken clock or a damaged record must
  // not overflow; every state is fresh long before that).
  int64_t elapsed = 0;
  if (__builtin_sub_overflow(wall_ms, r.written_wall_ms, &elapsed)) elapsed = kMaxElapsedMs;
  elapsed = std::clamp<int64_t>(elapsed, 0, kMaxElapsedMs);
  thread_local std::vector<int64_t> fields;
  fields.assign(r.fields.begin(), r.fields.end());
  if ((r.flags & kWithRate) && (r.limit != p.rate.limit() || r.window_ms != p.rate.window_ms() ||
                                r.burst != p.rate.burst())) {
    ConvertFields(p.algorithm, Rate(r.limit, r.window_ms, r.burst), p.rate, fields);
  }
  Result<std::optional<KeyLimiter>> k = ImportState(p.algorithm, p.rate, fields, now_ms - elapsed);
  if (!k) return k;
  if (*k && (*k)->IsFresh(p.rate, now_ms)) return std::optional<KeyLimiter>();
  return k;
}

}  // namespace limiter::durable
