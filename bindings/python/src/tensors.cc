// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// DLPack and buffer-protocol tensors as borrowed TensorViews.

#include "bindings/python/src/tensors.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dynattn/op_signatures.h"

namespace dynattn_py {
namespace {

using dynattn::Device;
using dynattn::DType;
using dynattn::TensorView;

// The DLPack exchange ABI (legacy, unversioned capsule "dltensor"): the stable C layout every
// framework exports, written out here from its specification.
struct DLDevice {
  int32_t device_type;  // 1 CPU, 2 CUDA, 3 CUDA host (pinned), 13 CUDA managed, ...
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null = compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

constexpr int32_t kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLCUDAManaged = 13;
constexpr uint8_t kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4;

[[noreturn]] void Fail(const std::string& name, const std::string& rule) {
  throw py::value_error(name + ": " + rule);
}

std::string DlDTypeName(DLDataType t) {
  const char* kinds[] = {"int", "uint", "float", "handle", "bfloat", "complex", "bool"};
  const std::string kind = t.code < 7 ? kinds[t.code] : "code" + std::to_string(t.code) + "_";
  return kind + std::to_string(t.bits) + (t.lanes != 1 ? "x" + std::to_string(t.lanes) : "");
}

constexpr char kSupported[] =
    "float32, float16, bfloat16 (or its uint16 bit patterns), int8, int32, int64, or uint8 for "
    "an fp8 cache given with cache_dtype";

// The index tensors of the ops (roles Index and Offsets in dynattn/op_signatures.h) and of the
// adapters.
bool IsIndexName(const std::string& name) {
  static const char* const kAdapterIndexes[] = {"ksana_table", "requests",     "positions",
                                                "seq_lens",    "slot_mapping", "qo_indptr",
                                                "kv_indptr",   "kv_indices",   "kv_last_page_len"};
  for (const char* index : kAdapterIndexes) {
    if (name == index) return true;
  }
#define DYNATTN_PY_IS_INDEX(member, role)                                                    \
  if ((std::string(#role) == "Index" || std::string(#role) == "Offsets") && name == #member) \
    return true;
  DYNATTN_KEY_VALUE_CACHE_TENSORS(DYNATTN_PY_IS_INDEX)
  DYNATTN_MULTI_HEAD_CACHE_ATTENTION_TENSORS(DYNATTN_PY_IS_INDEX)
  DYNATTN_UNIFIED_ATTENTION_TENSORS(DYNATTN_PY_IS_INDEX)
#undef DYNATTN_PY_IS_INDEX
  return false;
}

// What `name` may be: an index tensor's dtypes, a host float input's, or any tensor's.
std::string SupportedFor(const std::string& name) {
  if (IsIndexName(name)) return "an index tensor is int32 or int64";
  if (name == "sinks" || name == "alibi_slopes" || name == "k_scale" || name == "v_scale") {
    return "it is float32";
  }
  return kSupported;
}

// A uint8 tensor is an fp8 cache's bytes when the caller named their format (`uint8_as`);
// anywhere else it is refused rather than read in a format nobody chose.
DType Uint8DType(const std::optional<DType>& uint8_as, const std::string& name) {
  if (uint8_as.has_value()) return *uint8_as;
  Fail(name,
       "uint8 is accepted only for an fp8 cache, with cache_dtype=\"fp8_e4m3\" or \"fp8_e5m2\"");
}

DType DlDType(DLDataType t, const std::optional<DType>& uint8_as, const std::string& name) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::kF32;
    if (t.code == kDLFloat && t.bits == 16) return DType::kF16;
    if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
    if (t.code == kDLUInt && t.bits == 16) return DType::kBF16;  // NumPy's stand-in for bf16
    if (t.code == kDLUInt && t.bits == 8) return Uint8DType(uint8_as, name);
    if (t.code == kDLInt && t.bits == 8) return DType::kI8;
    if (t.code == kDLInt && t.bits == 32) return DType::kI32;
    if (t.code == kDLInt && t.bits == 64) return DType::kI64;
  }
  Fail(name, "dtype " + DlDTypeName(t) + " is not supported (" + SupportedFor(name) + ")");
}

Device DlDevice(DLDevice d, const std::string& name) {
  if (d.device_type == kDLCPU || d.device_type == kDLCUDAHost) return Device::kCpu;
  if (d.device_type == kDLCUDA || d.device_type == kDLCUDAManaged) return Device::kCuda;
  Fail(name,
       "DLPack device type " + std::to_string(d.device_type) + " is not supported (CPU or CUDA)");
}

std::string Join(const int64_t* values, int n) {
  std::string s = "(";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + (n == 1 ? ",)" : ")");
}

// The activations the library reads and writes row by row: a view of one may be row-strided
// (each token's heads dense, tokens any distance apart), e.g. a column slice of a fused QKV.
bool RowStridable(const std::string& name) {
  return name == "query" || name == "current_key" || name == "current_value" || name == "key" ||
         name == "value" || name == "attn_output";
}

// A view of `shape` after checking `strides` (elements; null = dense): dense row-major, or for
// the row-stridable activations, dense but for the first dimension's stride (which the library
// checks). Extents of 1 may have any stride (frameworks leave them arbitrary).
TensorView DenseView(void* data, DType dtype, int rank, const int64_t* shape,
                     const int64_t* strides, Device device, const std::string& name) {
  if (rank > dynattn::kMaxRank) {
    Fail(name, "rank " + std::to_string(rank) + " exceeds " + std::to_string(dynattn::kMaxRank));
  }
  TensorView view = TensorView::Dense(data, dtype, rank, shape, device);
  if (strides != nullptr) {
    bool empty = false;
    for (int i = 0; i < rank; ++i) empty |= shape[i] == 0;
    int64_t expected = 1;
    for (int i = rank - 1; i >= 0 && !empty; --i) {
      const bool row = i == 0 && RowStridable(name) && strides[0] > 0;
      if (shape[i] != 1 && strides[i] != expected && !row) {
        Fail(name, std::string("must be dense row-major (C-contiguous)") +
                       (RowStridable(name) ? " but for its row stride" : "") + ": shape " +
                       Join(shape, rank) + ", strides " + Join(strides, rank) + " (elements)");
      }
      if (row) view.strides[0] = strides[0];
      expected *= shape[i];
    }
  }
  return view;
}

// Owns an exported DLManagedTensor: its deleter runs when the capsule holding this dies.
py::object TakeDlpack(py::capsule exported, DLManagedTensor** out) {
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(exported.ptr(), "dltensor"));
  if (managed == nullptr) throw py::error_already_set();
  // The consumer renames the capsule so that the producer's capsule destructor leaves it alone.
  if (PyCapsule_SetName(exported.ptr(), "used_dltensor") != 0) throw py::error_already_set();
  *out = managed;
  return py::capsule(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter != nullptr) m->deleter(m);
  });
}

TensorView FromDlpack(py::handle object, const std::string& name,
                      const std::optional<DType>& uint8_as, Keep* keep) {
  py::object exported = object.attr("__dlpack__")();
  if (!PyCapsule_IsValid(exported.ptr(), "dltensor")) {
    Fail(name, "__dlpack__ did not return a \"dltensor\" capsule");
  }
  DLManagedTensor* managed = nullptr;
  keep->Add(TakeDlpack(py::reinterpret_borrow<py::capsule>(exported), &managed));
  const DLTensor& t = managed->dl_tensor;
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  return DenseView(data, DlDType(t.dtype, uint8_as, name), t.ndim, t.shape, t.strides,
                   DlDevice(t.device, name), name);
}

DType BufferDType(const Py_buffer& b, const std::optional<DType>& uint8_as,
                  const std::string& name) {
  std::string format = b.format != nullptr ? b.format : "B";
  if (!format.empty() && (format[0] == '@' || format[0] == '=' || format[0] == '<')) {
    format = format.substr(1);
  }
  if (format == "f" && b.itemsize == 4) return DType::kF32;
  if (format == "e" && b.itemsize == 2) return DType::kF16;
  if (format == "b" && b.itemsize == 1) return DType::kI8;
  if (format == "B" && b.itemsize == 1) return Uint8DType(uint8_as, name);
  if (format == "H" && b.itemsize == 2) return DType::kBF16;  // bf16 bit patterns
  if ((format == "i" || format == "l" || format == "q") && b.itemsize == 4) return DType::kI32;
  if ((format == "i" || format == "l" || format == "q") && b.itemsize == 8) return DType::kI64;
  Fail(name, "buffer format '" + std::string(b.format != nullptr ? b.format : "B") +
                 "' is not supported (" + SupportedFor(name) + ")");
}

TensorView FromBuffer(py::handle object, const std::string& name, bool writable,
                      const std::optional<DType>& uint8_as, Keep* keep) {
  auto* buffer = new Py_buffer();
  const int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(object.ptr(), buffer, flags) != 0) {
    delete buffer;
    PyErr_Clear();
    Fail(name, writable ? "must be a writable buffer (the call writes into it)"
                        : "cannot be read through the buffer protocol");
  }
  keep->Add(py::capsule(buffer, [](void* p) {
    auto* b = static_cast<Py_buffer*>(p);
    PyBuffer_Release(b);
    delete b;
  }));
  const DType dtype = BufferDType(*buffer, uint8_as, name);
  int64_t shape[dynattn::kMaxRank + 1] = {}, strides[dynattn::kMaxRank + 1] = {};
  if (buffer->ndim > dynattn::kMaxRank) {
    Fail(name,
         "rank " + std::to_string(buffer->ndim) + " exceeds " + std::to_string(dynattn::kMaxRank));
  }
  for (int i = 0; i < buffer->ndim; ++i) {
    shape[i] = buffer->shape[i];
    const Py_ssize_t stride = buffer->strides[i];
    // A byte stride that is not a whole number of elements can never be dense.
    strides[i] = stride % buffer->itemsize == 0 ? stride / buffer->itemsize : -1;
  }
  return DenseView(buffer->buf, dtype, buffer->ndim, shape, strides, Device::kCpu, name);
}

