// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Placeholder for `dynattn demo`: the subcommand exists so that the command-line surface is
// stable, and says plainly that it does nothing yet instead of pretending to succeed.

#include "src/cli/demo_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>

#include "src/cli/run_command.h"

namespace dynattn::cli {

CLI::App* AddDemoCommand(CLI::App* app) {
  return app->add_subcommand("demo", "Walk through the ops on a small example (not yet available)");
}

int RunDemoCommand() {
  std::fprintf(stderr, "demo: not yet implemented\n");
  return kExitFailure;
}

}  // namespace dynattn::cli
