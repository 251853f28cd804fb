// Result<T>: a value or an errno, for the C++ API's control-plane calls
// (g++ 12 has no std::expected). The library throws no exceptions; asking a
// failed Result for its value aborts.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace usrtrace {

template <class T>
class Result {
  static_assert(!std::is_reference_v<T>, "Result<T&> is not supported");

 public:
  // A success holding `value`.
  // Context: any thread; T's constructors decide the rest.
  Result(T value) : err_(0) { new (&value_) T(std::move(value)); }  // NOLINT: implicit on purpose

  // A failure; `err` is an errno, either sign (0 becomes EINVAL: a
  // failure always has a cause) (EINVAL, ENOENT, ...).
  // Context: any thread.
  static Result error(int err) { return Result(err < 0 ? -err : (err == 0 ? EINVAL : err), 0); }

  Result(Result&& o) noexcept(std::is_nothrow_move_constructible_v<T>) : err_(o.err_) {
    if (!err_) new (&value_) T(std::move(o.value_));
  }
  Result(const Result& o) : err_(o.err_) {
    if (!err_) new (&value_) T(o.value_);
  }
  Result& operator=(Result o) {
    if (!err_) value_.~T();
    err_ = o.err_;
    if (!err_) new (&value_) T(std::move(o.value_));
    return *this;
  }
  ~Result() {
    if (!err_) value_.~T();
  }

  // True when there is a value. Context: any thread.
  bool ok() const { return err_ == 0; }
  explicit operator bool() const { return ok(); }
  // The errno of a failure (positive), 0 on success. Context: any thread.
  int error() const { return err_; }
  // strerror() of the failure, "Success" otherwise. Context: any thread.
  const char* message() const { return std::strerror(err_); }

  // The value; aborts if there is none. Context: any thread.
  T& value() & { return check(), value_; }
  const T& value() const& { return check(), value_; }
  T&& value() && { return check(), std::move(value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Result(int err, int) : err_(err) {}
  void check() const {
    if (err_) std::abort();
  }
  int err_;
  union {
    T value_;
  };
};

}  // namespace usrtrace