// The torch.Tensor type and its dtypes, once torch is imported (null before: then no object
// can be a tensor of it). Looked up once; torch is never imported here.
struct TorchTypes {
  PyObject* tensor = nullptr;
  std::vector<std::pair<PyObject*, int>> dtypes;  // dtype object, DType (or -1: uint8)
};

const TorchTypes* Torch() {
  static TorchTypes types;
  static bool found = false;
  if (found) return &types;
  PyObject* torch = PyDict_GetItemString(PySys_GetObject("modules"), "torch");  // borrowed
  if (torch == nullptr) return nullptr;
  const py::module_ module = py::reinterpret_borrow<py::module_>(torch);
  types.tensor = py::object(module.attr("Tensor")).release().ptr();
  const std::pair<const char*, int> names[] = {{"float32", static_cast<int>(DType::kF32)},
                                               {"float16", static_cast<int>(DType::kF16)},
                                               {"bfloat16", static_cast<int>(DType::kBF16)},
                                               {"int8", static_cast<int>(DType::kI8)},
                                               {"int32", static_cast<int>(DType::kI32)},
                                               {"int64", static_cast<int>(DType::kI64)},
                                               {"uint8", -1}};
  for (const auto& [dtype, value] : names) {
    types.dtypes.emplace_back(py::object(module.attr(dtype)).release().ptr(), value);
  }
  found = true;
  return &types;
}

