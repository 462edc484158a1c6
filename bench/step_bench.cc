// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// dynattn_bench: times MultiHeadCacheAttention on a fixed matrix of serving steps and relates
// each figure to this machine's limits, measured in the same run: the roofline of a step is the
// larger of (KV bytes / read bandwidth) and (flops / fp32 FMA peak). Runs are interleaved across
// steps, caches are flushed before each timed call, and the median is reported.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/machine.h"
#include "src/cli/serving_step.h"

namespace dynattn::bench {
namespace {

using cli::Step;
using cli::StepRequest;
using cli::StepShape;

struct BenchStep {
  std::string name;
  Step step;
  dynattn_ref::Array out;
  std::vector<double> seconds;
};

StepShape Decodes(int requests, int64_t context, int quant_bit) {
  StepShape s;
  s.quant_bit = quant_bit;
  for (int i = 0; i < requests; ++i) s.requests.push_back({context - 1, 1});
  s.decoding_batches = requests;
  return s;
}

StepShape Prefill(int64_t tokens, int quant_bit) {
  StepShape s;
  s.quant_bit = quant_bit;
  s.requests.push_back({0, tokens});
  return s;
}

/// The demo's step: 24 decodes at contexts 512..8192 and two 512-token prefill chunks.
StepShape Mixed() {
  StepShape s;
  for (int i = 0; i < 24; ++i) s.requests.push_back({512 + i * 320, 1});
  s.requests.push_back({0, 512});
  s.requests.push_back({1024, 512});
  s.decoding_batches = 24;
  return s;
}

const char* CacheName(int quant_bit) {
  return quant_bit == 0 ? "f16" : quant_bit == 8 ? "int8" : "int4";
}

std::vector<BenchStep> Matrix(bool quick) {
  std::vector<std::pair<std::string, StepShape>> shapes;
  for (int bits : {0, 8, 4}) {
    shapes.emplace_back(std::string("decode 8x4096 ") + CacheName(bits), Decodes(8, 4096, bits));
  }
  shapes.emplace_back("decode 8x512 int8", Decodes(8, 512, 8));
  if (!quick) {
    shapes.emplace_back("decode 8x2048 int8", Decodes(8, 2048, 8));
    shapes.emplace_back("decode 8x16384 int8", Decodes(8, 16384, 8));
  }
  for (int bits : {0, 8}) {
    shapes.emplace_back(std::string("prefill 512 causal ") + CacheName(bits), Prefill(512, bits));
  }
  if (!quick) shapes.emplace_back("prefill 2048 causal int8", Prefill(2048, 8));
  shapes.emplace_back("mixed 24 decodes + 2x512 int8", Mixed());
  std::vector<BenchStep> steps;
  uint64_t seed = 1;
  for (auto& [name, shape] : shapes) steps.push_back({name, cli::BuildStep(shape, seed++), {}, {}});
  return steps;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  CLI::App app("dynattn_bench: libdynattn serving steps against this machine's limits");
  bool quick = false;
  int threads = 2, repetitions = 7;
  app.add_flag("--quick", quick, "Fewer steps");
  app.add_option("--threads", threads, "Worker threads (also used to measure the machine)");
  app.add_option("--repetitions", repetitions, "Timed calls per step (median reported)");
  CLI11_PARSE(app, argc, argv);

  std::fprintf(stderr, "measuring the machine (read bandwidth, FMA peak) ...\n");
  const double bandwidth = MeasureReadBandwidth(threads);
  const double peak = MeasureFmaPeak(threads);
  std::printf("machine: %s, %d threads: read %.1f GB/s, fp32 FMA %.0f GFLOP/s\n", CpuTargetName(),
              threads, bandwidth, peak);
  std::fprintf(stderr, "building steps ...\n");
  std::vector<BenchStep> steps = Matrix(quick);
  RunOptions options;
  options.num_threads = threads;
  for (int rep = 0; rep < repetitions; ++rep) {  // interleaved: one call of each step per round
    std::fprintf(stderr, "round %d/%d\r", rep + 1, repetitions);
    for (BenchStep& b : steps) {
      FlushCaches();
      const auto start = std::chrono::steady_clock::now();
      const Status status = cli::RunStep(&b.step, &b.out, options);
      b.seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      if (!status.ok()) {
        std::fprintf(stderr, "%s: %s\n", b.name.c_str(), status.message().c_str());
        return 1;
      }
    }
  }
  std::printf("%-32s %10s %9s %9s %12s %10s\n", "step", "median ms", "GB/s", "GFLOP/s",
              "roofline ms", "% roofline");
  for (const BenchStep& b : steps) {
    const double t = Median(b.seconds);
    const double bytes = cli::KvBytesRead(b.step), flops = cli::AttentionFlops(b.step);
    const double roofline = std::max(bytes / (bandwidth * 1e9), flops / (peak * 1e9));
    std::printf("%-32s %10.2f %9.2f %9.1f %12.2f %9.1f%%\n", b.name.c_str(), t * 1e3,
                bytes / t / 1e9, flops / t / 1e9, roofline * 1e3, 100.0 * roofline / t);
  }
  return 0;
}

}  // namespace
}  // namespace dynattn::bench

int main(int argc, char** argv) { return dynattn::bench::Main(argc, argv); }
