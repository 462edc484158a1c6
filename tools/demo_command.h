// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `dynattn demo`: a self-contained walk through the ops for a first-time user. Kept apart from
// `run` so that the file-driven command stays small and strict.

#ifndef DYNATTN_TOOLS_DEMO_COMMAND_H_
#define DYNATTN_TOOLS_DEMO_COMMAND_H_

namespace CLI {
class App;
}  // namespace CLI

namespace dynattn::cli {

/// Adds the `demo` subcommand to `app`.
CLI::App* AddDemoCommand(CLI::App* app);

/// Runs the demo and returns the exit status.
int RunDemoCommand();

}  // namespace dynattn::cli

#endif  // DYNATTN_TOOLS_DEMO_COMMAND_H_
