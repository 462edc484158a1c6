// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The ops, their plans, Context, merge_states and describe_unified_step. Each op call takes its
// attributes and its tensors as dicts keyed by the spec's names (dynattn/named_args.h).

#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "bindings/python/src/bindings.h"
#include "dynattn/op_signatures.h"

namespace dynattn_py {
namespace {

using namespace dynattn;  // NOLINT: the binding of a library uses all of it

enum class Op { kKeyValueCache, kMultiHeadAttention, kMultiHeadCacheAttention, kUnified };

Op ParseOp(const std::string& name) {
  if (name == "key_value_cache") return Op::kKeyValueCache;
  if (name == "multi_head_attention") return Op::kMultiHeadAttention;
  if (name == "multi_head_cache_attention") return Op::kMultiHeadCacheAttention;
  if (name == "unified_attention") return Op::kUnified;
  throw py::value_error("op: unknown op '" + name + "'");
}

int Int(const py::dict& d, const char* key, int fallback) {
  return d.contains(key) ? ToInt(d[key], key) : fallback;
}

// A flag (is_causal, is_alibi): any object Python can test for truth.
bool Flag(const py::dict& d, const char* key, bool fallback) {
  if (!d.contains(key)) return fallback;
  const int truth = PyObject_IsTrue(py::object(d[key]).ptr());
  if (truth < 0) {  // e.g. an array of several elements
    PyErr_Clear();
    throw py::type_error(std::string(key) + ": must be a bool");
  }
  return truth != 0;
}

float Real(const py::dict& d, const char* key, float fallback) {
  return d.contains(key) ? ToFloat(d[key], key) : fallback;
}

// The fp8 format of a uint8 PMX cache, from the attrs' "cache_dtype" (None or absent: none).
std::optional<DType> CacheFp8(const py::dict& d) {
  return d.contains("cache_dtype") ? ParseCacheDType(d["cache_dtype"]) : std::nullopt;
}

// The numerics tier of the attrs' "precision": "exact" (also absent or None) or "fast".
Precision ReadPrecision(const py::dict& d) {
  if (!d.contains("precision") || py::object(d["precision"]).is_none()) return Precision::kExact;
  const std::string text = py::str(d["precision"]);
  if (text == "exact") return Precision::kExact;
  if (text == "fast") return Precision::kFast;
  throw py::value_error("precision: must be \"exact\" or \"fast\", got \"" + text + "\"");
}

// window_left, logits_soft_cap and softmax_scale, shared by AttentionAttrs and
// UnifiedAttentionAttrs.
template <typename AttentionLikeAttrs>
void ReadScoreAttrs(const py::dict& d, AttentionLikeAttrs* a) {
  a->window_left = Int(d, "window_left", a->window_left);
  a->logits_soft_cap = Real(d, "logits_soft_cap", a->logits_soft_cap);
  a->softmax_scale = Real(d, "softmax_scale", a->softmax_scale);
}

CacheAttrs ReadCacheAttrs(const py::dict& d) {
  CacheAttrs c;
  c.num_layer = Int(d, "num_layer", c.num_layer);
  c.layer_idx = Int(d, "layer_idx", c.layer_idx);
  c.quant_bit = Int(d, "quant_bit", c.quant_bit);
  c.quant_group = Int(d, "quant_group", c.quant_group);
  c.cache_mode = Int(d, "cache_mode", c.cache_mode);
  c.cache_layout = Int(d, "cache_layout", c.cache_layout);
  c.page_size = Int(d, "page_size", c.page_size);
  return c;
}

AttentionAttrs ReadAttentionAttrs(const py::dict& d) {
  AttentionAttrs a;
  a.num_heads = Int(d, "num_heads", 0);
  a.num_kv_heads = Int(d, "num_kv_heads", 0);
  a.head_dim = Int(d, "head_dim", 0);
  a.head_dim_v = Int(d, "head_dim_v", 0);
  a.value_from_key = Flag(d, "value_from_key", false);
  a.precision = ReadPrecision(d);
  a.is_causal = Flag(d, "is_causal", true);
  a.is_alibi = Flag(d, "is_alibi", false);
  ReadScoreAttrs(d, &a);
  return a;
}

/// One tensor of an op's table (dynattn/op_signatures.h) as the fast Run path binds it.
enum class RunRole { Read, Mask, Index, Offsets, Host, Written, Cache, Scale };

#define DYNATTN_PY_RUN_FIELD(member, role) RunField<Args>{#member, RunRole::role, &Args::member},

template <class Args>
struct RunField {
  const char* name;
  RunRole role;
  TensorView Args::*member;
  bool ForRun() const {
    return role != RunRole::Index && role != RunRole::Offsets && role != RunRole::Host;
  }
  bool Written() const { return role != RunRole::Read && role != RunRole::Mask && ForRun(); }
};

/// The op's Args of a Run: `tensors` holds, in the op's table order, the tensors a Run reads or
/// writes (roles Read, Mask, Written, Cache, Scale); index and host tensors are the plan's. The
/// views are also listed by name in `views` when given.
template <class Args, size_t N>
Args BindRunTensors(const RunField<Args> (&fields)[N], const py::tuple& tensors,
                    std::optional<DType> cache_fp8, Keep* keep, TensorMap* views) {
  Args args;
  size_t next = 0;
  for (const RunField<Args>& f : fields) {
    if (!f.ForRun()) continue;
    if (next >= tensors.size()) throw py::value_error("too few tensors for this plan's op");
    const TensorView view = ToView(PyTuple_GET_ITEM(tensors.ptr(), next++), f.name, f.Written(),
                                   keep, f.role == RunRole::Cache ? cache_fp8 : std::nullopt);
    args.*f.member = view;
    if (views != nullptr && view.present()) (*views)[f.name] = view;
  }
  if (next != tensors.size()) throw py::value_error("too many tensors for this plan's op");
  return args;
}

/// RunFields<Args>::kFields: an op's tensors in its signature table's order.
template <class Args>
struct RunFields;
#define DYNATTN_PY_RUN_FIELDS(A, TENSORS)                                           \
  template <>                                                                       \
  struct RunFields<A> {                                                             \
    using Args = A;                                                                 \
    static inline const RunField<Args> kFields[] = {TENSORS(DYNATTN_PY_RUN_FIELD)}; \
  };
DYNATTN_PY_RUN_FIELDS(KeyValueCacheArgs, DYNATTN_KEY_VALUE_CACHE_TENSORS)
DYNATTN_PY_RUN_FIELDS(MultiHeadAttentionArgs, DYNATTN_MULTI_HEAD_ATTENTION_TENSORS)
DYNATTN_PY_RUN_FIELDS(MultiHeadCacheAttentionArgs, DYNATTN_MULTI_HEAD_CACHE_ATTENTION_TENSORS)
DYNATTN_PY_RUN_FIELDS(UnifiedAttentionArgs, DYNATTN_UNIFIED_ATTENTION_TENSORS)
#undef DYNATTN_PY_RUN_FIELDS

// One op call: its attributes and its borrowed arguments.
template <class AttrsT, class ArgsT>
struct OpCall {
  using Attrs = AttrsT;
  using Args = ArgsT;
  Attrs attrs;
  Args args;
};
/// A call of any op; the alternatives are in Op's order.
using Call = std::variant<OpCall<KeyValueCacheAttrs, KeyValueCacheArgs>,
                          OpCall<AttentionAttrs, MultiHeadAttentionArgs>,
                          OpCall<MultiHeadCacheAttentionAttrs, MultiHeadCacheAttentionArgs>,
                          OpCall<UnifiedAttentionAttrs, UnifiedAttentionArgs>>;
using UnifiedCall = std::variant_alternative_t<static_cast<size_t>(Op::kUnified), Call>;

/// An empty call of `op` (the alternative of its index).
template <size_t kIndex = 0>
Call EmptyCall(Op op) {
  if constexpr (kIndex + 1 < std::variant_size_v<Call>) {
    if (static_cast<size_t>(op) != kIndex) return EmptyCall<kIndex + 1>(op);
  }
  return Call(std::in_place_index<kIndex>);
}

/// The library's entry points of an op, by its Args.
template <class Args>
struct OpFunctions;
#define DYNATTN_PY_OP_FUNCTIONS(Name)                  \
  template <>                                          \
  struct OpFunctions<Name##Args> {                     \
    static constexpr auto kByName = &Name##ArgsByName; \
    static constexpr auto kPlan = &Plan##Name;         \
    static constexpr auto kRun = &Run##Name;           \
    static constexpr auto kOneShot = &Name;            \
  };
DYNATTN_PY_OP_FUNCTIONS(KeyValueCache)
DYNATTN_PY_OP_FUNCTIONS(MultiHeadAttention)
DYNATTN_PY_OP_FUNCTIONS(MultiHeadCacheAttention)
DYNATTN_PY_OP_FUNCTIONS(UnifiedAttention)
#undef DYNATTN_PY_OP_FUNCTIONS

template <class C>
using ArgsOf = typename std::decay_t<C>::Args;

Call MakeCall(Op op, const py::dict& attrs, const TensorMap& map, const PyBlockCache* cache) {
  if (cache != nullptr) cache->CheckApart(map);
  const TensorLookup lookup = [&map](const std::string& name) { return Lookup(map, name); };
  KeyValueCacheAttrs kvc;
  kvc.cache = ReadCacheAttrs(attrs);
  kvc.num_repeat = Int(attrs, "num_repeat", 1);
  const AttentionAttrs attention = ReadAttentionAttrs(attrs);
  UnifiedAttentionAttrs unified;
  unified.num_heads = attention.num_heads;
  unified.num_kv_heads = attention.num_kv_heads;
  unified.head_dim = attention.head_dim;
  unified.head_dim_v = attention.head_dim_v;
  unified.value_from_key = attention.value_from_key;
  unified.precision = attention.precision;
  unified.is_alibi = attention.is_alibi;
  ReadScoreAttrs(attrs, &unified);
  // Each op's attributes, by type (the four types differ).
  const std::tuple every_attrs{kvc, attention, MultiHeadCacheAttentionAttrs{attention, kvc.cache},
                               unified};
  Call call = EmptyCall(op);
  std::visit(
      [&](auto& c) {
        using Args = ArgsOf<decltype(c)>;
        c.attrs = std::get<typename std::decay_t<decltype(c)>::Attrs>(every_attrs);
        if constexpr (std::is_same_v<Args, UnifiedAttentionArgs>) {
          if (cache == nullptr) throw py::value_error("cache: is required (a dynattn.BlockCache)");
          c.args = UnifiedAttentionArgsByName(lookup, &cache->cache);
        } else {
          c.args = OpFunctions<Args>::kByName(lookup);
        }
      },
      call);
  return call;
}

Status PlanCall(const Call& call, Plan* plan) {
  return std::visit(
      [&](const auto& c) { return OpFunctions<ArgsOf<decltype(c)>>::kPlan(c.attrs, c.args, plan); },
      call);
}

Status RunCall(const Call& call, const Plan& plan, Context* context,
               const LayerAttrs* layer = nullptr) {
  return std::visit(
      [&](const auto& c) {
        using Args = ArgsOf<decltype(c)>;
        if constexpr (std::is_same_v<Args, KeyValueCacheArgs>) {
          return RunKeyValueCache(plan, c.args, context);  // no per-layer attributes
        } else {
          return OpFunctions<Args>::kRun(plan, c.args, context, layer);
        }
      },
      call);
}

Status OneShot(const Call& call, const RunOptions& options) {
  return std::visit(
      [&](const auto& c) {
        return OpFunctions<ArgsOf<decltype(c)>>::kOneShot(c.attrs, c.args, options);
      },
      call);
}

// The tensors `op` writes: its outputs and the cache it updates in place (the roles Written,
// Cache and Scale of the op tables, dynattn/op_signatures.h).
std::vector<std::string> Written(Op op) {
  std::vector<std::string> names;
  std::visit(
      [&](const auto& c) {
        for (const auto& f : RunFields<ArgsOf<decltype(c)>>::kFields) {
          if (f.Written()) names.push_back(f.name);
        }
      },
      EmptyCall(op));
  return names;
}

const PyBlockCache* CacheOf(const py::object& cache) {
  return cache.is_none() ? nullptr : cache.cast<const PyBlockCache*>();
}

/// One call of `op` (a plan and its run in `context`, or the pooled one-shot call without one).
void RunOp(const std::string& op_name, const py::dict& attrs, const py::dict& tensors,
           const py::object& cache, PyContext* context, const py::object& threads) {
  const Op op = ParseOp(op_name);
  const int num_threads = ToInt(threads, "num_threads");
  Keep keep;
  const TensorMap map = ToViews(tensors, Written(op), &keep, CacheFp8(attrs));
  const Call call = MakeCall(op, attrs, map, CacheOf(cache));
  if (context == nullptr) {
    Check(RunReleased([&] { return OneShot(call, RunOptions{.num_threads = num_threads}); }));
    return;
  }
  Plan plan;
  Check(RunReleased([&] { return PlanCall(call, &plan); }));
  Check(RunLocked(context, [&](Context* ctx) { return RunCall(call, plan, ctx); }));
}

/// A Plan, the op it was made for and the fp8 format of its uint8 cache, if any.
struct PyPlan {
  Op op = Op::kUnified;
  std::string op_name;
  Plan plan;
  std::optional<DType> cache_fp8;
};

std::unique_ptr<PyPlan> MakePlan(const std::string& op_name, const py::dict& attrs,
                                 const py::dict& tensors, const py::object& cache) {
  auto plan = std::make_unique<PyPlan>();
  plan->op = ParseOp(op_name);
  plan->op_name = op_name;
  plan->cache_fp8 = CacheFp8(attrs);
  Keep keep;
  const TensorMap map = ToViews(tensors, {}, &keep, plan->cache_fp8);  // planning writes nothing
  const Call call = MakeCall(plan->op, attrs, map, CacheOf(cache));
  Check(RunReleased([&] { return PlanCall(call, &plan->plan); }));
  return plan;
}

/// A Run's per-layer attributes: the plan's, with the entries of `layer` that are not None
/// (window_left, logits_soft_cap, softmax_scale, and sinks: a tensor replacing the plan's).
LayerAttrs LayerOf(const Plan& plan, const py::dict& layer, Keep* keep) {
  LayerAttrs attrs = plan.layer_attrs();
  if (!layer["window_left"].is_none()) {
    attrs.window_left = ToInt(layer["window_left"], "window_left");
  }
  if (!layer["logits_soft_cap"].is_none()) {
    attrs.logits_soft_cap = ToFloat(layer["logits_soft_cap"], "logits_soft_cap");
  }
  if (!layer["softmax_scale"].is_none()) {
    attrs.softmax_scale = ToFloat(layer["softmax_scale"], "softmax_scale");
  }
  if (!layer["sinks"].is_none()) attrs.sinks = ToView(layer["sinks"], "sinks", false, keep);
  return attrs;
}

/// Plan.run: the Run's tensors by position (no name lookups, no dict), torch tensors read
/// through their attributes; `layer` is None or the per-layer attributes (LayerOf).
void RunPlan(const PyPlan& plan, const py::tuple& tensors, const py::object& cache,
             PyContext* context, const py::object& layer) {
  Keep keep;
  Call call = EmptyCall(plan.op);
  TensorMap views;
  const PyBlockCache* block_cache = CacheOf(cache);
  std::visit(
      [&](auto& c) {
        using Args = ArgsOf<decltype(c)>;
        constexpr bool kUnified = std::is_same_v<Args, UnifiedAttentionArgs>;
        if (kUnified && block_cache == nullptr) {
          throw py::value_error("cache: is required (a dynattn.BlockCache)");
        }
        c.args = BindRunTensors(RunFields<Args>::kFields, tensors, plan.cache_fp8, &keep,
                                kUnified ? &views : nullptr);
        if constexpr (kUnified) {
          c.args.cache = &block_cache->cache;
          block_cache->CheckApart(views);
        }
      },
      call);
  std::optional<LayerAttrs> attrs;
  if (!layer.is_none()) attrs = LayerOf(plan.plan, layer.cast<py::dict>(), &keep);
  const LayerAttrs* layer_attrs = attrs ? &*attrs : nullptr;
  Check(
      RunLocked(context, [&](Context* ctx) { return RunCall(call, plan.plan, ctx, layer_attrs); }));
}

#undef DYNATTN_PY_RUN_FIELD

UnifiedStepSummary Describe(const py::dict& attrs, const py::dict& tensors,
                            const py::object& cache) {
  Keep keep;
  const TensorMap map = ToViews(tensors, {}, &keep);
  const Call call = MakeCall(Op::kUnified, attrs, map, CacheOf(cache));
  const UnifiedCall& unified = std::get<UnifiedCall>(call);
  UnifiedStepSummary summary;
  Check(RunReleased([&] { return DescribeUnifiedStep(unified.attrs, unified.args, &summary); }));
  return summary;
}

void Merge(const py::dict& tensors, const py::object& threads) {
  const int num_threads = ToInt(threads, "num_threads");
  Keep keep;
  const TensorMap map = ToViews(tensors, {"merged_out", "merged_lse"}, &keep);
  MergeStatesArgs args;
  for (auto [name, member] : {std::pair{"out", &MergeStatesArgs::out},
                              {"lse", &MergeStatesArgs::lse},
                              {"acc", &MergeStatesArgs::acc},
                              {"max", &MergeStatesArgs::max},
                              {"sum", &MergeStatesArgs::sum},
                              {"merged_out", &MergeStatesArgs::merged_out},
                              {"merged_lse", &MergeStatesArgs::merged_lse}}) {
    args.*member = Lookup(map, name);
  }
  Check(RunReleased([&] { return MergeStates(args, RunOptions{.num_threads = num_threads}); }));
}

std::string SummaryRepr(const UnifiedStepSummary& s) {
  return "UnifiedStepSummary(phase='" + s.phase + "', query_len=" + std::to_string(s.query_len) +
         ", num_shared_blocks=" + std::to_string(s.num_shared_blocks) +
         ", num_unique_blocks=" + std::to_string(s.num_unique_blocks) +
         ", num_logits=" + std::to_string(s.num_logits) +
         ", num_work_items=" + std::to_string(s.num_work_items) +
         ", cache_bytes_read=" + std::to_string(s.cache_bytes_read) + ")";
}

void BindSummary(py::module_& m) {
  using S = UnifiedStepSummary;
  py::class_<S>(m, "UnifiedStepSummary", "What the planner made of a unified-attention step.")
      .def_readonly("phase", &S::phase, "'c', 's', 'u' per path present, '-' per path absent")
      .def_readonly("query_len", &S::query_len)
      .def_readonly("num_shared_blocks", &S::num_shared_blocks)
      .def_readonly("num_unique_blocks", &S::num_unique_blocks)
      .def_readonly("num_logits", &S::num_logits)
      .def_readonly("num_work_items", &S::num_work_items)
      .def_readonly("cache_bytes_read", &S::cache_bytes_read)
      .def("__repr__", &SummaryRepr);
}

void BindContext(py::module_& m) {
  py::class_<PyContext>(m, "Context",
                        "Threads, scratch and workspace that run plans (dynattn::Context). Calls "
                        "on one Context are serialized; give each thread its own for parallelism.")
      .def(py::init(
               [](const py::object& num_threads, const py::object& cuda_stream, bool pin_threads) {
                 ContextOptions options;
                 options.num_threads = ToInt(num_threads, "num_threads");
                 options.cuda_stream = reinterpret_cast<void*>(
                     static_cast<std::uintptr_t>(ToInt64(cuda_stream, "cuda_stream")));
                 options.pin_threads = pin_threads;
                 Check(ValidateContextOptions(options));
                 return std::make_unique<PyContext>(options);
               }),
           py::arg("num_threads") = 0, py::arg("cuda_stream") = 0, py::arg("pin_threads") = false)
      .def_property_readonly("num_threads",
                             [](const PyContext& c) { return c.context.options().num_threads; })
      .def_property_readonly("pin_threads",
                             [](const PyContext& c) { return c.context.options().pin_threads; })
      .def_property_readonly("workspace_bytes",
                             [](const PyContext& c) { return c.context.workspace_bytes(); })
      .def("__repr__", [](const PyContext& c) {
        return "Context(num_threads=" + std::to_string(c.context.options().num_threads) + ")";
      });
}

void BindPlan(py::module_& m) {
  py::class_<PyPlan>(m, "_Plan")
      .def_property_readonly("op", [](const PyPlan& p) { return std::string(p.plan.op()); })
      .def_property_readonly("op_name", [](const PyPlan& p) { return p.op_name; })
      .def_property_readonly("backend",
                             [](const PyPlan& p) { return std::string(p.plan.backend()); })
      .def_property_readonly(
          "precision",
          [](const PyPlan& p) { return std::string(PrecisionName(p.plan.precision())); })
      .def_property_readonly("workspace_bytes",
                             [](const PyPlan& p) { return p.plan.workspace_bytes(); })
      .def_property_readonly("unified_summary",
                             [](const PyPlan& p) -> py::object {
                               const UnifiedStepSummary* s = p.plan.unified_summary();
                               return s == nullptr ? py::none() : py::cast(*s);
                             })
      .def("run", &RunPlan, py::arg("tensors"), py::arg("cache"), py::arg("context"),
           py::arg("layer") = py::none());
}

}  // namespace

void BindOps(py::module_& m) {
  BindSummary(m);
  BindContext(m);
  BindPlan(m);
  m.def("_run", &RunOp, py::arg("op"), py::arg("attrs"), py::arg("tensors"), py::arg("cache"),
        py::arg("context"), py::arg("num_threads"));
  m.def("_plan", &MakePlan, py::arg("op"), py::arg("attrs"), py::arg("tensors"), py::arg("cache"));
  m.def("_describe_unified_step", &Describe, py::arg("attrs"), py::arg("tensors"),
        py::arg("cache"));
  m.def("_merge_states", &Merge, py::arg("tensors"), py::arg("num_threads"));
}

}  // namespace dynattn_py
