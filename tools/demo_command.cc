// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `dynattn demo`: the main job. One realistic serving step of a Llama-3-8B-like attention layer
// (32 query heads, 8 KV heads, head_dim 128, int8 cache with groups of 8 and fp16 scales, paged,
// layout 3): 24 decoding requests with contexts from 512 to 8192 and two 512-token prefill chunks,
// through MultiHeadCacheAttention. It prints the step's shape, the median time, the KV bytes read
// per second, and checks sampled requests and heads against the independent float64 reference.

#include "tools/demo_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/serving_step.h"
#include "tools/run_command.h"

namespace dynattn::cli {
namespace {

// The demo's step is one of the benchmark's synthetic serving steps (bench/serving_step.h).
using bench::AttentionFlops;
using bench::BuildStep;
using bench::KvBytesRead;
using bench::RunStep;
using bench::Step;
using bench::StepRequest;
using bench::StepShape;
using bench::SubStep;

constexpr int kDecodes = 24;
constexpr int64_t kPrefillTokens = 512;

/// 24 decodes with contexts spread over [512, 8192], then a fresh prompt chunk and a later one.
StepShape DemoShape() {
  StepShape shape;  // Llama-3-8B-like defaults: 32/8 heads, D = 128, int8 groups of 8, layout 3
  std::mt19937_64 rng(20261122);
  std::uniform_int_distribution<int64_t> context(512, 8192);
  for (int i = 0; i < kDecodes; ++i) shape.requests.push_back({context(rng) - 1, 1});
  shape.requests.push_back({0, kPrefillTokens});
  shape.requests.push_back({1024, kPrefillTokens});
  shape.decoding_batches = kDecodes;
  return shape;
}

/// Median wall time of `runs` calls; fails on the first error.
Status TimeStep(Step* step, dynattn_ref::Array* out, int runs, double* median) {
  std::vector<double> times;
  for (int run = 0; run < runs; ++run) {
    const auto start = std::chrono::steady_clock::now();
    const Status status = RunStep(step, out);
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!status.ok()) return status;
  }
  std::sort(times.begin(), times.end());
  *median = times[times.size() / 2];
  return Status::Ok();
}

void PrintShape(const Step& step) {
  const StepShape& s = step.shape;
  int64_t tokens = 0, context = 0;
  for (const StepRequest& r : s.requests) {
    tokens += r.seqlen;
    context += r.start_pos + r.seqlen;
  }
  std::printf("libdynattn demo: MultiHeadCacheAttention, one serving step on %s\n",
              CpuTargetName());
  std::printf(
      "  layer: %d query heads, %d KV heads, head_dim %d; int8 cache, groups of %d, fp16 "
      "scales, paged (page %d), layout %d\n",
      s.num_heads, s.num_kv_heads, s.head_dim, s.quant_group, s.page_size, s.cache_layout);
  std::printf(
      "  batch: %d decodes (contexts 512..8192) + 2 prefill chunks of %lld tokens; %lld "
      "query tokens, %lld context tokens\n",
      kDecodes, static_cast<long long>(kPrefillTokens), static_cast<long long>(tokens),
      static_cast<long long>(context));
}

}  // namespace

CLI::App* AddDemoCommand(CLI::App* app) {
  return app->add_subcommand(
      "demo", "Run one serving step of a Llama-3-8B-like layer and check it against float64");
}

int RunDemoCommand() {
  const Step original = BuildStep(DemoShape(), 7);
  Step step = original;
  dynattn_ref::Array out;
  PrintShape(step);
  double median = 0;
  Status status = TimeStep(&step, &out, 7, &median);
  if (!status.ok()) {
    ReportError(status.message());
    return kExitFailure;
  }
  std::printf(
      "  time: %.2f ms (median of 7); KV read %.1f MB -> %.2f GB/s; %.1f GFLOP -> %.1f "
      "GFLOP/s\n",
      median * 1e3, KvBytesRead(step) / 1e6, KvBytesRead(step) / median / 1e9,
      AttentionFlops(step) / 1e9, AttentionFlops(step) / median / 1e9);
  // The two halves of the step on their own (the decode half is bound by KV bytes, the prefill
  // half by arithmetic); `dynattn bench` relates such figures to the machine's limits.
  std::vector<int64_t> decodes(kDecodes);
  for (int i = 0; i < kDecodes; ++i) decodes[i] = i;
  dynattn_ref::Array rows, sub_out;
  for (const auto& [name, picked] :
       {std::make_pair("decodes", decodes),
        std::make_pair("prefills", std::vector<int64_t>{kDecodes, kDecodes + 1})}) {
    Step half = SubStep(original, picked, out, &rows);
    sub_out = {};
    double half_median = 0;
    if (TimeStep(&half, &sub_out, 5, &half_median).ok()) {
      std::printf("    %-8s alone: %.2f ms; %.2f GB/s of KV, %.1f GFLOP/s\n", name,
                  half_median * 1e3, KvBytesRead(half) / half_median / 1e9,
                  AttentionFlops(half) / half_median / 1e9);
    }
  }
  const std::vector<int> heads = {0, 5, 13, 22, 31};
  std::printf(
      "  check: requests 0, 11, 23 (decode) and both prefill chunks, heads 0, 5, 13, 22, "
      "31, against the float64 reference ... ");
  std::fflush(stdout);
  const Step sample = SubStep(original, {0, 11, 23, kDecodes, kDecodes + 1}, out, &rows);
  const dynattn_ref::AttnResult ref =
      dynattn_ref::MultiHeadCacheAttention(sample.reference_attrs, sample.inputs, heads);
  double worst = 0;
  const std::string error = dynattn_ref::CheckAttention(ref, rows, &worst);
  if (!error.empty()) {
    std::printf("FAILED\n    %s\n", error.c_str());
    return kExitFailure;
  }
  std::printf("pass (worst error %.2f of the spec's fp16 bound)\n", worst);
  return kExitOk;
}

}  // namespace dynattn::cli
