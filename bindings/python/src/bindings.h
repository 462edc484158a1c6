// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What the parts of the _dynattn extension share: the Python-side Context and BlockCache, the
// Status -> exception rule, and each part's registration function.

#ifndef DYNATTN_PYTHON_BINDINGS_H_
#define DYNATTN_PYTHON_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bindings/python/src/tensors.h"
#include "dynattn/dynattn.h"

namespace dynattn_py {

namespace py = pybind11;

/// Raised for StatusCode::kUnsupported; Python's dynattn.UnsupportedError (a ValueError).
class UnsupportedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Returns on OK; otherwise raises ValueError (invalid argument), dynattn.UnsupportedError (a
/// ValueError: valid but unavailable here) or RuntimeError (internal or device errors), each with
/// the library's message.
void Check(const dynattn::Status& status);

/// A Python integer argument (an int, or any object with __index__ such as a NumPy integer) as a
/// C++ integer: TypeError naming `name` when it is not an integer, ValueError when it does not
/// fit (e.g. "window_left: 1099511627776 does not fit a 32-bit int").
int64_t ToInt64(const py::handle& value, const char* name);
int ToInt(const py::handle& value, const char* name);
/// A Python number as a float32: TypeError when not a number; ValueError when a non-zero finite
/// value would become 0 or infinity (1e-50 is not a tiny scale, it is 0).
float ToFloat(const py::handle& value, const char* name);

/// A dynattn::Context and the lock that keeps it to one running call at a time (Python threads
/// may share one; the calls run without the GIL).
struct PyContext {
  explicit PyContext(const dynattn::ContextOptions& options) : context(options) {}
  dynattn::Context context;
  std::mutex mutex;
};

/// Runs `call` on `context` with the GIL released and the context locked.
dynattn::Status RunLocked(PyContext* context,
                          const std::function<dynattn::Status(dynattn::Context*)>& call);

/// Runs `call` with the GIL released.
dynattn::Status RunReleased(const std::function<dynattn::Status()>& call);

/// A BlockCache over Python tensors, and the references that keep those tensors alive.
struct PyBlockCache {
  dynattn::BlockCache cache;
  Keep keep;
  std::string kind;  ///< The function that made it, e.g. "paged_block_cache".
  /// The tensors it is made of, by argument name: a call's other tensors must not overlap them.
  std::vector<std::pair<std::string, dynattn::TensorView>> tensors;

  /// Records `view` as the cache's tensor `name` (absent views are skipped); ValueError when it
  /// shares a byte with a tensor recorded before (e.g. the same tensor as key and value).
  void Add(const std::string& name, const dynattn::TensorView& view);
  /// ValueError naming both when one of the call's `views` shares a byte with the cache.
  void CheckApart(const TensorMap& views) const;
};

void BindCaches(py::module_& m);  ///< BlockCache, the *_block_cache makers, the adapters.
void BindOps(py::module_& m);     ///< Context, Plan, the ops, merge_states, describe.

}  // namespace dynattn_py

#endif  // DYNATTN_PYTHON_BINDINGS_H_
