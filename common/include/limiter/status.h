// The project's one error vocabulary, for paths that must not throw (config loading, parsing,
// request handling, I/O):
//   - Status: ok, or a failure with a message that says what failed and where;
//   - Result<T>: a T, or the failure that kept it from being made;
//   - LIMITER_CHECK(condition, message): an invariant; broken, the process stops with the file,
//     the line and the message (a bug, never bad input: bad input is a Status).
// A denial is not an error: it is an ordinary Decision.
//
// Thread-safety: values.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace limiter {

// A failure's message, as a value that converts to a failed Status or Result<T>:
// `return Error{"the key is empty"};`.
struct Error {
  std::string message;
};

namespace detail {
// What error() returns when there is none.
inline const std::string& NoError() {
  static const std::string empty;
  return empty;
}
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              const std::string& message);
}  // namespace detail

// Stops the process when `condition` is false: an invariant of the code, not of its input.
// `message` is evaluated only then.
#define LIMITER_CHECK(condition, message)                                        \
  do {                                                                           \
    if (!(condition)) [[unlikely]] {                                             \
      ::limiter::detail::CheckFailed(__FILE__, __LINE__, #condition, (message)); \
    }                                                                            \
  } while (false)

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  // NOLINTNEXTLINE(google-explicit-constructor)
  Status(Error error) : error_(std::move(error.message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return !error_.has_value(); }
  // The failure's message; empty when ok.
  const std::string& error() const { return ok() ? detail::NoError() : *error_; }

 private:
  std::optional<std::string> error_;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}      // NOLINT(google-explicit-constructor)
  Result(Error error) : v_(std::move(error)) {}  // NOLINT(google-explicit-constructor)
  // A failed status (an ok one would leave no value: a bug).
  Result(Status status)  // NOLINT(google-explicit-constructor)
      : v_(Error{status.error()}) {
    LIMITER_CHECK(!status.ok(), "a Result made from an ok Status");
  }

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  // The failure's message; empty when ok.
  const std::string& error() const { return ok() ? detail::NoError() : std::get<1>(v_).message; }
  Status status() const { return ok() ? Status() : Status(Error{error()}); }

 private:
  std::variant<T, Error> v_;
};

}  // namespace limiter
