#include "client/billing_journal.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "client/journal_files.h"
#include "common/mutex.h"

namespace limiter {
namespace {

using journal_files::Errno;
using journal_files::WriteAll;

constexpr char kMagic[8] = {'L', 'I', 'M', 'B', 'J', 'R', 'N', 'L'};
constexpr size_t kRecordHeaderBytes = 6;  // u32 check, u16 body length

enum Type : uint8_t { kOpen = 1, kAdd = 2, kPay = 3, kClose = 4 };

uint32_t Check(const void* data, size_t size) {
  return static_cast<uint32_t>(XXH3_64bits(data, size));
}

void PutU16(char* p, uint16_t v) {
  p[0] = static_cast<char>(v);
  p[1] = static_cast<char>(v >> 8);
}
void PutU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint16_t GetU16(const char* p) {
  return static_cast<uint16_t>(static_cast<uint8_t>(p[0]) | static_cast<uint8_t>(p[1]) << 8);
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

std::string Header() {
  std::string h(BillingJournal::kHeaderBytes, '\0');
  std::memcpy(h.data(), kMagic, sizeof(kMagic));
  PutU32(h.data() + 8, BillingJournal::kVersion);
  PutU32(h.data() + 12, Check(h.data(), 12));
  return h;
}

// One record, built in place: the body after room for its check and length.
class Record {
 public:
  Record(Type type, uint64_t number) {
    Byte(type);
    Varint(number);
  }
  void Byte(uint8_t b) { buf_[n_++] = static_cast<char>(b); }
  void Varint(uint64_t v) {
    while (v >= 0x80) {
      buf_[n_++] = static_cast<char>(v | 0x80);
      v >>= 7;
    }
    buf_[n_++] = static_cast<char>(v);
  }
  void Bytes(std::string_view s) {
    Varint(s.size());
    if (!s.empty()) std::memcpy(buf_ + n_, s.data(), s.size());  // an empty view may be null
    n_ += s.size();
  }
  std::string_view Seal() {
    PutU16(buf_ + 4, static_cast<uint16_t>(n_ - kRecordHeaderBytes));
    PutU32(buf_, Check(buf_ + 4, n_ - 4));
    return {buf_, n_};
  }

 private:
  char buf_[BillingJournal::kMaxRecordBytes];
  size_t n_ = kRecordHeaderBytes;
};

void CheckBounds(std::string_view policy, std::string_view key, std::string_view tenant) {
  LIMITER_CHECK(!policy.empty() && policy.size() <= kMaxNameBytes && !key.empty() &&
                    key.size() <= kMaxKeyBytes && tenant.size() <= kMaxKeyBytes,
                "BillingJournal: a debt's names are out of bounds (" +
                    std::to_string(policy.size()) + ", " + std::to_string(key.size()) + ", " +
                    std::to_string(tenant.size()) + ")");
}

std::string_view OpenRecord(Record& r, std::string_view policy, std::string_view key,
                            std::string_view tenant, int64_t units) {
  CheckBounds(policy, key, tenant);
  r.Varint(static_cast<uint64_t>(units));
  r.Bytes(policy);
  r.Bytes(key);
  r.Bytes(tenant);
  return r.Seal();
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ----- reading -----

struct Parsed {
  std::vector<JournalDebt> debts;
  uint64_t good_bytes = 0;  // the valid prefix: header and whole records
  std::string torn;
};

class BodyReader {
 public:
  explicit BodyReader(std::string_view body) : p_(body.data()), end_(body.data() + body.size()) {}
  bool Byte(uint8_t* b) {
    if (p_ == end_) return false;
    *b = static_cast<uint8_t>(*p_++);
    return true;
  }
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Byte(&b)) return false;
      if (shift == 63 && b > 1) return false;
      *v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool Bytes(size_t most, std::string* s) {
    uint64_t n;
    if (!Varint(&n) || n > most || n > static_cast<size_t>(end_ - p_)) return false;
    s->assign(p_, static_cast<size_t>(n));
    p_ += n;
    return true;
  }
  size_t left() const { return static_cast<size_t>(end_ - p_); }

 private:
  const char* p_;
  const char* end_;
};

class Replayer {
 public:
  // Applies one record's body; an error says what is wrong with it.
  Status Apply(std::string_view body) {
    BodyReader r(body);
    uint8_t type;
    uint64_t number, units = 0;
    if (!r.Byte(&type) || !r.Varint(&number)) return Error{"cut short"};
    auto it = open_.find(number);
    const bool is_open = it != open_.end();
    switch (type) {
      case kOpen: {
        JournalDebt d;
        d.number = number;
        if (!r.Varint(&units) || !r.Bytes(kMaxNameBytes, &d.policy) ||
            !r.Bytes(kMaxKeyBytes, &d.key) || !r.Bytes(kMaxKeyBytes, &d.tenant)) {
          return Error{"an open record cut short, or a name longer than its bound"};
        }
        if (d.policy.empty() || d.key.empty()) return Error{"an open record with an empty name"};
        if (units < 1 || units > static_cast<uint64_t>(BillingJournal::kMaxUnits)) {
          return Error{"opens debt " + std::to_string(number) + " with " + std::to_string(units) +
                       " units"};
        }
        if (is_open) {
          return Error{"opens debt " + std::to_string(number) + ", which is open already"};
        }
        d.units = static_cast<int64_t>(units);
        open_.emplace(number, debts_.size());
        debts_.push_back(std::move(d));
        break;
      }
      case kAdd:
      case kPay: {
        if (!r.Varint(&units)) return Error{"cut short"};
        const char* verb = type == kAdd ? "adds" : "pays";
        if (!is_open) {
          return Error{std::string(verb) + " to debt " + std::to_string(number) +
                       ", which is not open"};
        }
        JournalDebt& d = debts_[it->second];
        const uint64_t owed = static_cast<uint64_t>(d.units);
        if (units < 1 || (type == kAdd && units > BillingJournal::kMaxUnits - owed) ||
            (type == kPay && units > owed)) {
          return Error{std::string(verb) + " " + std::to_string(units) + " units to debt " +
                       std::to_string(number) + ", which owes " + std::to_string(owed)};
        }
        d.units = static_cast<int64_t>(type == kAdd ? owed + units : owed - units);
        break;
      }
      case kClose: {
        uint8_t reason;
        if (!r.Byte(&reason)) return Error{"cut short"};
        if (reason > static_cast<uint8_t>(BillingJournal::CloseReason::kRefused)) {
          return Error{"closes with unknown reason " + std::to_string(reason)};
        }
        if (!is_open) return Error{"closes debt " + std::to_string(number) + ", which is not open"};
        debts_[it->second].units = 0;
        open_.erase(it);
        break;
      }
      default:
        return Error{"unknown record type " + std::to_string(type)};
    }
    if (r.left() != 0) return Error{std::to_string(r.left()) + " bytes left over after the record"};
    return Status::Ok();
  }

  std::vector<JournalDebt> Unpaid() && {
    std::vector<JournalDebt> out;
    for (JournalDebt& d : debts_) {
      if (d.units > 0) out.push_back(std::move(d));
    }
    return out;
  }

 private:
  std::vector<JournalDebt> debts_;             // in the order they were opened
  std::unordered_map<uint64_t, size_t> open_;  // number -> index in debts_
};

bool AllZero(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == 0; });
}

Result<Parsed> Parse(std::string_view file, const std::string& path) {
  auto error = [&](const std::string& what) {
    return Error{"billing journal " + path + ": " + what};
  };
  Parsed out;
  if (file.empty()) return out;  // made empty (touch): a new journal
  if (file.size() < BillingJournal::kHeaderBytes) {
    // Created, and killed while its header was written: a new journal.
    if (Header().starts_with(file)) {
      out.torn = "a torn header (" + std::to_string(file.size()) + " bytes) was cut off";
      return out;
    }
    return error("the header is cut short (" + std::to_string(file.size()) + " of " +
                 std::to_string(BillingJournal::kHeaderBytes) + " bytes)");
  }
  if (std::memcmp(file.data(), kMagic, sizeof(kMagic)) != 0) {
    return error("not a billing journal (it does not start with \"LIMBJRNL\")");
  }
  if (GetU32(file.data() + 12) != Check(file.data(), 12)) {
    return error("the header's checksum does not match");
  }
  const uint32_t version = GetU32(file.data() + 8);
  if (version != BillingJournal::kVersion) {
    return error("format version " + std::to_string(version) + "; this client reads version " +
                 std::to_string(BillingJournal::kVersion));
  }
  Replayer replayer;
  size_t at = BillingJournal::kHeaderBytes;
  while (at < file.size()) {
    const std::string_view rest = file.substr(at);
    const std::string where = "record at offset " + std::to_string(at) + ": ";
    // The last record, cut short or never fully written (a machine crash may also leave
    // zeros past the end of what was written): ignored. Anything else is an error.
    auto torn = [&] {
      out.torn = "a torn last record at offset " + std::to_string(at) + " (" +
                 std::to_string(rest.size()) + " bytes to the end of the file) was cut off";
    };
    if (rest.size() < kRecordHeaderBytes) {
      torn();
      break;
    }
    const size_t size = kRecordHeaderBytes + GetU16(rest.data() + 4);
    if (size == kRecordHeaderBytes || size > BillingJournal::kMaxRecordBytes) {
      if (AllZero(rest)) {
        torn();
        break;
      }
      return error(where + "its length " + std::to_string(size - kRecordHeaderBytes) +
                   " is out of bounds");
    }
    if (size > rest.size()) {
      torn();
      break;
    }
    if (GetU32(rest.data()) != Check(rest.data() + 4, size - 4)) {
      if (size == rest.size() || AllZero(rest)) {
        torn();
        break;
      }
      return error(where + "checksum mismatch (" + std::to_string(rest.size() - size) +
                   " bytes follow it)");
    }
    if (Status applied = replayer.Apply(rest.substr(kRecordHeaderBytes, size - kRecordHeaderBytes));
        !applied.ok()) {
      return error(where + applied.error());
    }
    at += size;
  }
  out.good_bytes = at;
  out.debts = std::move(replayer).Unpaid();
  return out;
}

}  // namespace

