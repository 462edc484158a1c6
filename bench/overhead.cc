// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "bench/overhead.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>

#include "bench/shared_prefix.h"
#include "dynattn/dynattn.h"

namespace dynattn::bench {
namespace {

/// Times `call` `count` times after a few warm-up calls; sorted durations in seconds.
std::vector<double> TimeCalls(int count, const std::function<bool()>& call) {
  for (int i = 0; i < 3; ++i) {
    if (!call()) std::abort();
  }
  std::vector<double> seconds;
  seconds.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const bool ok = call();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    if (!ok) std::abort();  // a fixed, valid step: a failure is a bug
    seconds.push_back(took.count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds;
}

double Quantile(const std::vector<double>& sorted, double q) {
  return sorted[static_cast<size_t>(q * static_cast<double>(sorted.size() - 1))];
}

/// The tiny step's tensors: one request decoding its 16th token over a one-page fp16 cache.
struct TinyStep {
  static constexpr int kHeads = 32, kKvHeads = 8, kDim = 128, kPage = 128;
  std::vector<uint16_t> query, key, value, output, cache;
  int64_t seqstarts[2] = {0, 1}, kvstarts[2] = {0, 16}, start_pos[1] = {15}, pages[1] = {0};
  int64_t decoding = 1, max_seqlen = 1, max_kvlen = 16;
  MultiHeadCacheAttentionAttrs attrs;
  MultiHeadCacheAttentionArgs args;

  TinyStep()
      : query(kHeads * kDim, 0x3C00),  // 1.0
        key(kKvHeads * kDim, 0x3800),  // 0.5
        value(kKvHeads * kDim, 0x3400),
        output(kHeads * kDim),
        cache(int64_t{kPage} * 2 * kKvHeads * kDim, 0x3000) {
    attrs.attention.num_heads = kHeads;
    attrs.attention.head_dim = kDim;
    attrs.attention.num_kv_heads = kKvHeads;
    attrs.cache.cache_mode = 1;
    attrs.cache.page_size = kPage;
    args.query = TensorView::Dense(query.data(), DType::kF16, {1, kHeads, kDim});
    args.current_key = TensorView::Dense(key.data(), DType::kF16, {1, kKvHeads, kDim});
    args.current_value = TensorView::Dense(value.data(), DType::kF16, {1, kKvHeads, kDim});
    args.seqstarts = TensorView::Dense(seqstarts, DType::kI64, {2});
    args.kvstarts = TensorView::Dense(kvstarts, DType::kI64, {2});
    args.cachestarts = TensorView::Dense(pages, DType::kI64, {1, 1});
    args.start_pos = TensorView::Dense(start_pos, DType::kI64, {1});
    args.decoding_batches = TensorView::Dense(&decoding, DType::kI64, {});
    args.max_seqlen = TensorView::Dense(&max_seqlen, DType::kI64, {});
    args.max_kvlen = TensorView::Dense(&max_kvlen, DType::kI64, {});
    args.cache = TensorView::Dense(cache.data(), DType::kF16, {kPage, 1, 2, kKvHeads, kDim});
    args.attn_output = TensorView::Dense(output.data(), DType::kF16, {1, kHeads, kDim});
  }
};

/// A decode step of `requests` requests over `context` cached tokens each, fp16 paged cache: the
/// tensors of one layer (every layer of the model runs the same ones, with its own attributes).
struct DecodeStep {
  static constexpr int kHeads = 64, kKvHeads = 8, kDim = 64, kPage = 128;
  std::vector<uint16_t> query, key, value, output, cache;
  std::vector<int64_t> seqstarts, kvstarts, start_pos, pages;
  int64_t decoding = 0, max_seqlen = 1, max_kvlen = 0;
  MultiHeadCacheAttentionAttrs attrs;
  MultiHeadCacheAttentionArgs args;

  DecodeStep(int requests, int64_t context) {
    const int64_t pages_per_request = (context + 1 + kPage - 1) / kPage;
    const int64_t slots = requests * pages_per_request * kPage;
    query.assign(int64_t{requests} * kHeads * kDim, 0x3C00);
    key.assign(int64_t{requests} * kKvHeads * kDim, 0x3800);
    value.assign(key.size(), 0x3400);
    output.resize(query.size());
    cache.assign(slots * 2 * kKvHeads * kDim, 0x3000);
    for (int b = 0; b <= requests; ++b) {
      seqstarts.push_back(b);
      kvstarts.push_back(b * (context + 1));
    }
    start_pos.assign(static_cast<size_t>(requests), context);
    for (int64_t p = 0; p < requests * pages_per_request; ++p) pages.push_back(p * kPage);
    decoding = requests;
    max_kvlen = context + 1;
    attrs.attention.num_heads = kHeads;
    attrs.attention.head_dim = kDim;
    attrs.attention.num_kv_heads = kKvHeads;
    attrs.cache.cache_mode = 1;
    attrs.cache.page_size = kPage;
    const int64_t t = requests;
    args.query = TensorView::Dense(query.data(), DType::kF16, {t, kHeads, kDim});
    args.current_key = TensorView::Dense(key.data(), DType::kF16, {t, kKvHeads, kDim});
    args.current_value = TensorView::Dense(value.data(), DType::kF16, {t, kKvHeads, kDim});
    args.seqstarts = TensorView::Dense(seqstarts.data(), DType::kI64, {t + 1});
    args.kvstarts = TensorView::Dense(kvstarts.data(), DType::kI64, {t + 1});
    args.cachestarts = TensorView::Dense(pages.data(), DType::kI64, {t, pages_per_request});
    args.start_pos = TensorView::Dense(start_pos.data(), DType::kI64, {t});
    args.decoding_batches = TensorView::Dense(&decoding, DType::kI64, {});
    args.max_seqlen = TensorView::Dense(&max_seqlen, DType::kI64, {});
    args.max_kvlen = TensorView::Dense(&max_kvlen, DType::kI64, {});
    args.cache = TensorView::Dense(cache.data(), DType::kF16, {slots, 1, 2, kKvHeads, kDim});
    args.attn_output = TensorView::Dense(output.data(), DType::kF16, {t, kHeads, kDim});
  }
};

}  // namespace

LayeredModelResult MeasureLayeredModel(int threads, int requests, int repetitions) {
  LayeredModelResult r;
  r.requests = requests;
  r.context = 1024;
  DecodeStep step(requests, r.context);
  std::vector<std::vector<float>> sinks;
  std::vector<LayerAttrs> layers(static_cast<size_t>(r.layers));
  for (int l = 0; l < r.layers; ++l) {
    sinks.emplace_back(DecodeStep::kHeads, 0.25f * static_cast<float>(l));
    layers[l].window_left = l % 2 == 0 ? 127 : -1;
    layers[l].sinks = TensorView::Dense(sinks[l].data(), DType::kF32, {DecodeStep::kHeads});
  }
  ContextOptions context_options;
  context_options.num_threads = threads;
  Context context(context_options);
  const auto per_layer = [&] {
    bool ok = true;
    for (const LayerAttrs& layer : layers) {
      MultiHeadCacheAttentionAttrs attrs = step.attrs;
      attrs.attention.window_left = layer.window_left;
      MultiHeadCacheAttentionArgs args = step.args;
      args.sinks = layer.sinks;
      Plan plan;
      ok &= PlanMultiHeadCacheAttention(attrs, args, &plan).ok() &&
            RunMultiHeadCacheAttention(plan, args, &context).ok();
    }
    return ok;
  };
  const auto per_step = [&] {
    Plan plan;
    bool ok = PlanMultiHeadCacheAttention(step.attrs, step.args, &plan).ok();
    for (const LayerAttrs& layer : layers) {
      ok &= RunMultiHeadCacheAttention(plan, step.args, &context, &layer).ok();
    }
    return ok;
  };
  r.plan_per_layer_ms = 1e3 * Quantile(TimeCalls(repetitions, per_layer), 0.5);
  r.plan_per_step_ms = 1e3 * Quantile(TimeCalls(repetitions, per_step), 0.5);
  Plan plan;
  r.plan_ms =
      1e3 *
      Quantile(
          TimeCalls(repetitions,
                    [&] { return PlanMultiHeadCacheAttention(step.attrs, step.args, &plan).ok(); }),
          0.5);
  return r;
}

TinyStepResult MeasureTinyStep(int threads, int calls) {
  TinyStep step;
  TinyStepResult r;
  r.threads = threads;
  RunOptions options;
  options.num_threads = threads;
  r.one_shot_us =
      1e6 *
      Quantile(
          TimeCalls(calls,
                    [&] { return MultiHeadCacheAttention(step.attrs, step.args, options).ok(); }),
          0.5);
  Plan plan;
  if (!PlanMultiHeadCacheAttention(step.attrs, step.args, &plan).ok()) std::abort();
  ContextOptions context_options;
  context_options.num_threads = threads;
  Context context(context_options);
  const std::vector<double> runs =
      TimeCalls(calls, [&] { return RunMultiHeadCacheAttention(plan, step.args, &context).ok(); });
  r.run_us = 1e6 * Quantile(runs, 0.5);
  r.run_p90_us = 1e6 * Quantile(runs, 0.9);
  return r;
}

UnifiedPlanningResult MeasureUnifiedPlanning(int threads, int repetitions) {
  SharedPrefixShape shape;
  shape.requests = 24;
  shape.prefix = 2048;
  shape.own = 4096;
  SharedPrefixStep step = BuildSharedPrefixStep(shape, 3000);
  dynattn_ref::Array out;
  BlockCache cache;
  UnifiedAttentionArgs args;
  if (!UnifiedArgs(&step, &out, &cache, &args).ok()) std::abort();
  const UnifiedAttentionAttrs attrs = MakeUnifiedAttrs(shape);
  UnifiedPlanningResult r;
  r.step = "unified_24x(2048+4096)_f16";
  r.blocks = (shape.prefix + shape.requests * shape.own) / shape.block_size;
  RunOptions options;
  options.num_threads = threads;
  ContextOptions context_options;
  context_options.num_threads = threads;
  Context context(context_options);
  Plan plan;
  r.plan_ms =
      1e3 * Quantile(TimeCalls(repetitions,
                               [&] { return PlanUnifiedAttention(attrs, args, &plan).ok(); }),
                     0.5);
  r.run_ms =
      1e3 * Quantile(TimeCalls(repetitions,
                               [&] { return RunUnifiedAttention(plan, args, &context).ok(); }),
                     0.5);
  r.one_shot_ms =
      1e3 *
      Quantile(TimeCalls(repetitions, [&] { return UnifiedAttention(attrs, args, options).ok(); }),
               0.5);
  return r;
}

void PrintOverhead(const std::vector<TinyStepResult>& tiny, const UnifiedPlanningResult& unified,
                   const std::vector<LayeredModelResult>& layered, std::FILE* out) {
  std::fprintf(out,
               "\nPer-call overhead: tiny step (1 decode over 16 cached tokens, Hq 32, Hkv 8, "
               "D 128, fp16 paged), medians of warm calls\n");
  std::fprintf(out, "%8s %14s %14s %14s %22s\n", "threads", "one-shot us", "Run us", "Run p90 us",
               "one-shot - Run us");
  for (const TinyStepResult& r : tiny) {
    std::fprintf(out, "%8d %14.1f %14.1f %14.1f %22.1f\n", r.threads, r.one_shot_us, r.run_us,
                 r.run_p90_us, r.one_shot_us - r.run_us);
  }
  std::fprintf(out, "\nUnified planning: %s, %lld cached blocks (medians)\n", unified.step.c_str(),
               static_cast<long long>(unified.blocks));
  std::fprintf(out,
               "  PlanUnifiedAttention %.3f ms, RunUnifiedAttention %.3f ms, "
               "UnifiedAttention (plan + run) %.3f ms\n",
               unified.plan_ms, unified.run_ms, unified.one_shot_ms);
  std::fprintf(out,
               "  a %d-layer step: planning per layer %.1f ms, planning once %.1f ms (%.2fx)\n",
               unified.layers, unified.per_layer_ms(), unified.per_step_ms(),
               unified.per_layer_ms() / unified.per_step_ms());
  std::fprintf(out,
               "\nPer-layer attributes: 6 layers (window 127 / full, sinks of their own), decodes "
               "over 1024 cached tokens, Hq 64, Hkv 8, D 64, fp16 paged (medians per step)\n");
  std::fprintf(out, "%10s %12s %20s %20s %10s\n", "requests", "plan ms", "plan per layer ms",
               "plan per step ms", "saved");
  for (const LayeredModelResult& r : layered) {
    std::fprintf(out, "%10d %12.3f %20.3f %20.3f %9.1f%%\n", r.requests, r.plan_ms,
                 r.plan_per_layer_ms, r.plan_per_step_ms,
                 100.0 * (r.plan_per_layer_ms - r.plan_per_step_ms) / r.plan_per_layer_ms);
  }
}

}  // namespace dynattn::bench
