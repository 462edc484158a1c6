// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `dynattn bench`: one command that measures this machine's limits (read bandwidth, fp32 FMA
// peak) and, in the same run, times libdynattn on a fixed matrix of serving steps next to two
// composed fp32 baselines (oneDNN, Eigen), and unified attention on shared-prefix decode steps
// next to the same steps as independent decodes, so that every ratio it prints compares figures
// taken under the same conditions. Lives in bench/ (oneDNN, Eigen, OpenMP) so that the library and
// the rest of the tool build without those.

#ifndef DYNATTN_BENCH_BENCH_COMMAND_H_
#define DYNATTN_BENCH_BENCH_COMMAND_H_

#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace dynattn::bench {

/// The `bench` command line.
struct BenchOptions {
  bool quick = false;   ///< Only decode 8x4096, prefill 512 and the mixed step; no shared prefix.
  std::string only;     ///< "steps" or "unified" (the shared-prefix steps): that part alone.
  int threads = 2;      ///< Threads of libdynattn, of both baselines and of the machine figures.
  int repetitions = 7;  ///< Timed calls per step and per baseline shape (the median is reported).
  std::string json;     ///< Where to write the JSON results; empty for none.
};

/// Adds the `bench` subcommand to `app`; parsing fills `*options`.
CLI::App* AddBenchCommand(CLI::App* app, BenchOptions* options);

/// Runs the benchmark and returns the tool's exit status, having reported any error.
int RunBenchCommand(const BenchOptions& options);

}  // namespace dynattn::bench

#endif  // DYNATTN_BENCH_BENCH_COMMAND_H_