// ----- the journal -----

void BillingJournal::Image::Add(uint64_t number, std::string_view policy, std::string_view key,
                                std::string_view tenant, int64_t units) {
  Record r(kOpen, number);
  const std::string_view rec = OpenRecord(r, policy, key, tenant, units);
  bytes_.append(rec);
  sizes_.emplace_back(number, static_cast<uint32_t>(rec.size()));
}

Result<BillingJournal::Replay> BillingJournal::Open(const std::string& path,
                                                    BillingJournalOptions options) {
  if (path.empty()) return Error{"billing journal: no path"};
  Result<int> opened = journal_files::OpenLocked(path);
  if (!opened) return Error{opened.error()};
  const int fd = *opened;
  auto fail = [&](std::string what) -> Result<Replay> {
    ::close(fd);
    return Error{std::move(what)};
  };
  const std::string file_path = journal_files::RealPath(path);
  Result<std::string> bytes = journal_files::ReadFrom(fd, path);
  if (!bytes) return fail(bytes.error());
  Result<Parsed> parsed = Parse(*bytes, path);
  if (!parsed) return fail(parsed.error());  // the file is left as it was
  journal_files::Tighten(fd, path);
  // A rewrite cut short leaves its temp file: the journal itself is whole. (unlink removes a
  // symlink planted there, never what it points to.)
  ::unlink((file_path + ".tmp").c_str());
  uint64_t file_bytes;
  if (parsed->good_bytes == 0) {
    const std::string header = Header();
    if (::ftruncate(fd, 0) != 0 || !WriteAll(fd, header.data(), header.size()) ||
        ::fdatasync(fd) != 0 || !journal_files::SyncDirectoryOf(file_path)) {
      return fail(Errno("billing journal " + path + ": create"));
    }
    file_bytes = kHeaderBytes;
  } else {
    file_bytes = parsed->good_bytes;
    if (file_bytes < bytes->size() &&
        (::ftruncate(fd, static_cast<off_t>(file_bytes)) != 0 || ::fdatasync(fd) != 0)) {
      return fail(Errno("billing journal " + path + ": cutting off a torn record"));
    }
  }
  Replay replay;
  replay.journal.reset(new BillingJournal(path, file_path, options, fd, file_bytes));
  {
    BillingJournal& j = *replay.journal;
    MutexLock guard(j.mu_);
    for (const JournalDebt& d : parsed->debts) {
      Record r(kOpen, d.number);
      const uint32_t size =
          static_cast<uint32_t>(OpenRecord(r, d.policy, d.key, d.tenant, d.units).size());
      j.live_[d.number] = size;
      j.live_bytes_ += size;
    }
  }
  replay.debts = std::move(parsed->debts);
  replay.torn = std::move(parsed->torn);
  return replay;
}

