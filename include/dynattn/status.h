// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The result of every public call: a code, and a message that names the input and the rule.

#ifndef DYNATTN_STATUS_H_
#define DYNATTN_STATUS_H_

#include <string>
#include <utility>

namespace dynattn {

/// What kind of failure a `Status` reports.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  ///< An input broke a rule of the spec; nothing was written.
  kUnsupported,      ///< Valid by the spec but not available here (e.g. a CUDA tensor, no GPU).
  kInternal,         ///< A bug in libdynattn.
  kDeviceError,      ///< The CUDA runtime reported an error; the message names the call.
  /// Valid, but refused by the state of an object now: a Context already running a call on
  /// another thread. Nothing was written. (6: the C API's 5 is out-of-memory.)
  kFailedPrecondition = 6,
};

/// Outcome of a call. On failure, `message()` reads "<input>: <rule it broke>", e.g.
/// `"seqstarts: must be non-decreasing (seqstarts[2] = 3 < seqstarts[1] = 5)"`.
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  /// An invalid-argument error about `input` breaking `rule`.
  static Status Invalid(const std::string& input, const std::string& rule) {
    return Status(StatusCode::kInvalidArgument, input + ": " + rule);
  }
  static Status Unsupported(const std::string& input, const std::string& rule) {
    return Status(StatusCode::kUnsupported, input + ": " + rule);
  }
  /// A call refused by the current state of `input` (e.g. a busy Context).
  static Status FailedPrecondition(const std::string& input, const std::string& rule) {
    return Status(StatusCode::kFailedPrecondition, input + ": " + rule);
  }
  /// A bug in libdynattn, described by `what`.
  static Status Internal(const std::string& what) {
    return Status(StatusCode::kInternal, "internal error: " + what);
  }
  /// A failed CUDA runtime call: `what` names the call and CUDA's error.
  static Status DeviceError(const std::string& what) {
    return Status(StatusCode::kDeviceError, "CUDA error: " + what);
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace dynattn

/// Returns early from the enclosing function when `expr` is not ok.
#define DYNATTN_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::dynattn::Status dynattn_status_ = (expr);        \
    if (!dynattn_status_.ok()) return dynattn_status_; \
  } while (0)

#endif  // DYNATTN_STATUS_H_
