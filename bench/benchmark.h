// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The benchmark behind `dynattn bench` (its command line is the tool's, tools/bench_command.h):
// it measures this machine's limits (read bandwidth, fp32 FMA
// peak) and, in the same run, times libdynattn on a fixed matrix of serving steps next to two
// composed fp32 baselines (oneDNN, Eigen), and unified attention on shared-prefix decode steps
// next to the same steps as independent decodes, so that every ratio it prints compares figures
// taken under the same conditions. Lives in bench/ (oneDNN, Eigen, OpenMP) so that the library and
// the rest of the tool build without those; it depends on the library and the float64 reference
// only, never on the tool.

#ifndef DYNATTN_BENCH_BENCHMARK_H_
#define DYNATTN_BENCH_BENCHMARK_H_

#include <functional>
#include <string>

namespace dynattn::bench {

/// Receives each error of a run as one line (the tool prints it in its own format).
using ErrorReporter = std::function<void(const std::string& message)>;

/// What to run (the `bench` command line fills it).
struct BenchOptions {
  bool quick = false;  ///< Only decode 8x4096, prefill 512 and the mixed step; no shared prefix.
  std::string only;    ///< "steps" or "unified" (the shared-prefix steps): that part alone.
  /// Comma-separated substrings: only step-matrix rows whose name contains one of them (and no
  /// shared-prefix steps); empty: every row.
  std::string rows;
  int threads = 2;      ///< Threads of libdynattn, of both baselines and of the machine figures.
  int repetitions = 7;  ///< Timed calls per step and per baseline shape (the median is reported).
  /// libdynattn's step calls with threads unpinned ("off"), pinned to CPUs ("on"), or both,
  /// interleaved ("both": the table shows both medians and each one's run-to-run spread).
  std::string pin = "both";
  std::string target;    ///< A SIMD target to force (ForceCpuTarget), e.g. "avx2"; empty: the best.
  std::string json;      ///< Where to write the JSON results; empty for none.
  std::string markdown;  ///< Where to write the results as Markdown tables; empty for none.
  ErrorReporter report_error;  ///< Where errors go; empty: "bench: MESSAGE" on stderr.
};

/// Runs the benchmark, printing its tables on stdout (and the JSON file when asked); false when
/// a call or the JSON file failed, having reported it.
bool RunBenchmark(const BenchOptions& options);

}  // namespace dynattn::bench

#endif  // DYNATTN_BENCH_BENCHMARK_H_