// A torch.Tensor read through its attributes, which costs a fraction of exporting a DLPack
// capsule (what every Plan.run pays per tensor). False, leaving the object to DLPack (which
// names what is wrong), for anything else: not a tensor, one that requires grad, a dtype or a
// device the library does not take.
bool FromTorch(py::handle object, const std::string& name, const std::optional<DType>& uint8_as,
               TensorView* out) {
  const TorchTypes* torch = Torch();
  if (torch == nullptr) return false;
  const bool tensor = Py_TYPE(object.ptr()) == reinterpret_cast<PyTypeObject*>(torch->tensor) ||
                      PyObject_IsInstance(object.ptr(), torch->tensor) == 1;  // a subclass
  if (!tensor) return false;
  // Attribute names made once (interned): a lookup by C string makes a new one each time.
  // Kept for the process (handles, never released: no destructor runs after Python's end).
  static const py::handle kRequiresGrad = py::str("requires_grad").release(),
                          kIsCuda = py::str("is_cuda").release(),
                          kIsCpu = py::str("is_cpu").release(), kDType = py::str("dtype").release(),
                          kShape = py::str("shape").release(),
                          kStride = py::str("stride").release(),
                          kDataPtr = py::str("data_ptr").release();
  if (object.attr(kRequiresGrad).cast<bool>()) return false;
  const bool cuda = object.attr(kIsCuda).cast<bool>();
  if (!cuda && !object.attr(kIsCpu).cast<bool>()) return false;
  const py::object dtype = object.attr(kDType);
  int code = -2;
  for (const auto& [type, value] : torch->dtypes) {
    if (dtype.ptr() == type) code = value;
  }
  if (code == -2) return false;
  const py::tuple shape = object.attr(kShape);
  const py::tuple strides = object.attr(kStride)();
  const int rank = static_cast<int>(shape.size());
  if (rank > dynattn::kMaxRank) return false;
  int64_t extents[dynattn::kMaxRank] = {}, steps[dynattn::kMaxRank] = {};
  for (int i = 0; i < rank; ++i) {
    extents[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape.ptr(), i));
    steps[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides.ptr(), i));
  }
  void* data = reinterpret_cast<void*>(
      static_cast<uintptr_t>(object.attr(kDataPtr)().cast<unsigned long long>()));
  const DType type = code == -1 ? Uint8DType(uint8_as, name) : static_cast<DType>(code);
  *out = DenseView(data, type, rank, extents, steps, cuda ? Device::kCuda : Device::kCpu, name);
  return true;
}

}  // namespace