BillingJournal::BillingJournal(std::string path, std::string file_path,
                               BillingJournalOptions options, int fd, uint64_t file_bytes)
    : path_(std::move(path)),
      file_path_(std::move(file_path)),
      options_(options),
      fd_(fd),
      file_bytes_(file_bytes) {}

BillingJournal::~BillingJournal() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
  SyncNow();
  ::close(fd_);  // releases the flock
}

void BillingJournal::Fail(const std::string& what) {
  errors_.fetch_add(1, std::memory_order_relaxed);
  std::fprintf(stderr, "limiter client: billing journal %s: %s\n", path_.c_str(), what.c_str());
}

void BillingJournal::Append(const char* data, size_t size, uint64_t number,
                            int64_t live_delta_bytes) {
  MutexLock lock(mu_);
  if (live_delta_bytes > 0) {
    live_[number] = static_cast<uint32_t>(live_delta_bytes);
    live_bytes_ += static_cast<uint64_t>(live_delta_bytes);
  } else if (live_delta_bytes < 0) {
    auto it = live_.find(number);
    if (it != live_.end()) {
      live_bytes_ -= it->second;
      live_.erase(it);
    }
  }
  if (rewriting_) captured_.append(data, size);
  if (broken_) return;  // behind the debts until the next rewrite
  if (!WriteAll(fd_, data, size)) {
    const std::string why = Errno("write");
    // Cut off what part of the record was written, so that later records do not follow it.
    const bool cut = ::ftruncate(fd_, static_cast<off_t>(file_bytes_)) == 0;
    broken_ = true;
    Fail(why + (cut ? "" : " (and the partial record could not be cut off)") +
         "; debt changes are kept in memory until the journal is rewritten");
    return;
  }
  file_bytes_ += size;
  unsynced_ = true;
}

