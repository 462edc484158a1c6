// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The _dynattn extension: the C++ half of the dynattn Python package (python/dynattn/__init__.py
// is the documented surface). It links the public API of libdynattn only.

#include <pybind11/pybind11.h>

#include "dynattn/dynattn.h"
#include "python/src/bindings.h"

namespace dynattn_py {

void Check(const dynattn::Status& status) {
  switch (status.code()) {
    case dynattn::StatusCode::kOk:
      return;
    case dynattn::StatusCode::kInvalidArgument:
      throw py::value_error(status.message());
    case dynattn::StatusCode::kUnsupported:
      throw UnsupportedError(status.message());
    default:
      throw std::runtime_error(status.message());
  }
}

dynattn::Status RunLocked(PyContext* context,
                          const std::function<dynattn::Status(dynattn::Context*)>& call) {
  py::gil_scoped_release release;
  std::lock_guard<std::mutex> lock(context->mutex);
  return call(&context->context);
}

dynattn::Status RunReleased(const std::function<dynattn::Status()>& call) {
  py::gil_scoped_release release;
  return call();
}

}  // namespace dynattn_py

PYBIND11_MODULE(_dynattn, m) {
  namespace py = pybind11;
  m.doc() = "libdynattn bindings (use the dynattn package, not this module)";
  m.attr("__version__") = DYNATTN_VERSION;
  m.def(
      "cpu_target", [] { return std::string(dynattn::CpuTargetName()); },
      "Name of the SIMD target the CPU kernels dispatch to on this machine (e.g. \"AVX2\").");
  py::register_exception<dynattn_py::UnsupportedError>(m, "UnsupportedError", PyExc_ValueError);
  dynattn_py::BindCaches(m);
  dynattn_py::BindOps(m);
}
