// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "tests/support/run_case.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

#include "hwy/highway.h"
#include "hwy/targets.h"
#include "tools/dtypes.h"

namespace dynattn_test {

dynattn::CacheAttrs CacheAttrsOf(const dynattn_ref::Attrs& a) {
  dynattn::CacheAttrs c;
  c.num_layer = a.num_layer;
  c.layer_idx = a.layer_idx;
  c.quant_bit = a.quant_bit;
  c.quant_group = a.quant_group;
  c.cache_mode = a.cache_mode;
  c.cache_layout = a.cache_layout;
  c.page_size = a.page_size;
  return c;
}

dynattn::Precision PrecisionOf(const dynattn_ref::Attrs& a) {
  if (a.precision.empty() || a.precision == "exact") return dynattn::Precision::kExact;
  if (a.precision == "fast") return dynattn::Precision::kFast;
  return static_cast<dynattn::Precision>(std::stoi(a.precision));  // a raw value, to be refused
}

dynattn::AttentionAttrs AttentionAttrsOf(const dynattn_ref::Attrs& a) {
  dynattn::AttentionAttrs attn;
  attn.num_heads = a.num_heads;
  attn.head_dim = a.head_dim;
  attn.head_dim_v = a.head_dim_v;
  attn.value_from_key = a.value_from_key != 0;
  attn.is_causal = a.is_causal != 0;
  attn.is_alibi = a.is_alibi != 0;
  attn.num_kv_heads = a.num_kv_heads;
  attn.window_left = a.window_left;
  attn.logits_soft_cap = static_cast<float>(a.logits_soft_cap);
  attn.softmax_scale = static_cast<float>(a.softmax_scale);
  attn.precision = PrecisionOf(a);
  return attn;
}

dynattn::UnifiedAttentionAttrs UnifiedAttentionAttrsOf(const dynattn_ref::Attrs& a) {
  dynattn::UnifiedAttentionAttrs attrs;
  attrs.num_heads = a.num_heads;
  attrs.head_dim = a.head_dim;
  attrs.head_dim_v = a.head_dim_v;
  attrs.value_from_key = a.value_from_key != 0;
  attrs.num_kv_heads = a.num_kv_heads;
  attrs.is_alibi = a.is_alibi != 0;
  attrs.window_left = a.window_left;
  attrs.logits_soft_cap = static_cast<float>(a.logits_soft_cap);
  attrs.softmax_scale = static_cast<float>(a.softmax_scale);
  attrs.precision = PrecisionOf(a);
  return attrs;
}

namespace {

using dynattn_ref::Dt;

/// A copy of the named input, or an empty array (absent) when the case has none.
Array InputOrAbsent(const Case& c, const char* name, bool* present) {
  auto it = c.inputs.find(name);
  *present = it != c.inputs.end();
  return *present ? it->second : Array{};
}

/// Output array of the given dtype/shape, filled with 0xFF bytes (NaN for f32, f16 and bf16).
Array Poisoned(Dt dt, const std::vector<int64_t>& shape) {
  Array a = dynattn_ref::MakeArray(dt, shape);
  if (!a.bytes.empty()) std::memset(a.bytes.data(), 0xFF, a.bytes.size());
  return a;
}

/// Copies of the case's inputs (the library may write the cache and scale) and the outputs,
/// looked up by spec name: outputs first, absent when neither has the name.
/// With a placement, each name is placed once and its view reused.
struct Tensors {
  dynattn_ref::Tensors inputs;
  dynattn_ref::Tensors outputs;
  Placement* placement = nullptr;
  std::map<std::string, dynattn::TensorView> placed;

  dynattn::TensorView View(const std::string& name, Array& array) {
    if (placement == nullptr) return ViewOf(array);
    auto it = placed.find(name);
    if (it == placed.end()) it = placed.emplace(name, placement->Place(name, array)).first;
    return it->second;
  }

