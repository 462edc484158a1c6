// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Entry point of the `dynattn` tool. Parsing is CLI11's; the one rule kept here is that every
// failure, parse errors included, ends as a single "dynattn: ..." line on stderr with exit status
// 2, so that scripts can rely on one format.

#include <CLI/CLI.hpp>
#include <new>
#include <string>

#include "dynattn/version.h"
#include "tools/bench_command.h"
#include "tools/compare_command.h"
#include "tools/demo_command.h"
#include "tools/golden_command.h"
#include "tools/run_command.h"

namespace dynattn::cli {
namespace {

int Main(int argc, char** argv) {
  CLI::App app("dynattn: run libdynattn's PMX attention ops on .npy files", "dynattn");
  app.set_version_flag("--version", std::string("dynattn ") + DYNATTN_VERSION);
  app.require_subcommand(1);
  RunRequest run_request;
  CLI::App* run = AddRunCommand(&app, &run_request);
  CLI::App* demo = AddDemoCommand(&app);
  GoldenRequest golden_request;
  CLI::App* golden = AddGoldenCommand(&app, &golden_request);
  bench::BenchOptions bench_options;
  CLI::App* bench = AddBenchCommand(&app, &bench_options);
  bench::CompareOptions compare_options;
  CLI::App* compare = AddCompareCommand(&app, &compare_options);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& success) {  // --help or --version.
    return app.exit(success);
  } catch (const CLI::ParseError& error) {
    ReportError(std::string(error.what()) + " (see dynattn --help)");
    return kExitInvalid;
  }
  if (run->parsed()) return RunCommand(run_request);
  if (demo->parsed()) return RunDemoCommand();
  if (golden->parsed()) return RunGoldenCommand(golden_request);
  if (bench->parsed()) return RunBenchCommand(bench_options);
  if (compare->parsed()) return RunCompareCommand(compare_options);
  ReportError("no command given (see dynattn --help)");
  return kExitInvalid;
}

}  // namespace
}  // namespace dynattn::cli

int main(int argc, char** argv) {
  try {
    return dynattn::cli::Main(argc, argv);
  } catch (const std::bad_alloc&) {
    dynattn::cli::ReportError("out of memory");
    return dynattn::cli::kExitFailure;
  }
}
