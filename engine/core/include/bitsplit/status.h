// Error handling shared by every module: Status / Result<T> for recoverable failures,
// BITSPLIT_CHECK for broken internal invariants (aborts with file:line).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>

namespace bitsplit {

// A recoverable failure carries a message a user can act on; success carries nothing.
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) { return Status(std::move(message)); }

  bool is_ok() const { return !message_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const std::string& message() const {
    static const std::string kEmpty;
    return message_ ? *message_ : kEmpty;
  }
  // Prefixes the message with context ("loading model.gguf: " + message).
  Status with_context(const std::string& context) const {
    return is_ok() ? *this : Status(context + ": " + *message_);
  }

 private:
  explicit Status(std::string message) : message_(std::move(message)) {}
  std::optional<std::string> message_;
};

// Either a value or a failed Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.is_ok()) (void)(status_ = Status::error("internal error: Result built from an ok Status"));
  }

  bool is_ok() const { return value_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

inline const Status& to_status(const Status& s) { return s; }
template <typename T>
const Status& to_status(const Result<T>& r) { return r.status(); }

[[noreturn]] inline void check_failed(const char* file, int line, const char* expr,
                                      const std::string& detail) {
  std::fprintf(stderr, "%s:%d: internal check failed: %s%s%s\n", file, line, expr,
               detail.empty() ? "" : ": ", detail.c_str());
  std::abort();
}

}  // namespace bitsplit

// Internal invariants only; never for user input (that returns a Status).
#define BITSPLIT_CHECK(cond, ...)                                                       \
  do {                                                                                  \
    if (!(cond)) ::bitsplit::check_failed(__FILE__, __LINE__, #cond, std::string{__VA_ARGS__}); \
  } while (0)

// Propagates a failed Status / Result out of the calling function.
#define BITSPLIT_RETURN_IF_ERROR(expr)            \
  do {                                            \
    auto bitsplit_status_ = (expr);               \
    if (!bitsplit_status_.is_ok()) return ::bitsplit::to_status(bitsplit_status_); \
  } while (0)

#define BITSPLIT_CONCAT_INNER(a, b) a##b
#define BITSPLIT_CONCAT(a, b) BITSPLIT_CONCAT_INNER(a, b)
// BITSPLIT_ASSIGN_OR_RETURN(auto x, f()); declares x from a Result or returns its Status.
#define BITSPLIT_ASSIGN_OR_RETURN(decl, expr)                             \
  auto BITSPLIT_CONCAT(bitsplit_result_, __LINE__) = (expr);              \
  if (!BITSPLIT_CONCAT(bitsplit_result_, __LINE__).is_ok())               \
    return BITSPLIT_CONCAT(bitsplit_result_, __LINE__).status();          \
  decl = std::move(BITSPLIT_CONCAT(bitsplit_result_, __LINE__)).value()
