// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The C API (dynattn/c_api.h): each function checks what only C can get wrong (null pointers,
// ranks, enum values), translates its structs to the C++ API's and calls it. No exception leaves
// this file; the message of the last failure is kept per thread.

#include "dynattn/c_api.h"

#include <cstring>
#include <exception>
#include <initializer_list>
#include <new>
#include <string>

#include "dynattn/dynattn.h"
#include "dynattn/op_signatures.h"
#include "dynattn/version.h"

struct dynattn_context_t {
  explicit dynattn_context_t(const dynattn::ContextOptions& options) : context(options) {}
  dynattn::Context context;
};

struct dynattn_plan_t {
  dynattn::Plan plan;
};

namespace dynattn {
namespace {

// ---------------------------------------------------------------------------------------------
// The last error of this thread, and the boundary no exception crosses.

thread_local std::string tls_message;
thread_local const char* tls_fallback = nullptr;  // set when the message itself could not be kept

void Record(const char* first, const char* second = "") noexcept {
  try {
    tls_message.assign(first);
    tls_message.append(second);
    tls_fallback = nullptr;
  } catch (...) {
    tls_fallback = "out of memory (while recording an error message)";
  }
}

static_assert(DYNATTN_STATUS_INVALID_ARGUMENT == static_cast<int>(StatusCode::kInvalidArgument));
static_assert(DYNATTN_STATUS_UNSUPPORTED == static_cast<int>(StatusCode::kUnsupported));
static_assert(DYNATTN_STATUS_INTERNAL == static_cast<int>(StatusCode::kInternal));
static_assert(DYNATTN_STATUS_DEVICE_ERROR == static_cast<int>(StatusCode::kDeviceError));
static_assert(DYNATTN_STATUS_FAILED_PRECONDITION ==
              static_cast<int>(StatusCode::kFailedPrecondition));

dynattn_status_t Finish(const Status& status) noexcept {
  Record(status.message().c_str());
  return static_cast<dynattn_status_t>(status.code());
}

// Runs `body` (returning a Status), recording its message; exceptions become codes.
template <typename Body>
dynattn_status_t Guard(Body&& body) noexcept {
  try {
    return Finish(body());
  } catch (const std::bad_alloc&) {
    Record("out of memory");
    return DYNATTN_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    Record("internal error: unexpected exception: ", e.what());
  } catch (...) {
    Record("internal error: unexpected exception of unknown type");
  }
  return DYNATTN_STATUS_INTERNAL;
}

Status NotNull(const void* pointer, const char* name) {
  return pointer != nullptr ? Status::Ok() : Status::Invalid(name, "must not be null");
}

// ---------------------------------------------------------------------------------------------
// Enums: the C values are the C++ enumerators' (checked here), read as int so that an unknown
// value is never loaded as an enum.

static_assert(DYNATTN_DTYPE_F32 == static_cast<int>(DType::kF32));
static_assert(DYNATTN_DTYPE_F16 == static_cast<int>(DType::kF16));
static_assert(DYNATTN_DTYPE_I8 == static_cast<int>(DType::kI8));
static_assert(DYNATTN_DTYPE_I64 == static_cast<int>(DType::kI64));
static_assert(DYNATTN_DTYPE_I32 == static_cast<int>(DType::kI32));
static_assert(DYNATTN_DTYPE_BF16 == static_cast<int>(DType::kBF16));
static_assert(DYNATTN_DTYPE_F8E4M3 == static_cast<int>(DType::kF8E4M3));
static_assert(DYNATTN_DTYPE_F8E5M2 == static_cast<int>(DType::kF8E5M2));
constexpr int kNumDTypes = 8;
static_assert(DYNATTN_DEVICE_CPU == static_cast<int>(Device::kCpu));
static_assert(DYNATTN_DEVICE_CUDA == static_cast<int>(Device::kCuda));
#define DYNATTN_C_CACHE_ELEM(elem, tag, name, row, c_suffix) \
  static_assert(DYNATTN_CACHE_ELEM_##c_suffix == static_cast<int>(CacheElem::elem));
DYNATTN_CACHE_FORMATS(DYNATTN_C_CACHE_ELEM)
#undef DYNATTN_C_CACHE_ELEM
static_assert(DYNATTN_SCALE_TYPE_F16 == static_cast<int>(ScaleType::kF16));
static_assert(DYNATTN_SCALE_TYPE_F32 == static_cast<int>(ScaleType::kF32));
static_assert(DYNATTN_PAGE_LAYOUT_NHD == static_cast<int>(PageLayout::kNHD));
static_assert(DYNATTN_PAGE_LAYOUT_HND == static_cast<int>(PageLayout::kHND));
static_assert(DYNATTN_PRECISION_EXACT == static_cast<int>(Precision::kExact));
static_assert(DYNATTN_PRECISION_FAST == static_cast<int>(Precision::kFast));

template <typename CEnum>
int RawValue(const CEnum& value) {
  static_assert(sizeof(CEnum) == sizeof(int), "C enums are int-sized");
  int raw;
  std::memcpy(&raw, &value, sizeof raw);
  return raw;
}

// `out` = the C++ enumerator of `value`, one of `count` (0..count-1).
template <typename CppEnum, typename CEnum>
Status ToEnum(const CEnum& value, int count, const std::string& name, const char* type,
              CppEnum* out) {
  const int raw = RawValue(value);
  if (raw < 0 || raw >= count) {
    return Status::Invalid(name, "unknown " + std::string(type) + " value " + std::to_string(raw));
  }
  *out = static_cast<CppEnum>(raw);
  return Status::Ok();
}

template <typename CEnum, typename CppEnum>
CEnum FromEnum(CppEnum value) {
  return static_cast<CEnum>(static_cast<int>(value));
}

// ---------------------------------------------------------------------------------------------
// Tensors.

Status ToTensor(const dynattn_tensor_t& in, const std::string& name, TensorView* out) {
  if (in.rank == -1) {
    *out = TensorView();
    return Status::Ok();
  }
  if (in.rank < -1 || in.rank > kMaxRank) {
    return Status::Invalid(
        name, "rank " + std::to_string(in.rank) + " is out of range [-1, 6] (-1: absent)");
  }
  TensorView view;
  DYNATTN_RETURN_IF_ERROR(
      ToEnum(in.dtype, kNumDTypes, name + ".dtype", "dynattn_dtype_t", &view.dtype));
  DYNATTN_RETURN_IF_ERROR(ToEnum(in.device, 2, name + ".device", "dynattn_device_t", &view.device));
  view.data = in.data;
  view.rank = in.rank;
  for (int i = 0; i < in.rank; ++i) {
    view.shape[i] = in.shape[i];
    view.strides[i] = in.strides[i];
  }
  *out = view;
  return Status::Ok();
}

// A tensor given by pointer: null reads as absent.
Status ToOptionalTensor(const dynattn_tensor_t* in, const char* name, TensorView* out) {
  if (in == nullptr) {
    *out = TensorView();
    return Status::Ok();
  }
  return ToTensor(*in, name, out);
}

void MakeAbsent(dynattn_tensor_t* tensor) {
  std::memset(tensor, 0, sizeof *tensor);
  tensor->rank = -1;
}

struct TensorField {
  const char* name;
  const dynattn_tensor_t* in;
  TensorView* out;
};

Status ToTensors(std::initializer_list<TensorField> fields) {
  for (const TensorField& field : fields) {
    DYNATTN_RETURN_IF_ERROR(ToTensor(*field.in, field.name, field.out));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Caches.

// The fields a C struct and its C++ struct share, by name: copied one way or the other.
// clang-format off
#define DYNATTN_CACHE_PLANE_FIELDS(X)                                                      \
  X(data) X(slot_stride) X(head_stride) X(scale) X(scale_slot_stride) X(scale_head_stride) \
  X(tensor_scale) X(dim_stride) X(slots_per_tile) X(tile_stride)
// clang-format on
#define DYNATTN_CACHE_DESC_SIZES(X) \
  X(quant_group) X(num_kv_heads) X(head_dim) X(head_dim_v) X(num_slots)
#define DYNATTN_BLOCK_CACHE_SIZES(X) X(block_size) X(block_stride) X(num_blocks)
// One attribute of an attribute table (dynattn/op_signatures.h), copied between the C and C++
// structs, which name it alike.
#define DYNATTN_COPY_ATTR(member) to.member = in.member;

static_assert(sizeof(CachePlane) == sizeof(dynattn_cache_plane_t),
              "a cache plane field that DYNATTN_CACHE_PLANE_FIELDS does not copy");

// A struct whose C and C++ forms share the fields `LIST` names: ToT (C -> C++) and FromT.
#define DYNATTN_COPY_FUNCTIONS(T, CType, LIST) \
  T To##T(const CType& in) {                   \
    T to;                                      \
    LIST(DYNATTN_COPY_ATTR)                    \
    return to;                                 \
  }                                            \
  CType From##T(const T& in) {                 \
    CType to;                                  \
    LIST(DYNATTN_COPY_ATTR)                    \
    return to;                                 \
  }

DYNATTN_COPY_FUNCTIONS(CachePlane, dynattn_cache_plane_t, DYNATTN_CACHE_PLANE_FIELDS)
DYNATTN_COPY_FUNCTIONS(CacheAttrs, dynattn_cache_attrs_t, DYNATTN_CACHE_ATTRS)
DYNATTN_COPY_FUNCTIONS(AttentionAttrs, dynattn_attention_attrs_t, DYNATTN_ATTENTION_ATTRS)

Status ToCacheDesc(const dynattn_cache_desc_t& in, const std::string& name, CacheDesc* out) {
  CacheDesc to;
  DYNATTN_RETURN_IF_ERROR(
      ToEnum(in.elem, kNumCacheElems, name + ".elem", "dynattn_cache_elem_t", &to.elem));
  DYNATTN_RETURN_IF_ERROR(
      ToEnum(in.scale_type, 2, name + ".scale_type", "dynattn_scale_type_t", &to.scale_type));
  DYNATTN_RETURN_IF_ERROR(ToEnum(in.device, 2, name + ".device", "dynattn_device_t", &to.device));
  DYNATTN_CACHE_DESC_SIZES(DYNATTN_COPY_ATTR)
  to.key = ToCachePlane(in.key);
  to.value = ToCachePlane(in.value);
  *out = to;
  return Status::Ok();
}

dynattn_cache_desc_t FromCacheDesc(const CacheDesc& in) {
  dynattn_cache_desc_t to;
  to.elem = FromEnum<dynattn_cache_elem_t>(in.elem);
  to.scale_type = FromEnum<dynattn_scale_type_t>(in.scale_type);
  to.device = FromEnum<dynattn_device_t>(in.device);
  DYNATTN_CACHE_DESC_SIZES(DYNATTN_COPY_ATTR)
  to.key = FromCachePlane(in.key);
  to.value = FromCachePlane(in.value);
  return to;
}

Status ToBlockCache(const dynattn_block_cache_t& in, BlockCache* out) {
  BlockCache to;
  DYNATTN_RETURN_IF_ERROR(ToCacheDesc(in.cache, "cache", &to.cache));
  DYNATTN_BLOCK_CACHE_SIZES(DYNATTN_COPY_ATTR)
  *out = to;
  return Status::Ok();
}

dynattn_block_cache_t FromBlockCache(const BlockCache& in) {
  dynattn_block_cache_t to;
  to.cache = FromCacheDesc(in.cache);
  DYNATTN_BLOCK_CACHE_SIZES(DYNATTN_COPY_ATTR)
  return to;
}

// The inputs of the PMX cache views: the cache tensor, its optional scale, the cache attributes.
struct PmxCacheInputs {
  TensorView cache, scale;
  CacheAttrs attrs;
};

// Checks the pointers (`out` too, the view's destination), then converts the inputs.
Status ToPmxCacheInputs(const dynattn_tensor_t* cache, const dynattn_tensor_t* scale,
                        const dynattn_cache_attrs_t* attrs, const void* out, PmxCacheInputs* in) {
  DYNATTN_RETURN_IF_ERROR(NotNull(cache, "cache"));
  DYNATTN_RETURN_IF_ERROR(NotNull(attrs, "attrs"));
  DYNATTN_RETURN_IF_ERROR(NotNull(out, "out"));
  DYNATTN_RETURN_IF_ERROR(ToTensor(*cache, "cache", &in->cache));
  DYNATTN_RETURN_IF_ERROR(ToOptionalTensor(scale, "scale", &in->scale));
  in->attrs = ToCacheAttrs(*attrs);
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------------
// Attributes and options.

// The tier a C attribute struct asks for (`name` names the field in errors). By reference: a
// value outside the C enum may not be loaded as one (ToEnum reads its bytes).
Status ToPrecision(const dynattn_precision_t& in, const char* name, Precision* out) {
  return ToEnum(in, 2, name, "dynattn_precision_t", out);
}

Status ToAttrs(const dynattn_attention_attrs_t* in, AttentionAttrs* out) {
  DYNATTN_RETURN_IF_ERROR(NotNull(in, "attrs"));
  *out = ToAttentionAttrs(*in);
  return ToPrecision(in->precision, "attrs.precision", &out->precision);
}

Status ToAttrs(const dynattn_key_value_cache_attrs_t* in, KeyValueCacheAttrs* out) {
  DYNATTN_RETURN_IF_ERROR(NotNull(in, "attrs"));
  out->cache = ToCacheAttrs(in->cache);
  out->num_repeat = in->num_repeat;
  return Status::Ok();
}

Status ToAttrs(const dynattn_multi_head_cache_attention_attrs_t* in,
               MultiHeadCacheAttentionAttrs* out) {
  DYNATTN_RETURN_IF_ERROR(NotNull(in, "attrs"));
  out->attention = ToAttentionAttrs(in->attention);
  out->cache = ToCacheAttrs(in->cache);
  return ToPrecision(in->attention.precision, "attrs.attention.precision",
                     &out->attention.precision);
}

Status ToAttrs(const dynattn_unified_attention_attrs_t* c_attrs, UnifiedAttentionAttrs* out) {
  DYNATTN_RETURN_IF_ERROR(NotNull(c_attrs, "attrs"));
  const dynattn_unified_attention_attrs_t& in = *c_attrs;
  UnifiedAttentionAttrs& to = *out;
  DYNATTN_UNIFIED_ATTENTION_ATTRS(DYNATTN_COPY_ATTR)
  return ToPrecision(in.precision, "attrs.precision", &to.precision);
}

// Null options: the defaults.
RunOptions ToRunOptions(const dynattn_run_options_t* in) {
  RunOptions options;
  if (in != nullptr) {
    options.num_threads = in->num_threads;
    options.pin_threads = in->pin_threads;
  }
  return options;
}

// ---------------------------------------------------------------------------------------------
// Arguments. Each call's C++ args, with the storage their pointers refer to.

/// An op's C++ arguments and the storage their pointers refer to: the cache descriptor of the
/// cache ops, the block cache of unified attention (each op uses what it needs).
template <class Args>
struct Call {
  Args args;
  CacheDesc desc;
  BlockCache cache;
};

// `*desc_out` and `*pointer_out` from an optional C descriptor.
Status ToOptionalDesc(const dynattn_cache_desc_t* in, CacheDesc* desc_out,
                      const CacheDesc** pointer_out) {
  if (in == nullptr) return Status::Ok();
  DYNATTN_RETURN_IF_ERROR(ToCacheDesc(*in, "cache_desc", desc_out));
  *pointer_out = desc_out;
  return Status::Ok();
}

// One tensor of an op table (dynattn/op_signatures.h): the C struct's member `in->m` into the
// C++ struct's `a.m`, named m.
#define DYNATTN_C_TENSOR(member, role) {#member, &in->member, &a.member},

Status ToArgs(const dynattn_key_value_cache_args_t* in, Call<KeyValueCacheArgs>* out) {
  DYNATTN_RETURN_IF_ERROR(NotNull(in, "args"));
  KeyValueCacheArgs& a = out->args;
  DYNATTN_RETURN_IF_ERROR(ToTensors({DYNATTN_KEY_VALUE_CACHE_TENSORS(DYNATTN_C_TENSOR)}));
  return ToOptionalDesc(in->cache_desc, &out->desc, &a.cache_desc);
}

Status ToArgs(const dynattn_multi_head_attention_args_t* in, Call<MultiHeadAttentionArgs>* out) {
  DYNATTN_RETURN_IF_ERROR(NotNull(in, "args"));
  MultiHeadAttentionArgs& a = out->args;
  return ToTensors({DYNATTN_MULTI_HEAD_ATTENTION_TENSORS(DYNATTN_C_TENSOR)});
}

Status ToArgs(const dynattn_multi_head_cache_attention_args_t* in,
              Call<MultiHeadCacheAttentionArgs>* out) {
  DYNATTN_RETURN_IF_ERROR(NotNull(in, "args"));
  MultiHeadCacheAttentionArgs& a = out->args;
  DYNATTN_RETURN_IF_ERROR(
      ToTensors({DYNATTN_MULTI_HEAD_CACHE_ATTENTION_TENSORS(DYNATTN_C_TENSOR)}));
  return ToOptionalDesc(in->cache_desc, &out->desc, &a.cache_desc);
}

Status ToArgs(const dynattn_unified_attention_args_t* in, Call<UnifiedAttentionArgs>* out) {
  DYNATTN_RETURN_IF_ERROR(NotNull(in, "args"));
  UnifiedAttentionArgs& a = out->args;
  DYNATTN_RETURN_IF_ERROR(ToTensors({DYNATTN_UNIFIED_ATTENTION_TENSORS(DYNATTN_C_TENSOR)}));
  DYNATTN_RETURN_IF_ERROR(NotNull(in->cache, "cache"));
  DYNATTN_RETURN_IF_ERROR(ToBlockCache(*in->cache, &out->cache));
  a.cache = &out->cache;
  return Status::Ok();
}

Status ToArgs(const dynattn_merge_states_args_t* in, MergeStatesArgs* out) {
  DYNATTN_RETURN_IF_ERROR(NotNull(in, "args"));
  return ToTensors({{"out", &in->out, &out->out},
                    {"lse", &in->lse, &out->lse},
                    {"acc", &in->acc, &out->acc},
                    {"max", &in->max, &out->max},
                    {"sum", &in->sum, &out->sum},
                    {"merged_out", &in->merged_out, &out->merged_out},
                    {"merged_lse", &in->merged_lse, &out->merged_lse}});
}

void FromSummary(const UnifiedStepSummary& in, dynattn_unified_step_summary_t* out) {
  std::memset(out->phase, 0, sizeof out->phase);
  in.phase.copy(out->phase, sizeof out->phase - 1);
  out->query_len = in.query_len;
  out->num_shared_blocks = in.num_shared_blocks;
  out->num_unique_blocks = in.num_unique_blocks;
  out->num_logits = in.num_logits;
  out->num_work_items = in.num_work_items;
  out->cache_bytes_read = in.cache_bytes_read;
}

// Fills `*out` (checked non-null, named `name`) with `value`.
template <typename T>
dynattn_status_t Init(T* out, const char* name, const T& value) {
  return Guard([&]() -> Status {
    DYNATTN_RETURN_IF_ERROR(NotNull(out, name));
    *out = value;
    return Status::Ok();
  });
}

// Runs `call(plan)` on a checked plan handle.
template <typename Call>
dynattn_status_t WithPlan(const dynattn_plan_t* plan, Call&& call) {
  return Guard([&]() -> Status {
    DYNATTN_RETURN_IF_ERROR(NotNull(plan, "plan"));
    return call(plan->plan);
  });
}

// `*out` = get(x) for a checked handle `x` (a plan or a context) and a checked `out`.
template <typename Handle, typename T, typename Get>
dynattn_status_t Getter(const Handle* handle, const char* handle_name, T* out, Get&& get) {
  return Guard([&]() -> Status {
    DYNATTN_RETURN_IF_ERROR(NotNull(handle, handle_name));
    DYNATTN_RETURN_IF_ERROR(NotNull(out, "out"));
    *out = get(*handle);
    return Status::Ok();
  });
}

// An op's one-shot call: attrs and args translated, then `op`.
template <class CAttrs, class CArgs, class Attrs, class Args>
dynattn_status_t CallOp(const CAttrs* attrs, const CArgs* args,
                        const dynattn_run_options_t* options,
                        Status (*op)(const Attrs&, const Args&, const RunOptions&)) {
  return Guard([&]() -> Status {
    Attrs cpp_attrs;
    Call<Args> call;
    DYNATTN_RETURN_IF_ERROR(ToAttrs(attrs, &cpp_attrs));
    DYNATTN_RETURN_IF_ERROR(ToArgs(args, &call));
    return op(cpp_attrs, call.args, ToRunOptions(options));
  });
}

// An op's plan_*: the plan handle first, then attrs and args, then `plan_op`.
template <class CAttrs, class CArgs, class Attrs, class Args>
dynattn_status_t PlanOp(const CAttrs* attrs, const CArgs* args, dynattn_plan_t* plan,
                        Status (*plan_op)(const Attrs&, const Args&, Plan*)) {
  return Guard([&]() -> Status {
    Attrs cpp_attrs;
    Call<Args> call;
    DYNATTN_RETURN_IF_ERROR(NotNull(plan, "plan"));
    DYNATTN_RETURN_IF_ERROR(ToAttrs(attrs, &cpp_attrs));
    DYNATTN_RETURN_IF_ERROR(ToArgs(args, &call));
    return plan_op(cpp_attrs, call.args, &plan->plan);
  });
}

// A run_*_layer call's attributes.
Status ToLayer(const dynattn_layer_attrs_t* in, LayerAttrs* out) {
  out->window_left = in->window_left;
  out->logits_soft_cap = in->logits_soft_cap;
  out->softmax_scale = in->softmax_scale;
  return ToTensor(in->sinks, "sinks", &out->sinks);
}

// An op's run_*: the plan and context handles, then args and the layer's attributes (when not
// null), then `run_op`.
template <class CArgs, class Args>
dynattn_status_t RunOp(const dynattn_plan_t* plan, const CArgs* args, dynattn_context_t* context,
                       Status (*run_op)(const Plan&, const Args&, Context*, const LayerAttrs*),
                       const dynattn_layer_attrs_t* layer = nullptr) {
  return WithPlan(plan, [&](const Plan& p) -> Status {
    Call<Args> call;
    LayerAttrs layer_attrs;
    DYNATTN_RETURN_IF_ERROR(NotNull(context, "context"));
    DYNATTN_RETURN_IF_ERROR(ToArgs(args, &call));
    if (layer != nullptr) DYNATTN_RETURN_IF_ERROR(ToLayer(layer, &layer_attrs));
    return run_op(p, call.args, &context->context, layer != nullptr ? &layer_attrs : nullptr);
  });
}

// The C defaults of dynattn_attention_attrs_t: AttentionAttrs' (its enum field converted).
dynattn_attention_attrs_t DefaultAttentionAttrs() {
  dynattn_attention_attrs_t to = FromAttentionAttrs(AttentionAttrs());
  to.precision = FromEnum<dynattn_precision_t>(AttentionAttrs().precision);
  return to;
}

}  // namespace
}  // namespace dynattn

using namespace dynattn;  // NOLINT: this file is the C boundary of namespace dynattn

// -----------------------------------------------------------------------------------------------
// Status, version, machine.

const char* dynattn_last_error_message(void) {
  return tls_fallback != nullptr ? tls_fallback : tls_message.c_str();
}

const char* dynattn_status_name(dynattn_status_t status) {
  switch (RawValue(status)) {
    case DYNATTN_STATUS_OK:
      return "OK";
    case DYNATTN_STATUS_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case DYNATTN_STATUS_UNSUPPORTED:
      return "UNSUPPORTED";
    case DYNATTN_STATUS_INTERNAL:
      return "INTERNAL";
    case DYNATTN_STATUS_DEVICE_ERROR:
      return "DEVICE_ERROR";
    case DYNATTN_STATUS_OUT_OF_MEMORY:
      return "OUT_OF_MEMORY";
    case DYNATTN_STATUS_FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    default:
      return "UNKNOWN";
  }
}

const char* dynattn_version(void) { return DYNATTN_VERSION; }

const char* dynattn_cpu_target_name(void) { return CpuTargetName(); }

uint16_t dynattn_float_to_half(float value) { return FloatToHalf(value); }

float dynattn_half_to_float(uint16_t half) { return HalfToFloat(half); }

// -----------------------------------------------------------------------------------------------
// Tensors.

dynattn_status_t dynattn_tensor_dense(const void* data, dynattn_dtype_t dtype, int rank,
                                      const int64_t* shape, dynattn_device_t device,
                                      dynattn_tensor_t* out) {
  return Guard([&]() -> Status {
    DYNATTN_RETURN_IF_ERROR(NotNull(out, "out"));
    if (rank < 0 || rank > kMaxRank) {
      return Status::Invalid("rank", std::to_string(rank) + " is out of range [0, 6]");
    }
    if (rank > 0) DYNATTN_RETURN_IF_ERROR(NotNull(shape, "shape"));
    DType cpp_dtype = DType::kF32;
    Device cpp_device = Device::kCpu;
    DYNATTN_RETURN_IF_ERROR(ToEnum(dtype, kNumDTypes, "dtype", "dynattn_dtype_t", &cpp_dtype));
    DYNATTN_RETURN_IF_ERROR(ToEnum(device, 2, "device", "dynattn_device_t", &cpp_device));
    const TensorView view = TensorView::Dense(data, cpp_dtype, rank, shape, cpp_device);
    dynattn_tensor_t tensor;
    MakeAbsent(&tensor);
    tensor.data = view.data;
    tensor.dtype = dtype;
    tensor.rank = view.rank;
    std::memcpy(tensor.shape, view.shape, sizeof tensor.shape);
    std::memcpy(tensor.strides, view.strides, sizeof tensor.strides);
    tensor.device = device;
    *out = tensor;
    return Status::Ok();
  });
}

dynattn_status_t dynattn_tensor_absent(dynattn_tensor_t* tensor) {
  return Guard([&]() -> Status {
    DYNATTN_RETURN_IF_ERROR(NotNull(tensor, "tensor"));
    MakeAbsent(tensor);
    return Status::Ok();
  });
}

// -----------------------------------------------------------------------------------------------
// Caches.

dynattn_status_t dynattn_cache_attrs_init(dynattn_cache_attrs_t* attrs) {
  return Init(attrs, "attrs", FromCacheAttrs(CacheAttrs()));
}

dynattn_status_t dynattn_make_pmx_cache_desc(const dynattn_tensor_t* cache,
                                             const dynattn_tensor_t* scale,
                                             const dynattn_cache_attrs_t* attrs, int num_kv_heads,
                                             int head_dim, dynattn_cache_desc_t* out) {
  return Guard([&]() -> Status {
    PmxCacheInputs in;
    DYNATTN_RETURN_IF_ERROR(ToPmxCacheInputs(cache, scale, attrs, out, &in));
    CacheDesc desc;
    DYNATTN_RETURN_IF_ERROR(
        MakePmxCacheDesc(in.cache, in.scale, in.attrs, num_kv_heads, head_dim, &desc));
    *out = FromCacheDesc(desc);
    return Status::Ok();
  });
}

dynattn_status_t dynattn_make_pmx_block_cache(const dynattn_tensor_t* cache,
                                              const dynattn_tensor_t* scale,
                                              const dynattn_cache_attrs_t* attrs, int num_kv_heads,
                                              int head_dim, int block_size,
                                              dynattn_block_cache_t* out) {
  return Guard([&]() -> Status {
    PmxCacheInputs in;
    DYNATTN_RETURN_IF_ERROR(ToPmxCacheInputs(cache, scale, attrs, out, &in));
    BlockCache block_cache;
    DYNATTN_RETURN_IF_ERROR(MakePmxBlockCache(in.cache, in.scale, in.attrs, num_kv_heads, head_dim,
                                              block_size, &block_cache));
    *out = FromBlockCache(block_cache);
    return Status::Ok();
  });
}

dynattn_status_t dynattn_make_paged_block_cache(
    const dynattn_tensor_t* key, const dynattn_tensor_t* value, const dynattn_tensor_t* key_scale,
    const dynattn_tensor_t* value_scale, dynattn_page_layout_t layout,
    const dynattn_cache_format_t* format, dynattn_block_cache_t* out) {
  return Guard([&]() -> Status {
    DYNATTN_RETURN_IF_ERROR(NotNull(key, "key"));
    DYNATTN_RETURN_IF_ERROR(NotNull(value, "value"));
    DYNATTN_RETURN_IF_ERROR(NotNull(format, "format"));
    DYNATTN_RETURN_IF_ERROR(NotNull(out, "out"));
    TensorView k, v, ks, vs;
    DYNATTN_RETURN_IF_ERROR(ToTensor(*key, "key", &k));
    DYNATTN_RETURN_IF_ERROR(ToTensor(*value, "value", &v));
    DYNATTN_RETURN_IF_ERROR(ToOptionalTensor(key_scale, "key_scale", &ks));
    DYNATTN_RETURN_IF_ERROR(ToOptionalTensor(value_scale, "value_scale", &vs));
    PageLayout cpp_layout = PageLayout::kNHD;
    DYNATTN_RETURN_IF_ERROR(ToEnum(layout, 2, "layout", "dynattn_page_layout_t", &cpp_layout));
    CacheFormat cpp_format;
    cpp_format.quant_bit = format->quant_bit;
    cpp_format.quant_group = format->quant_group;
    BlockCache block_cache;
    DYNATTN_RETURN_IF_ERROR(
        MakePagedBlockCache(k, v, ks, vs, cpp_layout, cpp_format, &block_cache));
    *out = FromBlockCache(block_cache);
    return Status::Ok();
  });
}

// -----------------------------------------------------------------------------------------------
// Defaults.

dynattn_status_t dynattn_run_options_init(dynattn_run_options_t* options) {
  dynattn_run_options_t value;
  value.num_threads = RunOptions().num_threads;
  value.pin_threads = RunOptions().pin_threads;
  return Init(options, "options", value);
}

dynattn_status_t dynattn_attention_attrs_init(dynattn_attention_attrs_t* attrs) {
  return Init(attrs, "attrs", DefaultAttentionAttrs());
}

dynattn_status_t dynattn_key_value_cache_attrs_init(dynattn_key_value_cache_attrs_t* attrs) {
  const KeyValueCacheAttrs defaults;
  dynattn_key_value_cache_attrs_t value;
  value.cache = FromCacheAttrs(defaults.cache);
  value.num_repeat = defaults.num_repeat;
  return Init(attrs, "attrs", value);
}

dynattn_status_t dynattn_multi_head_cache_attention_attrs_init(
    dynattn_multi_head_cache_attention_attrs_t* attrs) {
  const MultiHeadCacheAttentionAttrs defaults;
  dynattn_multi_head_cache_attention_attrs_t value;
  value.attention = DefaultAttentionAttrs();
  value.cache = FromCacheAttrs(defaults.cache);
  return Init(attrs, "attrs", value);
}

dynattn_status_t dynattn_unified_attention_attrs_init(dynattn_unified_attention_attrs_t* attrs) {
  const UnifiedAttentionAttrs in;
  dynattn_unified_attention_attrs_t to;
  DYNATTN_UNIFIED_ATTENTION_ATTRS(DYNATTN_COPY_ATTR)
  to.precision = FromEnum<dynattn_precision_t>(in.precision);
  return Init(attrs, "attrs", to);
}

// An args struct with every tensor absent: each C args struct is tensors and pointers only, so
// it is zeroed, then each tensor is marked absent.
#define DYNATTN_C_ARGS_INIT(type, ...)                                                          \
  dynattn_status_t type##_init(type##_t* args) {                                                \
    return Guard([&]() -> Status {                                                              \
      DYNATTN_RETURN_IF_ERROR(NotNull(args, "args"));                                           \
      std::memset(args, 0, sizeof *args);                                                       \
      for (dynattn_tensor_t * tensor : std::initializer_list<dynattn_tensor_t*>{__VA_ARGS__}) { \
        if (tensor != nullptr) MakeAbsent(tensor);                                              \
      }                                                                                         \
      return Status::Ok();                                                                      \
    });                                                                                         \
  }

// The op tables' tensors, after a leading null that the loop skips.
#define DYNATTN_C_TENSOR_ADDRESS(member, role) , &args->member
DYNATTN_C_ARGS_INIT(dynattn_key_value_cache_args,
                    nullptr DYNATTN_KEY_VALUE_CACHE_TENSORS(DYNATTN_C_TENSOR_ADDRESS))
DYNATTN_C_ARGS_INIT(dynattn_multi_head_attention_args,
                    nullptr DYNATTN_MULTI_HEAD_ATTENTION_TENSORS(DYNATTN_C_TENSOR_ADDRESS))
DYNATTN_C_ARGS_INIT(dynattn_multi_head_cache_attention_args,
                    nullptr DYNATTN_MULTI_HEAD_CACHE_ATTENTION_TENSORS(DYNATTN_C_TENSOR_ADDRESS))
DYNATTN_C_ARGS_INIT(dynattn_unified_attention_args,
                    nullptr DYNATTN_UNIFIED_ATTENTION_TENSORS(DYNATTN_C_TENSOR_ADDRESS))
#undef DYNATTN_C_TENSOR_ADDRESS
DYNATTN_C_ARGS_INIT(dynattn_merge_states_args, &args->out, &args->lse, &args->acc, &args->max,
                    &args->sum, &args->merged_out, &args->merged_lse)

#undef DYNATTN_C_ARGS_INIT

// -----------------------------------------------------------------------------------------------
// One-shot ops.

dynattn_status_t dynattn_key_value_cache(const dynattn_key_value_cache_attrs_t* attrs,
                                         const dynattn_key_value_cache_args_t* args,
                                         const dynattn_run_options_t* options) {
  return CallOp(attrs, args, options, &KeyValueCache);
}

dynattn_status_t dynattn_multi_head_attention(const dynattn_attention_attrs_t* attrs,
                                              const dynattn_multi_head_attention_args_t* args,
                                              const dynattn_run_options_t* options) {
  return CallOp(attrs, args, options, &MultiHeadAttention);
}

dynattn_status_t dynattn_multi_head_cache_attention(
    const dynattn_multi_head_cache_attention_attrs_t* attrs,
    const dynattn_multi_head_cache_attention_args_t* args, const dynattn_run_options_t* options) {
  return CallOp(attrs, args, options, &MultiHeadCacheAttention);
}

dynattn_status_t dynattn_unified_attention(const dynattn_unified_attention_attrs_t* attrs,
                                           const dynattn_unified_attention_args_t* args,
                                           const dynattn_run_options_t* options) {
  return CallOp(attrs, args, options, &UnifiedAttention);
}

dynattn_status_t dynattn_describe_unified_step(const dynattn_unified_attention_attrs_t* attrs,
                                               const dynattn_unified_attention_args_t* args,
                                               dynattn_unified_step_summary_t* summary) {
  return Guard([&]() -> Status {
    UnifiedAttentionAttrs cpp_attrs;
    Call<UnifiedAttentionArgs> call;
    UnifiedStepSummary cpp_summary;
    DYNATTN_RETURN_IF_ERROR(ToAttrs(attrs, &cpp_attrs));
    DYNATTN_RETURN_IF_ERROR(ToArgs(args, &call));
    DYNATTN_RETURN_IF_ERROR(NotNull(summary, "summary"));
    DYNATTN_RETURN_IF_ERROR(DescribeUnifiedStep(cpp_attrs, call.args, &cpp_summary));
    FromSummary(cpp_summary, summary);
    return Status::Ok();
  });
}

dynattn_status_t dynattn_merge_states(const dynattn_merge_states_args_t* args,
                                      const dynattn_run_options_t* options) {
  return Guard([&]() -> Status {
    MergeStatesArgs cpp_args;
    DYNATTN_RETURN_IF_ERROR(ToArgs(args, &cpp_args));
    return MergeStates(cpp_args, ToRunOptions(options));
  });
}

// -----------------------------------------------------------------------------------------------
// Contexts.

dynattn_status_t dynattn_context_options_init(dynattn_context_options_t* options) {
  const ContextOptions defaults;
  dynattn_context_options_t value;
  value.num_threads = defaults.num_threads;
  value.cuda_stream = defaults.cuda_stream;
  value.pin_threads = defaults.pin_threads;
  return Init(options, "options", value);
}

dynattn_status_t dynattn_context_create(const dynattn_context_options_t* options,
                                        dynattn_context_t** out) {
  return Guard([&]() -> Status {
    DYNATTN_RETURN_IF_ERROR(NotNull(out, "out"));
    ContextOptions cpp_options;
    if (options != nullptr) {
      cpp_options.num_threads = options->num_threads;
      cpp_options.cuda_stream = options->cuda_stream;
      cpp_options.pin_threads = options->pin_threads;
    }
    DYNATTN_RETURN_IF_ERROR(ValidateContextOptions(cpp_options));
    *out = new dynattn_context_t(cpp_options);
    return Status::Ok();
  });
}

void dynattn_context_destroy(dynattn_context_t* context) { delete context; }

dynattn_status_t dynattn_context_num_threads(const dynattn_context_t* context, int* out) {
  return Getter(context, "context", out,
                [](const dynattn_context_t& c) { return c.context.options().num_threads; });
}

dynattn_status_t dynattn_context_workspace_bytes(const dynattn_context_t* context, size_t* out) {
  return Getter(context, "context", out,
                [](const dynattn_context_t& c) { return c.context.workspace_bytes(); });
}

// -----------------------------------------------------------------------------------------------
// Plans.

dynattn_status_t dynattn_plan_create(dynattn_plan_t** out) {
  return Guard([&]() -> Status {
    DYNATTN_RETURN_IF_ERROR(NotNull(out, "out"));
    *out = new dynattn_plan_t();
    return Status::Ok();
  });
}

void dynattn_plan_destroy(dynattn_plan_t* plan) { delete plan; }

dynattn_status_t dynattn_plan_op(const dynattn_plan_t* plan, const char** out) {
  return Getter(plan, "plan", out, [](const dynattn_plan_t& p) { return p.plan.op(); });
}

dynattn_status_t dynattn_plan_backend(const dynattn_plan_t* plan, const char** out) {
  return Getter(plan, "plan", out, [](const dynattn_plan_t& p) { return p.plan.backend(); });
}

dynattn_status_t dynattn_plan_precision(const dynattn_plan_t* plan, dynattn_precision_t* out) {
  return Getter(plan, "plan", out, [](const dynattn_plan_t& p) {
    return FromEnum<dynattn_precision_t>(p.plan.precision());
  });
}

dynattn_status_t dynattn_plan_workspace_bytes(const dynattn_plan_t* plan, size_t* out) {
  return Getter(plan, "plan", out,
                [](const dynattn_plan_t& p) { return p.plan.workspace_bytes(); });
}

dynattn_status_t dynattn_plan_unified_summary(const dynattn_plan_t* plan,
                                              dynattn_unified_step_summary_t* out) {
  return WithPlan(plan, [&](const Plan& p) -> Status {
    DYNATTN_RETURN_IF_ERROR(NotNull(out, "out"));
    const UnifiedStepSummary* summary = p.unified_summary();
    if (summary == nullptr) return Status::Invalid("plan", "is not a UnifiedAttention plan");
    FromSummary(*summary, out);
    return Status::Ok();
  });
}

dynattn_status_t dynattn_plan_layer_attrs(const dynattn_plan_t* plan, dynattn_layer_attrs_t* out) {
  return WithPlan(plan, [&](const Plan& p) -> Status {
    DYNATTN_RETURN_IF_ERROR(NotNull(out, "out"));
    const LayerAttrs layer = p.layer_attrs();
    out->window_left = layer.window_left;
    out->logits_soft_cap = layer.logits_soft_cap;
    out->softmax_scale = layer.softmax_scale;
    MakeAbsent(&out->sinks);
    if (layer.sinks.present()) {
      out->sinks.data = layer.sinks.data;
      out->sinks.dtype = DYNATTN_DTYPE_F32;
      out->sinks.device = DYNATTN_DEVICE_CPU;
      out->sinks.rank = 1;
      out->sinks.shape[0] = layer.sinks.shape[0];
      out->sinks.strides[0] = 1;
    }
    return Status::Ok();
  });
}

// The plan_* / run_* pairs: handles first, then attrs and args, then the C++ call.
dynattn_status_t dynattn_plan_key_value_cache(const dynattn_key_value_cache_attrs_t* attrs,
                                              const dynattn_key_value_cache_args_t* args,
                                              dynattn_plan_t* plan) {
  return PlanOp(attrs, args, plan, &PlanKeyValueCache);
}

dynattn_status_t dynattn_run_key_value_cache(const dynattn_plan_t* plan,
                                             const dynattn_key_value_cache_args_t* args,
                                             dynattn_context_t* context) {
  auto run = [](const Plan& p, const KeyValueCacheArgs& a, Context* c, const LayerAttrs*) {
    return RunKeyValueCache(p, a, c);
  };
  return RunOp(plan, args, context, +run);
}

// plan_<op>, run_<op> and run_<op>_layer of an attention op (C++ Op, C names c_op).
#define DYNATTN_C_ATTENTION_PLAN_AND_RUN(c_op, CAttrs, CArgs, Op)                            \
  dynattn_status_t dynattn_plan_##c_op(const CAttrs* attrs, const CArgs* args,               \
                                       dynattn_plan_t* plan) {                               \
    return PlanOp(attrs, args, plan, &Plan##Op);                                             \
  }                                                                                          \
  dynattn_status_t dynattn_run_##c_op(const dynattn_plan_t* plan, const CArgs* args,         \
                                      dynattn_context_t* context) {                          \
    return RunOp(plan, args, context, &Run##Op);                                             \
  }                                                                                          \
  dynattn_status_t dynattn_run_##c_op##_layer(const dynattn_plan_t* plan, const CArgs* args, \
                                              const dynattn_layer_attrs_t* layer,            \
                                              dynattn_context_t* context) {                  \
    return RunOp(plan, args, context, &Run##Op, layer);                                      \
  }

DYNATTN_C_ATTENTION_PLAN_AND_RUN(multi_head_attention, dynattn_attention_attrs_t,
                                 dynattn_multi_head_attention_args_t, MultiHeadAttention)
DYNATTN_C_ATTENTION_PLAN_AND_RUN(multi_head_cache_attention,
                                 dynattn_multi_head_cache_attention_attrs_t,
                                 dynattn_multi_head_cache_attention_args_t, MultiHeadCacheAttention)
DYNATTN_C_ATTENTION_PLAN_AND_RUN(unified_attention, dynattn_unified_attention_attrs_t,
                                 dynattn_unified_attention_args_t, UnifiedAttention)
