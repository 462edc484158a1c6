// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What the parts of the _dynattn extension share: the Python-side Context and BlockCache, the
// Status -> exception rule, and each part's registration function.

#ifndef DYNATTN_PYTHON_BINDINGS_H_
#define DYNATTN_PYTHON_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>

#include "dynattn/dynattn.h"
#include "python/src/tensors.h"

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
};

void BindCaches(py::module_& m);  ///< BlockCache, the *_block_cache makers, the adapters.
void BindOps(py::module_& m);     ///< Context, Plan, the ops, merge_states, describe.

}  // namespace dynattn_py

#endif  // DYNATTN_PYTHON_BINDINGS_H_
