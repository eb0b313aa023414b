// ReadBuffer: bytes read from a socket and not yet consumed. Reads go into free space at the
// end; consumed bytes leave from the front; the unread rest moves to the front only when
// the space runs out. Nothing is zero-filled (a resized std::vector would clear every read's
// space first). Not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

namespace limiter {

class ReadBuffer {
 public:
  std::span<const uint8_t> readable() const { return {data_.get() + begin_, end_ - begin_}; }
  size_t size() const { return end_ - begin_; }

  // At least `min` bytes of space to read into, after the unread bytes.
  std::span<uint8_t> Space(size_t min) {
    if (capacity_ - end_ < min) {
      const size_t unread = end_ - begin_;
      if (capacity_ - unread < min || begin_ == 0) {
        size_t capacity = capacity_ == 0 ? min : capacity_;
        while (capacity - unread < min) capacity *= 2;
        std::unique_ptr<uint8_t[]> grown(new uint8_t[capacity]);  // not value-initialized
        if (unread) std::memcpy(grown.get(), data_.get() + begin_, unread);
        data_ = std::move(grown);
        capacity_ = capacity;
      } else {
        std::memmove(data_.get(), data_.get() + begin_, unread);
      }
      begin_ = 0;
      end_ = unread;
    }
    return {data_.get() + end_, capacity_ - end_};
  }
  void Commit(size_t n) { end_ += n; }  // n bytes were read into Space()
  void Consume(size_t n) {
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }
  void Clear() { begin_ = end_ = 0; }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t capacity_ = 0;
  size_t begin_ = 0;
  size_t end_ = 0;
};

}  // namespace limiter
