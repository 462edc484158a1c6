// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Python tensors as borrowed dynattn::TensorViews, without copying: any object with `__dlpack__`
// (PyTorch tensors, NumPy >= 1.22 arrays), else the buffer protocol (NumPy arrays, memoryviews).

#ifndef DYNATTN_PYTHON_TENSORS_H_
#define DYNATTN_PYTHON_TENSORS_H_

#include <pybind11/pybind11.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dynattn/dynattn.h"

namespace dynattn_py {

namespace py = pybind11;

/// Keeps what a borrowed view points into alive: the exported DLPack tensors (their deleters run
/// when this is destroyed) and the buffers held through the buffer protocol. Destroy it with the
/// GIL held (the destructors of its members call into Python).
class Keep {
 public:
  /// Holds `object` until this Keep is destroyed.
  void Add(py::object object) {
    if (objects_.empty()) objects_.reserve(8);  // one allocation for a call's tensors
    objects_.push_back(std::move(object));
  }
  /// Moves everything held into `other`.
  void MoveTo(Keep* other);

 private:
  std::vector<py::object> objects_;
};

/// Converts `object` to a dense row-major view named `name` (the name errors use). None gives an
/// absent view. `writable`: the library writes into it (outputs, caches), so a read-only buffer
/// is refused. bfloat16 tensors (DLPack kDLBfloat) and uint16 ones (NumPy's stand-in: their bit
/// patterns) are bf16; a uint8 tensor is accepted only with `uint8_as` (an fp8 cache's format).
/// Raises ValueError naming `name` for an unsupported dtype, device or a non-dense tensor.
dynattn::TensorView ToView(py::handle object, const std::string& name, bool writable, Keep* keep,
                           std::optional<dynattn::DType> uint8_as = std::nullopt);

/// Named tensors of one call, borrowed from a dict name -> tensor (None entries are absent).
using TensorMap = std::map<std::string, dynattn::TensorView>;

/// Borrows every entry of `tensors`; the names in `writable` are written by the call. A uint8
/// "cache" is read as `cache_fp8` when given.
TensorMap ToViews(const py::dict& tensors, const std::vector<std::string>& writable, Keep* keep,
                  std::optional<dynattn::DType> cache_fp8 = std::nullopt);

/// The fp8 DType of a `cache_dtype` argument: None -> none, "fp8_e4m3" / "fp8_e5m2" (or
/// "float8_e4m3fn" / "float8_e5m2"); anything else raises ValueError.
std::optional<dynattn::DType> ParseCacheDType(const py::object& cache_dtype);

/// The view called `name` in `map`, absent when there is none.
dynattn::TensorView Lookup(const TensorMap& map, const std::string& name);

}  // namespace dynattn_py

#endif  // DYNATTN_PYTHON_TENSORS_H_