void BillingJournal::Opened(uint64_t number, std::string_view policy, std::string_view key,
                            std::string_view tenant, int64_t units) {
  Record r(kOpen, number);
  const std::string_view rec = OpenRecord(r, policy, key, tenant, units);
  Append(rec.data(), rec.size(), number, static_cast<int64_t>(rec.size()));
}

void BillingJournal::Added(uint64_t number, int64_t units) {
  Record r(kAdd, number);
  r.Varint(static_cast<uint64_t>(units));
  const std::string_view rec = r.Seal();
  Append(rec.data(), rec.size(), number, 0);
}

void BillingJournal::Paid(uint64_t number, int64_t units) {
  Record r(kPay, number);
  r.Varint(static_cast<uint64_t>(units));
  const std::string_view rec = r.Seal();
  Append(rec.data(), rec.size(), number, 0);
}

void BillingJournal::Closed(uint64_t number, CloseReason reason) {
  Record r(kClose, number);
  r.Byte(static_cast<uint8_t>(reason));
  const std::string_view rec = r.Seal();
  Append(rec.data(), rec.size(), number, -1);
}

bool BillingJournal::BeginRewrite(Image image) {
  MutexLock lock(mu_);
  if (rewriting_) return false;
  rewriting_ = true;
  image_ = std::move(image.bytes_);
  captured_.clear();
  live_.clear();
  live_bytes_ = 0;
  for (const auto& [number, size] : image.sizes_) {
    live_[number] = size;
    live_bytes_ += size;
  }
  return true;
}

