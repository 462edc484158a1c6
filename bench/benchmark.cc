// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The benchmark behind `dynattn bench` (see the header). Everything is built before the first timed
// call; then every step, every baseline shape and both forms of every shared-prefix step are called
// once per round (interleaved, so that the load of this shared machine weighs on all of them
// alike), each call after a cache flush (cold KV, as in a model whose layers each read their cache
// once per token), and medians are reported.

#include "bench/benchmark.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <vector>

#include "bench/baselines_eigen.h"
#include "bench/baselines_onednn.h"
#include "bench/machine.h"
#include "bench/overhead.h"
#include "bench/report.h"
#include "bench/shared_prefix.h"
#include "bench/step_matrix.h"

namespace dynattn::bench {
namespace {

/// One timed thing: a libdynattn step, or one baseline on one shape.
struct Timed {
  std::string label;
  std::function<bool()> call;  ///< False on failure, reported.
  std::vector<double> seconds;
  bool hot = false;  ///< Called once untimed, then timed without a cache flush.
};

/// The composed baselines on one shape, shared by every row of that shape.
struct Baseline {
  std::string shape, kind;
  int64_t context = 0;
  double flops = 0;
  std::unique_ptr<Fp32Batch> batch;
  std::unique_ptr<OneDnnAttention> onednn;
  std::unique_ptr<EigenAttention> eigen;
  size_t onednn_timed = 0, eigen_timed = 0;
};

/// A shared-prefix step, timed through UnifiedAttention and as independent decodes.
struct SharedPrefixBench {
  SharedPrefixStep step;
  dynattn_ref::Array unified_out, decodes_out;
  UnifiedStepSummary summary;
  size_t unified_timed = 0, decodes_timed = 0;
};

/// Everything one run holds. Vectors are filled before any pointer into them is taken.
struct Plan {
  std::vector<BenchRow> rows;
  std::vector<Step> steps;               ///< Per row.
  std::vector<dynattn_ref::Array> outs;  ///< Per row.
  std::vector<size_t> row_baseline;      ///< Per row: index into baselines.
  std::vector<size_t> row_timed;         ///< Per row: index into timed (unpinned, or the one mode).
  std::vector<size_t> row_pinned;        ///< Per row with pin "both": the pinned calls.
  std::vector<Step> hot_steps;           ///< Per row: its hot step (HotShape).
  std::vector<dynattn_ref::Array> hot_outs;
  std::vector<size_t> row_hot;  ///< Per row: the hot step's calls.
  std::vector<Baseline> baselines;
  std::vector<SharedPrefixBench> shared_prefix;
  std::vector<Timed> timed;
  ErrorReporter report_error;  ///< BenchOptions::report_error.
};

/// libgomp's default wait policy spins after each parallel region. When another process holds
/// one of the cores, the spinning thread keeps the one still working off the free core, and each
/// of oneDNN's many parallel regions stalls for a scheduler slice (decode 8x4096: 190 ms, against
/// 40 ms with passive waiting, on the 2-core VM; on the idle VM passive waiting costs up to about
/// 10%). OpenMP reads the policy once, at start-up, so unless the caller chose one (or a spin
/// count: GOMP_SPINCOUNT=300000 is libgomp's default), the command runs itself again with
/// OMP_WAIT_POLICY=passive. Returns only when that did not happen.
void RerunWithPassiveOpenMp() {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) {
    return;
  }
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  for (std::string arg; std::getline(file, arg, '\0');) args.push_back(arg);
  if (args.empty()) return;
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  setenv("OMP_WAIT_POLICY", "passive", 1);
  execv("/proc/self/exe", argv.data());
  unsetenv("OMP_WAIT_POLICY");  // exec failed: go on with the default policy
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Run-to-run spread of timed calls: (slowest - fastest) / median, in percent.
double SpreadPct(const std::vector<double>& v) {
  const auto [low, high] = std::minmax_element(v.begin(), v.end());
  return 100.0 * (*high - *low) / Median(v);
}

/// Progress on stderr: the current call on one rewritten line on a terminal, else one line per
/// round.
void ShowProgress(int round, int rounds, const std::string& label) {
  static const bool terminal = isatty(STDERR_FILENO) != 0;
  const std::string what =
      round == 0 ? "warm-up" : "round " + std::to_string(round) + "/" + std::to_string(rounds);
  if (terminal) {
    std::fprintf(stderr, "\r\033[K%s%s%s", what.c_str(), label.empty() ? "" : ": ", label.c_str());
  } else if (label.empty()) {
    std::fprintf(stderr, "%s\n", what.c_str());
  }
}

size_t FindOrAddBaseline(const BenchRow& row, Plan* plan) {
  for (size_t i = 0; i < plan->baselines.size(); ++i) {
    if (plan->baselines[i].shape == row.baseline) return i;
  }
  Baseline b;
  b.shape = row.baseline;
  b.kind = row.kind;
  b.context = row.context;
  plan->baselines.push_back(std::move(b));
  return plan->baselines.size() - 1;
}

void BuildSteps(Plan* plan) {
  uint64_t seed = 1;
  for (const BenchRow& row : plan->rows) {
    std::fprintf(stderr, "building %s ...\n", row.step.c_str());
    plan->steps.push_back(BuildStep(row.shape, seed));
    plan->hot_steps.push_back(BuildStep(HotShape(row.shape), seed++));
    plan->outs.emplace_back();
    plan->hot_outs.emplace_back();
    plan->row_baseline.push_back(FindOrAddBaseline(row, plan));
  }
}

void BuildBaselines(int threads, Plan* plan) {
  uint64_t seed = 1000;
  for (size_t r = 0; r < plan->rows.size(); ++r) {
    Baseline& b = plan->baselines[plan->row_baseline[r]];
    if (b.batch != nullptr) continue;
    std::fprintf(stderr, "building baselines for %s ...\n", b.shape.c_str());
    const StepShape& s = plan->rows[r].shape;
    b.flops = AttentionFlops(plan->steps[r]);
    b.batch = std::make_unique<Fp32Batch>(RandomFp32Batch(s.num_heads, s.num_kv_heads, s.head_dim,
                                                          BaselineRequests(s), seed++, s.head_dim_v,
                                                          s.latent));
    b.onednn = std::make_unique<OneDnnAttention>(b.batch.get(), threads);
    b.eigen = std::make_unique<EigenAttention>(b.batch.get(), threads);
  }
}

/// libdynattn on row `r`'s step, its threads pinned to CPUs or not.
Timed StepCall(Plan* plan, size_t r, int threads, bool pinned) {
  return {plan->rows[r].step + (pinned ? " (pinned)" : ""),
          [plan, r, threads, pinned] {
            RunOptions options;
            options.num_threads = threads;
            options.pin_threads = pinned;
            const Status s = RunStep(&plan->steps[r], &plan->outs[r], options);
            if (!s.ok()) plan->report_error(plan->rows[r].step + ": " + s.message());
            return s.ok();
          },
          {}};
}

/// libdynattn on row `r`'s hot step: one thread, its K/V left in the caches.
Timed HotCall(Plan* plan, size_t r) {
  return {plan->rows[r].step + " (hot)",
          [plan, r] {
            RunOptions options;
            options.num_threads = 1;
            const Status s = RunStep(&plan->hot_steps[r], &plan->hot_outs[r], options);
            if (!s.ok()) plan->report_error(plan->rows[r].step + " (hot): " + s.message());
            return s.ok();
          },
          {},
          true};
}

/// Builds the shared-prefix steps and their unified plans; false (reported) on failure.
bool BuildSharedPrefix(Plan* plan) {
  uint64_t seed = 2000;
  for (const SharedPrefixShape& shape : SharedPrefixSteps()) {
    std::fprintf(stderr, "building %s ...\n", SharedPrefixName(shape).c_str());
    SharedPrefixBench bench;
    bench.step = BuildSharedPrefixStep(shape, seed++);
    const Status s = DescribeUnified(&bench.step, &bench.summary);
    if (!s.ok()) {
      plan->report_error(SharedPrefixName(shape) + ": " + s.message());
      return false;
    }
    plan->shared_prefix.push_back(std::move(bench));
  }
  return true;
}

/// UnifiedAttention (or, with `decodes`, the independent decodes) on a shared-prefix step.
Timed SharedPrefixCall(SharedPrefixBench* b, bool decodes, int threads,
                       const ErrorReporter& report_error) {
  const std::string name = SharedPrefixName(b->step.shape);
  return {(decodes ? "decodes " : "unified ") + name,
          [b, decodes, threads, name, report_error] {
            RunOptions options;
            options.num_threads = threads;
            const Status s = decodes ? RunDecodes(&b->step, &b->decodes_out, options)
                                     : RunUnified(&b->step, &b->unified_out, options);
            if (!s.ok()) report_error(name + ": " + s.message());
            return s.ok();
          },
          {}};
}

/// The timed calls, grouped by shape: oneDNN, Eigen, then libdynattn's rows of that shape; then
/// each shared-prefix step, unified then as decodes.
void ListTimedCalls(int threads, const std::string& pin, Plan* plan) {
  plan->row_timed.assign(plan->rows.size(), 0);
  plan->row_pinned.assign(plan->rows.size(), 0);
  plan->row_hot.assign(plan->rows.size(), 0);
  for (size_t i = 0; i < plan->baselines.size(); ++i) {
    Baseline* b = &plan->baselines[i];
    b->onednn_timed = plan->timed.size();
    plan->timed.push_back({"oneDNN " + b->shape, [b] { return b->onednn->Run(), true; }, {}});
    b->eigen_timed = plan->timed.size();
    plan->timed.push_back({"Eigen " + b->shape, [b] { return b->eigen->Run(), true; }, {}});
    for (size_t r = 0; r < plan->rows.size(); ++r) {
      if (plan->row_baseline[r] != i) continue;
      plan->row_timed[r] = plan->timed.size();
      plan->timed.push_back(StepCall(plan, r, threads, pin == "on"));
      plan->row_hot[r] = plan->timed.size();
      plan->timed.push_back(HotCall(plan, r));
      if (pin != "both") continue;
      plan->row_pinned[r] = plan->timed.size();
      plan->timed.push_back(StepCall(plan, r, threads, true));
    }
  }
  for (SharedPrefixBench& b : plan->shared_prefix) {
    b.unified_timed = plan->timed.size();
    plan->timed.push_back(SharedPrefixCall(&b, false, threads, plan->report_error));
    b.decodes_timed = plan->timed.size();
    plan->timed.push_back(SharedPrefixCall(&b, true, threads, plan->report_error));
  }
}

/// One call after a cache flush (a hot one after an untimed call); its time is kept when `keep`.
bool TimeCall(Timed* t, bool keep) {
  if (t->hot) {
    if (!t->call()) return false;
  } else {
    FlushCaches();
  }
  const auto start = std::chrono::steady_clock::now();
  if (!t->call()) return false;
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  if (keep) t->seconds.push_back(took.count());
  return true;
}

/// A warm-up round (untimed), then `rounds` timed rounds; sets *foreign_load to the share of
/// the machine's CPU time that other processes took during the timed rounds.
bool RunRounds(int rounds, Plan* plan, double* foreign_load) {
  double foreign_start = 0;
  auto start = std::chrono::steady_clock::now();
  for (int round = 0; round <= rounds; ++round) {
    if (round == 1) {
      foreign_start = ForeignCpuSeconds();
      start = std::chrono::steady_clock::now();
    }
    ShowProgress(round, rounds, "");
    for (Timed& t : plan->timed) {
      ShowProgress(round, rounds, t.label);
      if (!TimeCall(&t, round > 0)) return false;
    }
  }
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start;
  *foreign_load = (ForeignCpuSeconds() - foreign_start) / (wall.count() * CpuCount());
  ShowProgress(rounds, rounds, "done\n");
  return true;
}

/// True when the row's kernels take bf16 dot products: a fast row over an fp16 or bf16 cache on
/// a machine that has them.
bool TakesBf16Dots(const StepShape& shape, const MachineLimits& machine) {
  const bool halves = shape.quant_bit == 0 &&
                      (shape.plain_cache == DType::kF16 || shape.plain_cache == DType::kBF16);
  return shape.precision == Precision::kFast && halves && !machine.bf16_dot_isa.empty();
}

RowResult Evaluate(const Plan& plan, size_t r, const MachineLimits& machine) {
  const BenchRow& row = plan.rows[r];
  const Baseline& b = plan.baselines[plan.row_baseline[r]];
  const std::vector<double>& timed = plan.timed[plan.row_timed[r]].seconds;
  const double seconds = Median(timed);
  const double bytes = KvBytesRead(plan.steps[r]);
  const double flops = AttentionFlops(plan.steps[r]);
  RowResult out;
  out.step = row.step;
  out.kind = row.kind;
  out.cache = CacheLabel(row.shape);
  out.cache_mode = CacheModeName(row.shape.cache_mode);
  out.context = row.context;
  out.median_ms = seconds * 1e3;
  out.spread_pct = SpreadPct(timed);
  if (plan.row_pinned[r] != 0) {
    const std::vector<double>& pinned = plan.timed[plan.row_pinned[r]].seconds;
    out.pinned_ms = Median(pinned) * 1e3;
    out.pinned_spread_pct = SpreadPct(pinned);
  }
  const double hot = Median(plan.timed[plan.row_hot[r]].seconds);
  out.hot_ms = hot * 1e3;
  out.hot_gbps_per_core = KvBytesRead(plan.hot_steps[r]) / hot / 1e9;
  out.hot_gelems_per_core = KvElementsRead(plan.hot_steps[r]) / hot / 1e9;
  out.gbps = bytes / seconds / 1e9;
  out.gflops = flops / seconds / 1e9;
  out.fma_peak_pct = 100.0 * out.gflops / machine.fma_gflops;
  if (TakesBf16Dots(row.shape, machine))
    out.dot_peak_pct = 100.0 * out.gflops / machine.bf16_dot_gflops;
  out.roofline_ms =
      1e3 * std::max(bytes / (machine.bandwidth_gbps * 1e9), flops / (machine.fma_gflops * 1e9));
  out.onednn_ms = Median(plan.timed[b.onednn_timed].seconds) * 1e3;
  out.eigen_ms = Median(plan.timed[b.eigen_timed].seconds) * 1e3;
  return out;
}

BaselineResult Summarize(const Plan& plan, const Baseline& b) {
  BaselineResult out;
  out.shape = b.shape;
  out.kind = b.kind;
  out.context = b.context;
  out.onednn_ms = Median(plan.timed[b.onednn_timed].seconds) * 1e3;
  out.eigen_ms = Median(plan.timed[b.eigen_timed].seconds) * 1e3;
  out.fp32_bytes = Fp32KvBytes(*b.batch);
  out.flops = b.flops;
  out.onednn_implementations = b.onednn->Implementations();
  return out;
}

SharedPrefixResult SummarizeSharedPrefix(const Plan& plan, const SharedPrefixBench& b) {
  const SharedPrefixShape& shape = b.step.shape;
  SharedPrefixResult out;
  out.step = SharedPrefixName(shape);
  out.cache = CacheName(shape.quant_bit);
  out.phase = b.summary.phase;
  out.requests = shape.requests;
  out.prefix = shape.prefix;
  out.own = shape.own;
  out.unified_ms = Median(plan.timed[b.unified_timed].seconds) * 1e3;
  out.unified_bytes = static_cast<double>(b.summary.cache_bytes_read);
  out.decodes_ms = Median(plan.timed[b.decodes_timed].seconds) * 1e3;
  out.decodes_bytes = DecodesCacheBytes(shape);
  out.flops = SharedPrefixFlops(shape);
  return out;
}

MachineLimits MeasureMachine(int threads) {
  std::fprintf(stderr, "measuring the machine (read bandwidth, FMA and dot-product peaks) ...\n");
  MachineLimits machine;
  machine.target = CpuTargetName();
  machine.threads = threads;
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  machine.openmp_wait_policy = policy != nullptr ? policy
                               : spin != nullptr ? std::string("spin count ") + spin
                                                 : "default";
  machine.bandwidth_gbps = MeasureReadBandwidth(threads);
  machine.dim_major_read_gbps = MeasureDimMajorReadBandwidth(threads);
  machine.fma_gflops = MeasureFmaPeak(threads);
  const DotPeak bf16 = MeasureBf16DotPeak(threads), int8 = MeasureInt8DotPeak(threads);
  machine.bf16_dot_gflops = bf16.gops;
  machine.bf16_dot_isa = bf16.isa;
  machine.int8_dot_gops = int8.gops;
  machine.int8_dot_isa = int8.isa;
  return machine;
}

bool Report(const BenchOptions& options, const MachineLimits& machine, const Plan& plan) {
  std::vector<RowResult> rows;
  for (size_t r = 0; r < plan.rows.size(); ++r) rows.push_back(Evaluate(plan, r, machine));
  std::vector<BaselineResult> baselines;
  for (const Baseline& b : plan.baselines) baselines.push_back(Summarize(plan, b));
  std::vector<SharedPrefixResult> shared_prefix;
  for (const SharedPrefixBench& b : plan.shared_prefix) {
    shared_prefix.push_back(SummarizeSharedPrefix(plan, b));
  }
  PrintReport(machine, rows, baselines, shared_prefix, stdout);
  if (!options.json.empty() &&
      !WriteJson(options.json, machine, options.repetitions, rows, baselines, shared_prefix)) {
    plan.report_error("cannot write " + options.json);
    return false;
  }
  if (!options.markdown.empty() && !WriteMarkdown(options.markdown, machine, options.repetitions,
                                                  rows, baselines, shared_prefix)) {
    plan.report_error("cannot write " + options.markdown);
    return false;
  }
  return true;
}

}  // namespace

/// The overhead part: a tiny step on 1 thread and on the bench's threads, unified planning, and
/// a model with per-layer attributes planned per step versus per layer.
void RunOverhead(const BenchOptions& options) {
  std::fprintf(stderr, "measuring per-call overhead ...\n");
  std::vector<TinyStepResult> tiny;
  for (const int threads : {1, options.threads}) {
    if (!tiny.empty() && tiny.back().threads == threads) continue;
    tiny.push_back(MeasureTinyStep(threads, 2000));
  }
  std::printf("\nkernels: %s%s\n", CpuTargetName(), options.target.empty() ? "" : " (forced)");
  std::vector<LayeredModelResult> layered;
  for (const int requests : {1, 64}) {
    layered.push_back(MeasureLayeredModel(options.threads, requests, options.repetitions));
  }
  PrintOverhead(tiny, MeasureUnifiedPlanning(options.threads, options.repetitions), layered,
                stdout);
}

bool RunBenchmark(const BenchOptions& options) {
  Plan plan;
  plan.report_error = options.report_error ? options.report_error : [](const std::string& message) {
    std::fprintf(stderr, "bench: %s\n", message.c_str());
  };
  const auto force_target = [&] {
    const Status forced = ForceCpuTarget(options.target.c_str());
    if (!forced.ok()) plan.report_error(forced.message());
    return forced.ok();
  };
  if (options.only == "overhead") {
    if (!force_target()) return false;
    RunOverhead(options);
    return true;
  }
  RerunWithPassiveOpenMp();
  // The limits are the machine's (its best target); the kernels may then be held to another.
  MachineLimits machine = MeasureMachine(options.threads);
  if (!force_target()) return false;
  if (!options.target.empty()) machine.target = std::string(CpuTargetName()) + " (forced)";
  if (options.only != "unified") plan.rows = SelectRows(StepMatrix(options.quick), options.rows);
  if (options.only != "unified" && plan.rows.empty()) {
    plan.report_error("--rows " + options.rows + " matches no step of the matrix");
    return false;
  }
  BuildSteps(&plan);
  BuildBaselines(options.threads, &plan);
  const bool shared_prefix =
      options.only == "unified" || (options.only.empty() && !options.quick && options.rows.empty());
  if (shared_prefix && !BuildSharedPrefix(&plan)) return false;
  ListTimedCalls(options.threads, options.pin, &plan);
  if (!RunRounds(options.repetitions, &plan, &machine.foreign_load)) return false;
  const bool ok = Report(options, machine, plan);
  if (ok && options.only.empty() && !options.quick && options.rows.empty()) RunOverhead(options);
  return ok;
}

}  // namespace dynattn::bench
