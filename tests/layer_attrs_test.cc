// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Per-layer attributes (dynattn::LayerAttrs): one plan per step runs every layer of a model whose
// layers differ in sliding window, soft-cap, score scale and sinks, with the bits of the one-shot
// call made with each layer's attributes and within the float64 reference's tolerance; a layer's
// window reads only what it sees (the context left of it is NaN in these cases); bad attributes
// are refused before anything is written; and Runs sharing a plan from two threads agree.

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dynattn/dynattn.h"
#include "reference/case_gen.h"
#include "reference/reference.h"
#include "tests/support/plan_layers.h"
#include "tests/support/run_case.h"

namespace dynattn_test {
namespace {

using dynattn::Context;
using dynattn::LayerAttrs;
using dynattn::Plan;
using dynattn::Status;

const char* const kAttentionOps[] = {"multi_head_attention", "multi_head_cache_attention",
                                     "unified_attention"};

/// One layer's score attributes, as reference-case pins (-1 in window: off).
struct LayerPins {
  int window = -1;
  int soft_cap = 0;  // 0 off, 1 a drawn cap
  int scale = 0;     // 0 1/sqrt(D), 1 a drawn scale
  int sinks = 0;     // 0 none, 1 drawn sinks
};

/// A case of `op` from `seed` with `layer`'s attributes pinned: cases of one seed share their
/// shapes, metadata and cache history, and differ in the pinned attributes, in the values drawn
/// for them, and in the NaN put left of a window (context nobody may read).
Case CaseOfLayer(const std::string& op, uint64_t seed, bool long_context, const LayerPins& layer) {
  dynattn_ref::GenOptions options;
  if (long_context) {
    options.max_batch = 3;
    options.max_seqlen = 6;
    options.max_context = 2600;
  }
  options.pins.window = layer.window;
  options.pins.soft_cap = layer.soft_cap;
  options.pins.softmax_scale = layer.scale;
  options.pins.sinks = layer.sinks;
  if (op == "unified_attention") return dynattn_ref::RandomUnifiedCase(seed, options);
  return dynattn_ref::RandomCase(op, seed, options);
}

/// A six-layer model: windows on the even layers (gpt-oss, Gemma's local layers), full attention
/// on the odd ones, soft-caps, scales and sinks varying from layer to layer.
std::vector<LayerPins> SixLayers(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const int windows[] = {0, 1, 7, 127, 300, 1500};
  std::vector<LayerPins> layers;
  for (int l = 0; l < 6; ++l) {
    LayerPins p;
    p.window = l % 2 == 0 ? windows[rng() % 6] : -1;
    p.soft_cap = l % 3 == 1;
    p.scale = l % 3 == 2;
    p.sinks = l != 3;
    layers.push_back(p);
  }
  return layers;
}

/// The LayerAttrs of a case's attributes, with its sinks.
LayerAttrs LayerAttrsOf(const Case& c, Layer* layer) {
  LayerAttrs attrs;
  attrs.window_left = c.attrs.window_left;
  attrs.logits_soft_cap = static_cast<float>(c.attrs.logits_soft_cap);
  attrs.softmax_scale = static_cast<float>(c.attrs.softmax_scale);
  auto sinks = layer->tensors.find("sinks");
  if (sinks != layer->tensors.end()) attrs.sinks = ViewOf(sinks->second);
  return attrs;
}

/// The float64 reference's verdict on `layer`'s output for case `c`.
std::string CheckAgainstReference(const Case& c, Layer* layer) {
  const dynattn_ref::AttnResult ref = c.op == "multi_head_attention"
                                          ? dynattn_ref::MultiHeadAttention(c.attrs, c.inputs)
                                      : c.op == "multi_head_cache_attention"
                                          ? dynattn_ref::MultiHeadCacheAttention(c.attrs, c.inputs)
                                          : dynattn_ref::UnifiedAttention(c.attrs, c.inputs);
  std::string error = dynattn_ref::CheckAttention(ref, layer->tensors.at("attn_output"));
  if (error.empty() && c.op == "unified_attention") {
    error = dynattn_ref::CheckLse(ref, layer->tensors.at("lse"));
  }
  return error;
}

/// The index tensors of two cases are the same (what lets one plan run both).
bool SameMetadata(const Case& a, const Case& b) {
  for (const char* name : {"seqstarts", "kvstarts", "cachestarts", "start_pos", "decoding_batches",
                           "query_start_loc", "context_lens", "block_table"}) {
    const bool in_a = a.inputs.count(name) != 0, in_b = b.inputs.count(name) != 0;
    if (in_a != in_b) return false;
    if (in_a && a.inputs.at(name).bytes != b.inputs.at(name).bytes) return false;
  }
  return true;
}

/// Plans the step once (from a layer without any of the per-layer attributes), then runs the six
/// layers on it, each with its own attributes.
void RunSixLayers(const std::string& op, uint64_t seed, bool long_context, Context* context) {
  const Case planned = CaseOfLayer(op, seed, long_context, LayerPins{});
  Layer planning(planned);
  Plan plan;
  const Status s = PlanLayer(planned, &planning, &plan);
  REQUIRE_MESSAGE(s.ok(), s.message());
  const std::vector<LayerPins> layers = SixLayers(seed);
  for (size_t l = 0; l < layers.size(); ++l) {
    Case c = CaseOfLayer(op, seed, long_context, layers[l]);
    if (l % 2 == 1) c = NextLayer(c);
    INFO(op << " layer " << l << ": " << c.description);
    REQUIRE(SameMetadata(planned, c));
    Layer layer(c);
    const LayerAttrs attrs = LayerAttrsOf(c, &layer);
    const Status run = BoundArgs(c, &layer).Run(plan, context, &attrs);
    REQUIRE_MESSAGE(run.ok(), run.message());
    CheckSameAsOneShot(c, &layer);
    const std::string error = CheckAgainstReference(c, &layer);
    CHECK_MESSAGE(error.empty(), error);
  }
}

TEST_SUITE("layers") {
  TEST_CASE("one plan runs six layers with their own windows, soft-caps, scales and sinks") {
    Context context;
    for (const char* op : kAttentionOps) {
      for (uint64_t i = 0; i < 4; ++i) {
        RunSixLayers(op, BaseSeed() + 7 * i, /*long_context=*/i % 2 == 1, &context);
      }
    }
  }

  TEST_CASE("per-layer attributes give the one-shot bits on every SIMD target") {
    ForEachTarget([](const std::string& target) {
      INFO("target " << target);
      Context context;
      for (const char* op : kAttentionOps) RunSixLayers(op, BaseSeed() + 1000, false, &context);
    });
  }

  TEST_CASE("a Run given the plan's own attributes gives the plan's bits") {
    for (const char* op : kAttentionOps) {
      dynattn_ref::GenOptions options;
      const Case c = op == std::string("unified_attention")
                         ? dynattn_ref::RandomUnifiedCase(BaseSeed() + 2000, options)
                         : dynattn_ref::RandomCase(op, BaseSeed() + 2000, options);
      INFO(op << ": " << c.description);
      Layer layer(c);
      Plan plan;
      REQUIRE(PlanLayer(c, &layer, &plan).ok());
      const LayerAttrs planned = plan.layer_attrs();
      CHECK(planned.window_left == c.attrs.window_left);
      CHECK(planned.sinks.present() == (c.inputs.count("sinks") != 0));
      Context context;
      REQUIRE(BoundArgs(c, &layer).Run(plan, &context, &planned).ok());
      CheckSameAsOneShot(c, &layer);
    }
    Plan empty;
    CHECK(empty.layer_attrs().window_left == -1);
    CHECK_FALSE(empty.layer_attrs().sinks.present());
  }

  TEST_CASE("bad per-layer attributes are refused by name before anything is written") {
    // A step with query rows: sinks laid over its output need at least Hq floats of it.
    Case c;
    for (uint64_t seed = BaseSeed() + 3000;; ++seed) {
      c = CaseOfLayer("multi_head_cache_attention", seed, false, LayerPins{.sinks = 1});
      if (c.inputs.at("query").bytes.size() >= sizeof(float) * c.attrs.num_heads) break;
    }
    Layer layer(c);
    Plan plan;
    REQUIRE(PlanLayer(c, &layer, &plan).ok());
    const Layer untouched = layer;
    Context context;
    const int hq = c.attrs.num_heads;
    std::vector<float> wrong_shape(static_cast<size_t>(hq) + 1, 0.5f);
    std::vector<float> nan_sinks(static_cast<size_t>(hq), 0.5f);
    nan_sinks.back() = std::nanf("");
    struct Bad {
      const char* input;
      LayerAttrs attrs;
    };
    const LayerAttrs planned = plan.layer_attrs();
    auto attrs = [](int window_left, float cap, float scale, dynattn::TensorView sinks = {}) {
      LayerAttrs a;
      a.window_left = window_left;
      a.logits_soft_cap = cap;
      a.softmax_scale = scale;
      a.sinks = sinks;
      return a;
    };
    using dynattn::DType;
    using dynattn::TensorView;
    void* output = layer.tensors.at("attn_output").bytes.data();
    std::vector<Bad> bad = {
        {"window_left", attrs(-2, 0, 0)},
        {"logits_soft_cap", attrs(-1, -1.0f, 0)},
        {"logits_soft_cap", attrs(-1, INFINITY, 0)},
        {"softmax_scale", attrs(-1, 0, std::nanf(""))},
        {"sinks", attrs(-1, 0, 0, TensorView::Dense(nan_sinks.data(), DType::kF32, {hq}))},
        {"sinks", attrs(-1, 0, 0, TensorView::Dense(nan_sinks.data(), DType::kF16, {hq}))},
        {"sinks", attrs(-1, 0, 0, TensorView::Dense(wrong_shape.data(), DType::kF32, {hq + 1}))},
        // Sinks laid over the output the Run writes: the aliasing rule names both.
        {"attn_output", attrs(-1, 0, 0, TensorView::Dense(output, DType::kF32, {hq}))},
    };
    for (const Bad& b : bad) {
      const Status s = BoundArgs(c, &layer).Run(plan, &context, &b.attrs);
      INFO("expected an error naming " << b.input << ", got: " << s.message());
      CHECK(s.code() == dynattn::StatusCode::kInvalidArgument);
      CHECK(s.message().rfind(b.input, 0) == 0);
      for (const char* name : {"attn_output", "cache", "scale"}) {
        if (layer.tensors.count(name) == 0) continue;
        CHECK_MESSAGE(layer.tensors.at(name).bytes == untouched.tensors.at(name).bytes, name);
      }
    }
    CHECK(BoundArgs(c, &layer).Run(plan, &context, &planned).ok());
  }

  TEST_CASE("Runs on two threads sharing a plan plan each new window once and agree") {
    for (const char* op : kAttentionOps) {
      const uint64_t seed = BaseSeed() + 4000;
      const Case planned = CaseOfLayer(op, seed, true, LayerPins{});
      Layer planning(planned);
      Plan plan;
      REQUIRE(PlanLayer(planned, &planning, &plan).ok());
      const Case c = CaseOfLayer(op, seed, true, LayerPins{.window = 200});
      INFO(op << ": " << c.description);
      Layer first(c), second(c);  // not copies: a unified Layer's block cache views its own
      Layer* layers[] = {&first, &second};
      Status status[2];
      std::vector<std::thread> threads;
      for (int t = 0; t < 2; ++t) {
        threads.emplace_back([&, t] {
          Context context(dynattn::ContextOptions{.num_threads = 1});
          const LayerAttrs attrs = LayerAttrsOf(c, layers[t]);
          status[t] = BoundArgs(c, layers[t]).Run(plan, &context, &attrs);
        });
      }
      for (std::thread& t : threads) t.join();
      for (int t = 0; t < 2; ++t) {
        REQUIRE_MESSAGE(status[t].ok(), status[t].message());
        CheckSameAsOneShot(c, layers[t]);
      }
    }
  }
}

}  // namespace
}  // namespace dynattn_test
