// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What a call costs beyond its kernels' work, measured by `dynattn bench --only overhead` (and in
// the full run): a tiny decode step through the one-shot call and through Plan/Run on a Context,
// a unified step's planning, once per step versus once per layer, and a model whose layers
// differ in window and sinks, planned once per step (LayerAttrs) versus once per layer.

#ifndef DYNATTN_BENCH_OVERHEAD_H_
#define DYNATTN_BENCH_OVERHEAD_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dynattn::bench {

/// A tiny step (1 decode over 16 cached tokens, Hq 32, Hkv 8, D 128, fp16 paged cache) on
/// `threads` threads: medians of many warm calls, in microseconds.
struct TinyStepResult {
  int threads = 0;
  double one_shot_us = 0;  ///< MultiHeadCacheAttention (plans every call, pooled Context).
  double run_us = 0;       ///< RunMultiHeadCacheAttention of one plan on one Context.
  double run_p90_us = 0;   ///< Its 90th percentile (run-to-run spread).
};

/// A unified decode step (`requests` decodes sharing a prefix, each with its own blocks).
struct UnifiedPlanningResult {
  std::string step;        ///< e.g. "unified_24x(2048+4096)_f16".
  int64_t blocks = 0;      ///< Cached blocks the step reads.
  double plan_ms = 0;      ///< PlanUnifiedAttention (validation included).
  double run_ms = 0;       ///< RunUnifiedAttention of that plan.
  double one_shot_ms = 0;  ///< UnifiedAttention: plans and runs.
  int layers = 32;         ///< The model depth the step-level figures assume.
  double per_layer_ms() const { return layers * (plan_ms + run_ms); }  ///< Planning in every layer.
  double per_step_ms() const { return plan_ms + layers * run_ms; }     ///< Planning once.
};

/// A gpt-oss-like model step: `requests` decodes over `context` cached tokens (Hq 64, Hkv 8, D 64,
/// fp16 paged cache), six layers alternating a 128-token window with full attention, each with its
/// own sinks. Medians of whole six-layer steps, in milliseconds.
struct LayeredModelResult {
  int requests = 0;
  int64_t context = 0;
  int layers = 6;
  double plan_per_layer_ms = 0;  ///< A plan per layer with its attributes, then its Run.
  double plan_per_step_ms = 0;   ///< One plan, then every layer's Run with its LayerAttrs.
  double plan_ms = 0;            ///< One PlanMultiHeadCacheAttention.
};

TinyStepResult MeasureTinyStep(int threads, int calls);
UnifiedPlanningResult MeasureUnifiedPlanning(int threads, int repetitions);
LayeredModelResult MeasureLayeredModel(int threads, int requests, int repetitions);

void PrintOverhead(const std::vector<TinyStepResult>& tiny, const UnifiedPlanningResult& unified,
                   const std::vector<LayeredModelResult>& layered, std::FILE* out);

}  // namespace dynattn::bench

#endif  // DYNATTN_BENCH_OVERHEAD_H_
