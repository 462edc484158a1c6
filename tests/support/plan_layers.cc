// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "tests/support/plan_layers.h"

#include <doctest/doctest.h>

#include <cstring>
#include <utility>

namespace dynattn_test {

using dynattn::Context;
using dynattn::Plan;
using dynattn::Status;
using dynattn_ref::Dt;

Layer::Layer(const Case& c) : tensors(c.inputs) {
  auto poisoned = [](Dt dt, std::vector<int64_t> shape) {
    Array a = dynattn_ref::MakeArray(dt, shape);
    if (!a.bytes.empty()) std::memset(a.bytes.data(), 0xFF, a.bytes.size());
    return a;
  };
  if (c.op == "key_value_cache") {
    const Array& ck = c.inputs.at("current_key");
    const Array& kvstarts = c.inputs.at("kvstarts");
    const std::vector<int64_t> shape = {kvstarts.data<int64_t>()[kvstarts.numel() - 1],
                                        ck.shape[1] * c.attrs.num_repeat, ck.shape[2]};
    tensors["key"] = poisoned(ck.dt, shape);
    tensors["value"] = poisoned(ck.dt, shape);
  } else {
    const Array& q = c.inputs.at("query");
    tensors["attn_output"] = poisoned(q.dt, q.shape);
    if (c.op == "unified_attention") tensors["lse"] = poisoned(Dt::kF32, {q.shape[0], q.shape[1]});
  }
  MakeBlockCache(c);
}

void Layer::MakeBlockCache(const Case& c) {
  if (c.op != "unified_attention") return;
  const Status s =
      dynattn::MakePmxBlockCache(Lookup()("cache"), Lookup()("scale"), CacheAttrsOf(c.attrs),
                                 static_cast<int>(c.inputs.at("current_key").shape[1]),
                                 c.attrs.head_dim, c.attrs.block_size, &block_cache);
  REQUIRE_MESSAGE(s.ok(), s.message());
}

dynattn::TensorLookup Layer::Lookup() {
  return [this](const std::string& name) {
    auto it = tensors.find(name);
    if (it == tensors.end()) return dynattn::TensorView{};
    if (placement_ == nullptr) return ViewOf(it->second);
    auto placed = placed_.find(name);  // placed once, then the same view
    if (placed == placed_.end()) {
      placed = placed_.emplace(name, placement_->Place(name, it->second)).first;
    }
    return placed->second;
  };
}

void Layer::PlaceOn(Placement* placement, const Case& c) {
  placement_ = placement;
  placed_.clear();
  MakeBlockCache(c);
}

dynattn::KeyValueCacheAttrs KvcAttrs(const Case& c) {
  dynattn::KeyValueCacheAttrs attrs;
  attrs.cache = CacheAttrsOf(c.attrs);
  attrs.num_repeat = c.attrs.num_repeat;
  return attrs;
}

dynattn::MultiHeadCacheAttentionAttrs MhcaAttrs(const Case& c) {
  dynattn::MultiHeadCacheAttentionAttrs attrs;
  attrs.attention = AttentionAttrsOf(c.attrs);
  attrs.cache = CacheAttrsOf(c.attrs);
  return attrs;
}

dynattn::UnifiedAttentionAttrs UnifiedAttrs(const Case& c) {
  return UnifiedAttentionAttrsOf(c.attrs);  // window, soft-cap and scale included
}

BoundArgs::BoundArgs(const Case& c, Layer* layer) : op(c.op) {
  const dynattn::TensorLookup lookup = layer->Lookup();
  if (op == "key_value_cache") kvc = dynattn::KeyValueCacheArgsByName(lookup);
  if (op == "multi_head_attention") mha = dynattn::MultiHeadAttentionArgsByName(lookup);
  if (op == "multi_head_cache_attention") {
    mhca = dynattn::MultiHeadCacheAttentionArgsByName(lookup);
  }
  if (op == "unified_attention") {
    unified = dynattn::UnifiedAttentionArgsByName(lookup, &layer->block_cache);
  }
}

Status BoundArgs::MakePlan(const Case& c, Plan* plan) const {
  if (op == "key_value_cache") return dynattn::PlanKeyValueCache(KvcAttrs(c), kvc, plan);
  if (op == "multi_head_attention") {
    return dynattn::PlanMultiHeadAttention(AttentionAttrsOf(c.attrs), mha, plan);
  }
  if (op == "multi_head_cache_attention") {
    return dynattn::PlanMultiHeadCacheAttention(MhcaAttrs(c), mhca, plan);
  }
  return dynattn::PlanUnifiedAttention(UnifiedAttrs(c), unified, plan);
}

std::vector<dynattn::TensorView*> BoundArgs::IndexTensors() {
  return {&kvc.seqstarts,           &kvc.kvstarts,         &kvc.cachestarts,
          &kvc.start_pos,           &kvc.max_seqlen,       &kvc.max_kvlen,
          &mha.seqstarts,           &mha.kvstarts,         &mha.decoding_batches,
          &mha.max_seqlen,          &mha.max_kvlen,        &mhca.seqstarts,
          &mhca.kvstarts,           &mhca.cachestarts,     &mhca.start_pos,
          &mhca.decoding_batches,   &mhca.max_seqlen,      &mhca.max_kvlen,
          &unified.query_start_loc, &unified.context_lens, &unified.block_table};
}

Status BoundArgs::Run(const Plan& plan, Context* context, const dynattn::LayerAttrs* layer) const {
  if (op == "key_value_cache") return dynattn::RunKeyValueCache(plan, kvc, context);
  if (op == "multi_head_attention") {
    return dynattn::RunMultiHeadAttention(plan, mha, context, layer);
  }
  if (op == "multi_head_cache_attention") {
    return dynattn::RunMultiHeadCacheAttention(plan, mhca, context, layer);
  }
  return dynattn::RunUnifiedAttention(plan, unified, context, layer);
}

Status PlanLayer(const Case& c, Layer* layer, Plan* plan) {
  return BoundArgs(c, layer).MakePlan(c, plan);
}

Status RunLayer(const Case& c, Layer* layer, const Plan& plan, Context* context) {
  return BoundArgs(c, layer).Run(plan, context);
}

Case NextLayer(const Case& c) {
  Case next = c;
  for (const char* name : {"query", "current_key", "current_value", "key", "value"}) {
    auto it = next.inputs.find(name);
    if (it == next.inputs.end()) continue;
    Array& a = it->second;
    const size_t width = a.dt == Dt::kF16 ? 2 : 4;
    for (size_t i = width - 1; i < a.bytes.size(); i += width) a.bytes[i] ^= 0x80;
  }
  return next;
}

void CheckSameAsOneShot(const Case& c, Layer* layer) {
  const LibResult one_shot = RunLibrary(c);
  REQUIRE_MESSAGE(one_shot.status.ok(), one_shot.status.message());
  const std::pair<const char*, const Array*> expected[] = {{"attn_output", &one_shot.attn_output},
                                                           {"lse", &one_shot.lse},
                                                           {"key", &one_shot.key},
                                                           {"value", &one_shot.value},
                                                           {"cache", &one_shot.cache},
                                                           {"scale", &one_shot.scale}};
  for (const auto& entry : expected) {  // not a structured binding: doctest captures it
    const std::string& name = entry.first;
    const auto* want = entry.second;
    auto it = layer->tensors.find(name);
    if (it == layer->tensors.end() || (want->shape.empty() && want->bytes.empty())) continue;
    std::string why;
    CHECK_MESSAGE(SameBytes(it->second, *want, &why), name << ": " << why);
  }
}

std::vector<Case> CasesOfEveryOp(uint64_t seed) {
  return {dynattn_ref::RandomCase("key_value_cache", seed),
          dynattn_ref::RandomCase("multi_head_attention", seed + 1),
          dynattn_ref::RandomCase("multi_head_cache_attention", seed + 2),
          dynattn_ref::RandomUnifiedCase(seed + 3)};
}

}  // namespace dynattn_test