void Keep::MoveTo(Keep* other) {
  for (py::object& object : objects_) other->Add(std::move(object));
  objects_.clear();
}

TensorView ToView(py::handle object, const std::string& name, bool writable, Keep* keep,
                  std::optional<DType> uint8_as) {
  if (object.is_none()) return TensorView{};
  TensorView torch_view;
  if (FromTorch(object, name, uint8_as, &torch_view)) {
    keep->Add(py::reinterpret_borrow<py::object>(object));  // alive while the call runs
    return torch_view;
  }
  if (py::hasattr(object, "_dynattn_unallocated")) {
    // An output the Python layer allocates once the call is validated: its shape, and the
    // tensor whose dtype and device it will have. Only plans, which record outputs by shape,
    // accept one.
    const py::tuple spec = object.attr("_dynattn_unallocated");
    const TensorView like = ToView(spec[1], name, false, keep, uint8_as);
    std::vector<int64_t> shape;
    for (const py::handle extent : spec[0]) shape.push_back(extent.cast<int64_t>());
    return TensorView::Dense(nullptr, like.dtype, static_cast<int>(shape.size()), shape.data(),
                             like.device);
  }
  const bool buffer = PyObject_CheckBuffer(object.ptr()) != 0;
  if (py::hasattr(object, "__dlpack__")) {
    try {
      return FromDlpack(object, name, uint8_as, keep);
    } catch (py::error_already_set& e) {
      // NumPy refuses to export read-only arrays through DLPack: read them as buffers instead.
      // The exporter's message only (what() would append a Python traceback).
      if (!buffer) {
        Fail(name, "cannot be exported through DLPack: " + std::string(py::str(e.value())));
      }
    }
  }
  if (buffer) return FromBuffer(object, name, writable, uint8_as, keep);
  Fail(name, "must be a tensor (an object with __dlpack__ or the buffer protocol), got " +
                 std::string(py::str(py::type::handle_of(object).attr("__name__"))));
}

TensorMap ToViews(const py::dict& tensors, const std::vector<std::string>& writable, Keep* keep,
                  std::optional<DType> cache_fp8) {
  TensorMap map;
  for (const auto& item : tensors) {
    const std::string name = py::str(item.first);
    bool out = false;
    for (const std::string& w : writable) out |= w == name;
    map[name] = ToView(item.second, name, out, keep, name == "cache" ? cache_fp8 : std::nullopt);
  }
  return map;
}

std::optional<DType> ParseCacheDType(const py::object& cache_dtype) {
  if (cache_dtype.is_none()) return std::nullopt;
  const std::string text = py::str(cache_dtype);
  if (text == "fp8_e4m3" || text == "float8_e4m3fn") return DType::kF8E4M3;
  if (text == "fp8_e5m2" || text == "float8_e5m2") return DType::kF8E5M2;
  Fail("cache_dtype", "must be None, \"fp8_e4m3\" or \"fp8_e5m2\", got \"" + text + "\"");
}

TensorView Lookup(const TensorMap& map, const std::string& name) {
  auto it = map.find(name);
  return it == map.end() ? TensorView{} : it->second;
}

}  // namespace dynattn_py
