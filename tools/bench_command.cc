// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `dynattn bench` (see the header): CLI11 parsing here, the benchmark itself in bench/.

#include "tools/bench_command.h"

#include <CLI/CLI.hpp>
#include <string>

#include "tools/run_command.h"

namespace dynattn::cli {

#ifdef DYNATTN_HAVE_BENCH
CLI::App* AddBenchCommand(CLI::App* app, bench::BenchOptions* options) {
  CLI::App* bench = app->add_subcommand(
      "bench", "Time serving steps against this machine's limits and oneDNN/Eigen baselines");
  bench->add_flag("--quick", options->quick,
                  "Decode 8x4096, prefill 512 and the mixed step only (no shared-prefix steps)");
  bench
      ->add_option("--only", options->only,
                   "Run one part alone: steps (the step matrix and its baselines), unified "
                   "(the shared-prefix steps, unified vs independent decodes) or overhead "
                   "(a tiny step's per-call cost, unified planning per step vs per layer, "
                   "per-layer attributes on one plan vs a plan per layer)")
      ->check(CLI::IsMember({"steps", "unified", "overhead"}));
  bench->add_option("--rows", options->rows,
                    "Only the step-matrix rows whose name contains one of these comma-separated "
                    "substrings, e.g. decode_8x4096_int8,prefill_512 (no shared-prefix steps)");
  bench->add_option("--threads", options->threads, "Threads of every measurement (default 2)")
      ->check(CLI::Range(1, 1024));
  bench->add_option("--repetitions", options->repetitions, "Timed calls per step (default 7)")
      ->check(CLI::Range(1, 1000));
  bench
      ->add_option("--pin", options->pin,
                   "libdynattn's threads pinned to CPUs (on), not (off), or both, each row timed "
                   "both ways (default both)")
      ->check(CLI::IsMember({"both", "on", "off"}));
  bench->add_option("--target", options->target,
                    "Force the CPU kernels' SIMD target, e.g. avx2 (default: the best one here)");
  bench->add_option("--json", options->json, "Also write the results to this JSON file");
  bench->add_option("--markdown", options->markdown,
                    "Also write the results as Markdown tables to this file (bench/README.md's "
                    "last run)");
  return bench;
}

int RunBenchCommand(const bench::BenchOptions& options) {
  bench::BenchOptions with_reporter = options;
  with_reporter.report_error = ReportError;  // the tool's one "dynattn: ..." line per error
  return bench::RunBenchmark(with_reporter) ? kExitOk : kExitFailure;
}
#else
CLI::App* AddBenchCommand(CLI::App* app, bench::BenchOptions*) {
  CLI::App* bench = app->add_subcommand("bench", "(not built: needs oneDNN, Eigen and OpenMP)");
  bench->allow_extras();
  return bench;
}

int RunBenchCommand(const bench::BenchOptions&) {
  ReportError("this dynattn was built without the benchmark (meson option bench, oneDNN, Eigen)");
  return kExitFailure;
}
#endif

}  // namespace dynattn::cli
