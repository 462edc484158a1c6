// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The _dynattn extension: the C++ half of the dynattn Python package
// (bindings/python/dynattn/__init__.py is the documented surface). It links the public API of
// libdynattn only.

#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "bindings/python/src/bindings.h"
#include "dynattn/dynattn.h"

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

namespace {

std::string TypeName(const py::handle& value) {
  return py::str(py::type::handle_of(value).attr("__name__"));
}

}  // namespace

int64_t ToInt64(const py::handle& value, const char* name) {
  if (PyFloat_Check(value.ptr()) || !PyIndex_Check(value.ptr())) {
    throw py::type_error(std::string(name) + ": must be an integer, got " + TypeName(value) + " " +
                         std::string(py::repr(value)));
  }
  const py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!index) {  // e.g. an array of several elements
    PyErr_Clear();
    throw py::type_error(std::string(name) + ": must be an integer, got " + TypeName(value));
  }
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0) {
    throw py::value_error(std::string(name) + ": " + std::string(py::str(index)) +
                          " does not fit a 64-bit integer");
  }
  return x;
}

int ToInt(const py::handle& value, const char* name) {
  const int64_t x = ToInt64(value, name);
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) {
    throw py::value_error(std::string(name) + ": " + std::to_string(x) +
                          " does not fit a 32-bit int");
  }
  return static_cast<int>(x);
}

float ToFloat(const py::handle& value, const char* name) {
  if (!PyFloat_Check(value.ptr()) && !PyIndex_Check(value.ptr()) &&
      !py::hasattr(value, "__float__")) {
    throw py::type_error(std::string(name) + ": must be a number, got " + TypeName(value));
  }
  const double x = PyFloat_AsDouble(value.ptr());
  if (x == -1.0 && PyErr_Occurred()) {  // e.g. an array of several elements
    PyErr_Clear();
    throw py::type_error(std::string(name) + ": must be a number, got " + TypeName(value));
  }
  const float f = static_cast<float>(x);
  if (std::isfinite(x) && x != 0.0 && (f == 0.0f || std::isinf(f))) {
    throw py::value_error(std::string(name) + ": " + std::string(py::repr(value)) +
                          " is outside float32's range (it would become " +
                          (f == 0.0f ? "0" : "infinity") + ")");
  }
  return f;
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
