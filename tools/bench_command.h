// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `dynattn bench`: the command line of the benchmark in bench/ (bench/benchmark.h). Without
// bench/ (meson option `bench` off, or oneDNN/Eigen/OpenMP missing) the command still exists, to
// say so.

#ifndef DYNATTN_TOOLS_BENCH_COMMAND_H_
#define DYNATTN_TOOLS_BENCH_COMMAND_H_

#include "bench/benchmark.h"  // BenchOptions only: the header needs nothing that bench/ links

namespace CLI {
class App;
}  // namespace CLI

namespace dynattn::cli {

/// Adds the `bench` subcommand to `app`; parsing fills `*options`.
CLI::App* AddBenchCommand(CLI::App* app, bench::BenchOptions* options);

/// Runs the benchmark and returns the tool's exit status, having reported any error.
int RunBenchCommand(const bench::BenchOptions& options);

}  // namespace dynattn::cli

#endif  // DYNATTN_TOOLS_BENCH_COMMAND_H_