  dynattn::TensorLookup Lookup() {
    return [this](const std::string& name) {
      for (dynattn_ref::Tensors* map : {&outputs, &inputs}) {
        auto it = map->find(name);
        if (it != map->end()) return View(name, it->second);
      }
      return dynattn::TensorView{};
    };
  }
};

const Array& Input(const Case& c, const char* name) { return c.inputs.at(name); }

/// Outputs of KVC, sized from the inputs when they are well-formed (malformed cases still get
/// buffers).
void AddKvcOutputs(const Case& c, Tensors* t) {
  bool has_key = false;
  const Array ck = InputOrAbsent(c, "current_key", &has_key);
  const Array& kvstarts = Input(c, "kvstarts");
  const int64_t rows = kvstarts.numel() > 0 ? kvstarts.data<int64_t>()[kvstarts.numel() - 1] : 0;
  const int64_t repeat = std::max(1, c.attrs.num_repeat);  // the library rejects < 1
  const std::vector<int64_t> shape = {std::max<int64_t>(0, std::min<int64_t>(rows, 1 << 20)),
                                      has_key ? ck.shape[1] * repeat : 1,
                                      has_key ? ck.shape[2] : 1};
  t->outputs["key"] = Poisoned(has_key ? ck.dt : Dt::kF32, shape);
  t->outputs["value"] = Poisoned(has_key ? ck.dt : Dt::kF32, shape);
}

void CollectResults(Tensors* t, LibResult* r) {
  auto take = [](dynattn_ref::Tensors& map, const char* name, Array* out) {
    auto it = map.find(name);
    if (it != map.end()) *out = std::move(it->second);
  };
  take(t->inputs, "cache", &r->cache);
  take(t->inputs, "scale", &r->scale);
  take(t->outputs, "key", &r->key);
  take(t->outputs, "value", &r->value);
  take(t->outputs, "attn_output", &r->attn_output);
  take(t->outputs, "lse", &r->lse);
}

}  // namespace

/// The attention output's shape: the query's, with rows of head_dim_v when the case sets it.
std::vector<int64_t> OutputShape(const Case& c, const Array& query) {
  std::vector<int64_t> shape = query.shape;
  if (c.attrs.head_dim_v > 0 && shape.size() == 3) shape[2] = c.attrs.head_dim_v;
  return shape;
}

dynattn::TensorView ViewOf(Array& array) {
  return dynattn::TensorView::Dense(array.bytes.data(), dynattn::cli::DTypeOf(array.dt),
                                    static_cast<int>(array.shape.size()), array.shape.data());
}

/// A unified step through MakePmxBlockCache and UnifiedAttention, with the log-sum-exp.
dynattn::Status RunUnified(const Case& c, Tensors* t, const dynattn::RunOptions& options) {
  const Array& q = Input(c, "query");
  const Array& ck = Input(c, "current_key");
  t->outputs["attn_output"] = Poisoned(q.dt, OutputShape(c, q));
  t->outputs["lse"] = Poisoned(Dt::kF32, {q.shape[0], q.shape[1]});
  dynattn::TensorLookup lookup = t->Lookup();
  dynattn::BlockCache cache;
  DYNATTN_RETURN_IF_ERROR(dynattn::MakePmxBlockCache(
      lookup("cache"), lookup("scale"), CacheAttrsOf(c.attrs), static_cast<int>(ck.shape[1]),
      c.attrs.head_dim, c.attrs.block_size, &cache));
  return dynattn::UnifiedAttention(UnifiedAttentionAttrsOf(c.attrs),
                                   dynattn::UnifiedAttentionArgsByName(lookup, &cache), options);
}

LibResult RunLibrary(const Case& c, const dynattn::RunOptions& options, Placement* placement) {
  LibResult r;
  Tensors t{c.inputs, {}, placement, {}};
  if (c.op == "unified_attention") {
    r.status = RunUnified(c, &t, options);
  } else if (c.op == "key_value_cache") {
    AddKvcOutputs(c, &t);
    dynattn::KeyValueCacheAttrs attrs;
    attrs.cache = CacheAttrsOf(c.attrs);
    attrs.num_repeat = c.attrs.num_repeat;
    r.status = dynattn::KeyValueCache(attrs, dynattn::KeyValueCacheArgsByName(t.Lookup()), options);
  } else {
    const Array& q = Input(c, "query");
    t.outputs["attn_output"] = Poisoned(q.dt, OutputShape(c, q));
    if (q.shape.size() == 3) t.outputs["lse"] = Poisoned(Dt::kF32, {q.shape[0], q.shape[1]});
    if (c.op == "multi_head_attention") {
      r.status = dynattn::MultiHeadAttention(
          AttentionAttrsOf(c.attrs), dynattn::MultiHeadAttentionArgsByName(t.Lookup()), options);
    } else {
      dynattn::MultiHeadCacheAttentionAttrs attrs;
      attrs.attention = AttentionAttrsOf(c.attrs);
      attrs.cache = CacheAttrsOf(c.attrs);
      r.status = dynattn::MultiHeadCacheAttention(
          attrs, dynattn::MultiHeadCacheAttentionArgsByName(t.Lookup()), options);
    }
  }
  if (placement != nullptr) placement->Fetch();
  CollectResults(&t, &r);
  return r;
}

void ForEachTarget(const std::function<void(const std::string&)>& body) {
  // None forced while listing: Highway lists only the forced target while one is.
  ForcedTarget forced(0);
  const std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  for (int64_t target : targets) {
    forced.Set(target);
    body(hwy::TargetName(target));
  }
}

bool HaveAvx2AndAvx512() {
  int found = 0;
  ForEachTarget([&](const std::string& name) { found += name == "AVX2" || name == "AVX3"; });
  return found == 2;
}

bool Bf16DotsRun() {
  const std::string target = dynattn::CpuTargetName();
  return __builtin_cpu_supports("avx512bf16") && (target == "AVX3" || target == "AVX3_DL");
}

bool SameBytes(const Array& a, const Array& b, std::string* why) {
  if (a.dt != b.dt || a.shape != b.shape || a.bytes.size() != b.bytes.size()) {
    *why = "dtype/shape differ: " + dynattn_ref::ShapeString(a.shape) + " vs " +
           dynattn_ref::ShapeString(b.shape);
    return false;
  }
  for (size_t i = 0; i < a.bytes.size(); ++i) {
    if (a.bytes[i] != b.bytes[i]) {
      *why = "byte " + std::to_string(i) + " of " + std::to_string(a.bytes.size()) + ": " +
             std::to_string(a.bytes[i]) + " vs " + std::to_string(b.bytes[i]);
      return false;
    }
  }
  return true;
}

std::vector<std::pair<int64_t, int64_t>> TokenRanges(const Case& c) {
  const Array& qsl = c.inputs.at("query_start_loc");
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t b = 0; b + 1 < qsl.numel(); ++b) {
    ranges.emplace_back(qsl.data<int64_t>()[b], qsl.data<int64_t>()[b + 1]);
  }
  return ranges;
}

}  // namespace dynattn_test
