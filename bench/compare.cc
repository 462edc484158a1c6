// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "bench/compare.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/serving_step.h"
#include "bench/step_matrix.h"
#include "dynattn/dynattn.h"
#include "reference/reference.h"

namespace dynattn::bench {
namespace {

using OpFn = Status (*)(const MultiHeadCacheAttentionAttrs&, const MultiHeadCacheAttentionArgs&,
                        const RunOptions&);

/// dynattn::MultiHeadCacheAttention(attrs, args, options) under the Itanium C++ ABI: the public
/// API of soname libdynattn.so.0, the same in every build of it.
constexpr const char* kOpSymbol =
    "_ZN7dynattn23MultiHeadCacheAttentionERKNS_28MultiHeadCacheAttentionAttrsERKNS_"
    "27MultiHeadCacheAttentionArgsERKNS_10RunOptionsE";

/// The op of the library at `path`, loaded as a copy of its own (RTLD_LOCAL: its symbols bind to
/// itself); null after reporting when it cannot be.
OpFn LoadOp(const std::string& path, const ErrorReporter& report) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    report(path + ": cannot load: " + dlerror());
    return nullptr;
  }
  void* op = dlsym(handle, kOpSymbol);
  if (op == nullptr) report(path + ": no dynattn::MultiHeadCacheAttention (not a libdynattn.so.0)");
  return reinterpret_cast<OpFn>(op);
}

/// The value below which a fraction `q` of `values` lies (nearest rank).
double Quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  return values[static_cast<size_t>(q * static_cast<double>(values.size() - 1) + 0.5)];
}

/// One row's calls: each library's times and the per-round ratios new / old.
struct RowTimes {
  std::vector<double> seconds[2];
  std::vector<double> ratios;
  bool same_bits = false;
};

/// Runs `step` through ops[0] (old) and ops[1] (new): one call each to warm up and compare
/// outputs, then `rounds` rounds of one timed call each, the first call of a round alternating.
bool TimeRow(Step* step, const OpFn ops[2], const CompareOptions& options, RowTimes* times) {
  const RunOptions run{.num_threads = options.threads, .pin_threads = options.pin};
  dynattn_ref::Array out[2];
  MultiHeadCacheAttentionArgs args[2] = {StepArgs(step, &out[0]), StepArgs(step, &out[1])};
  for (int lib = 0; lib < 2; ++lib) {
    const Status status = ops[lib](step->attrs, args[lib], run);
    if (!status.ok()) {
      options.report_error((lib == 0 ? options.old_library : options.new_library) + ": " +
                           status.message());
      return false;
    }
  }
  times->same_bits = out[0].bytes == out[1].bytes;
  for (int round = 0; round < options.rounds; ++round) {
    double seconds[2];
    for (int k = 0; k < 2; ++k) {
      const int lib = (round + k) % 2;
      const auto start = std::chrono::steady_clock::now();
      (void)ops[lib](step->attrs, args[lib], run);  // the same call succeeded above
      seconds[lib] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      times->seconds[lib].push_back(seconds[lib]);
    }
    times->ratios.push_back(seconds[1] / seconds[0]);
  }
  return true;
}

}  // namespace

CompareOutcome CompareLibraries(const CompareOptions& given) {
  CompareOptions options = given;
  if (!options.report_error) {
    options.report_error = [](const std::string& m) {
      std::fprintf(stderr, "compare: %s\n", m.c_str());
    };
  }
  const OpFn ops[2] = {LoadOp(options.old_library, options.report_error),
                       LoadOp(options.new_library, options.report_error)};
  if (ops[0] == nullptr || ops[1] == nullptr) return CompareOutcome::kInvalid;
  const std::vector<BenchRow> rows = SelectRows(StepMatrix(false), options.rows);
  if (rows.empty()) {
    options.report_error("no step-matrix row matches --rows " + options.rows +
                         " (dynattn bench lists them)");
    return CompareOutcome::kInvalid;
  }
  std::printf("old %s\nnew %s\n%d thread(s)%s, %d rounds of one call each, alternating\n",
              options.old_library.c_str(), options.new_library.c_str(), options.threads,
              options.pin ? " pinned" : "", options.rounds);
  std::printf("%-40s %10s %10s %10s %10s %9s %17s %5s\n", "step", "old ms", "old min", "new ms",
              "new min", "new/old", "quartiles", "bits");
  for (const BenchRow& row : rows) {
    Step step = BuildStep(row.shape, /*seed=*/2026);
    RowTimes times;
    if (!TimeRow(&step, ops, options, &times)) return CompareOutcome::kFailed;
    const auto ms = [&](int lib, double q) { return 1e3 * Quantile(times.seconds[lib], q); };
    std::printf("%-40s %10.3f %10.3f %10.3f %10.3f %9.3f   [%.3f, %.3f] %5s\n", row.step.c_str(),
                ms(0, 0.5), ms(0, 0.0), ms(1, 0.5), ms(1, 0.0), Quantile(times.ratios, 0.5),
                Quantile(times.ratios, 0.25), Quantile(times.ratios, 0.75),
                times.same_bits ? "same" : "DIFF");
    std::fflush(stdout);
  }
  return CompareOutcome::kDone;
}

}  // namespace dynattn::bench
