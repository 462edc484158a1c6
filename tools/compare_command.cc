// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `dynattn compare` (see the header): CLI11 parsing here, the comparison itself in bench/.

#include "tools/compare_command.h"

#include <CLI/CLI.hpp>
#include <string>

#include "tools/run_command.h"

namespace dynattn::cli {

#ifdef DYNATTN_HAVE_BENCH
CLI::App* AddCompareCommand(CLI::App* app, bench::CompareOptions* options) {
  CLI::App* compare = app->add_subcommand(
      "compare",
      "Time two builds of libdynattn against each other in one process: rows of the bench's step "
      "matrix through both libraries, call by call in alternating order; prints the median of "
      "the per-round time ratios new/old, its quartiles, and whether the outputs' bits agree");
  compare->add_option("old", options->old_library, "Path of the baseline libdynattn.so")
      ->required();
  compare->add_option("new", options->new_library, "Path of the library compared with it")
      ->required();
  compare->add_option("--rows", options->rows,
                      "Step-matrix rows whose name contains one of these comma-separated "
                      "substrings (default decode_8x4096_f16_paged,prefill_512_causal)");
  compare->add_option("--rounds", options->rounds, "Rounds of one call of each (default 15)")
      ->check(CLI::Range(1, 10000));
  compare->add_option("--threads", options->threads, "Threads of every call (default 1)")
      ->check(CLI::Range(1, 1024));
  compare
      ->add_option_function<std::string>(
          "--pin", [options](const std::string& pin) { options->pin = pin == "on"; },
          "Pin the calls' threads to CPUs: on (default) or off")
      ->check(CLI::IsMember({"on", "off"}));
  return compare;
}

int RunCompareCommand(const bench::CompareOptions& options) {
  bench::CompareOptions with_reporter = options;
  with_reporter.report_error = ReportError;  // the tool's one "dynattn: ..." line per error
  switch (bench::CompareLibraries(with_reporter)) {
    case bench::CompareOutcome::kDone:
      return kExitOk;
    case bench::CompareOutcome::kInvalid:
      return kExitInvalid;
    case bench::CompareOutcome::kFailed:
      break;
  }
  return kExitFailure;
}
#else
CLI::App* AddCompareCommand(CLI::App* app, bench::CompareOptions*) {
  CLI::App* compare =
      app->add_subcommand("compare", "(not built: needs the benchmark's oneDNN, Eigen and OpenMP)");
  compare->allow_extras();
  return compare;
}

int RunCompareCommand(const bench::CompareOptions&) {
  ReportError("this dynattn was built without the benchmark (meson option bench, oneDNN, Eigen)");
  return kExitFailure;
}
#endif

}  // namespace dynattn::cli