Status BillingJournal::FinishRewrite() {
  std::string content = Header();
  {
    MutexLock lock(mu_);
    if (!rewriting_) return Error{"rewrite: none was begun"};
    content += image_;
    std::string().swap(image_);
  }
  const std::string tmp = file_path_ + ".tmp";
  auto abandon = [&](int fd, const std::string& why) {
    if (fd >= 0) {  // this rewrite made the file: it goes (nothing else at tmp is touched)
      ::close(fd);
      ::unlink(tmp.c_str());
    }
    MutexLock lock(mu_);
    rewriting_ = false;
    std::string().swap(captured_);
    next_rewrite_try_ms_ = SteadyMs() + 1000;
    Fail("rewrite: " + why);
    return Status(Error{"rewrite: " + why});
  };
  Result<int> made = journal_files::WriteNewFile(tmp, content);
  if (!made) return abandon(-1, made.error());
  const int fd = *made;
  int old = -1;
  std::string why;
  {
    MutexLock lock(mu_);
    // The changes made while the image was written, then the switch: appends wait for it.
    if (!WriteAll(fd, captured_.data(), captured_.size())) {
      why = Errno(tmp);
    } else if (::rename(tmp.c_str(), file_path_.c_str()) != 0) {
      why = Errno("rename " + tmp);
    } else {
      old = fd_;
      fd_ = fd;
      file_bytes_ = content.size() + captured_.size();
      std::string().swap(captured_);
      rewriting_ = false;
      broken_ = false;
      unsynced_ = true;
    }
  }
  if (old < 0) return abandon(fd, why);
  {
    MutexLock lock(sync_mu_);  // not under an fdatasync of it
    ::close(old);              // and its flock: the new file holds one since it was made
  }
  if (!journal_files::SyncDirectoryOf(file_path_)) {
    Fail(Errno("fsync of the directory after a rewrite"));
  }
  rewrites_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

void BillingJournal::SyncNow() {
  MutexLock sync(sync_mu_);
  int fd;
  {
    MutexLock lock(mu_);
    if (!unsynced_) return;
    unsynced_ = false;
    fd = fd_;
  }
  if (::fdatasync(fd) != 0) {
    Fail(Errno("fdatasync"));
    MutexLock lock(mu_);
    unsynced_ = true;
  }
}

bool BillingJournal::RewriteDueLocked() const {
  if (broken_) return true;
  const uint64_t needed = kHeaderBytes + live_bytes_;
  const uint64_t most = std::max<uint64_t>(static_cast<uint64_t>(options_.compact_min_bytes),
                                           static_cast<uint64_t>(options_.compact_factor) * needed);
  return file_bytes_ > most;
}

bool BillingJournal::RewriteDue() const {
  MutexLock lock(mu_);
  return RewriteDueLocked();
}

uint64_t BillingJournal::file_bytes() const {
  MutexLock lock(mu_);
  return file_bytes_;
}

void BillingJournal::Start(std::function<void()> compact) {
  compact_ = std::move(compact);
  if (options_.background) thread_ = std::thread([this] { Run(); });
}

void BillingJournal::Run() {
  const auto wake =
      std::chrono::milliseconds(options_.sync_interval_ms > 0 ? options_.sync_interval_ms : 1000);
  MutexLock lock(mu_);
  while (!stopping_) {
    if (cv_.WaitFor(lock, wake, [this] {
          mu_.AssertHeld();
          return stopping_;
        })) {
      break;
    }
    lock.Unlock();
    if (options_.sync_interval_ms > 0) SyncNow();
    lock.Lock();
    const bool due = !rewriting_ && RewriteDueLocked() && SteadyMs() >= next_rewrite_try_ms_;
    if (due && compact_) {
      lock.Unlock();
      compact_();
      lock.Lock();
    }
  }
}

}  // namespace limiter
