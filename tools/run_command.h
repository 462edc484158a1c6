// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `dynattn run OP --inputs DIR --outputs OUTDIR [--threads N] [--ATTR VALUE ...]`: runs one PMX op
// (or unified attention) on tensors stored as .npy files, so that other implementations (the
// float64 reference, PPLNN, notebooks) can be compared with libdynattn through files, without
// linking to it.

#ifndef DYNATTN_TOOLS_RUN_COMMAND_H_
#define DYNATTN_TOOLS_RUN_COMMAND_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace dynattn::cli {

/// Exit statuses of the tool.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  ///< The inputs were fine but the work failed (I/O, memory).
inline constexpr int kExitInvalid = 2;  ///< Bad command line or invalid input; nothing written.

/// Prints "dynattn: <message>" as exactly one line on stderr.
void ReportError(const std::string& message);

/// The `run` command line as typed; values are checked by `RunCommand`.
struct RunRequest {
  std::string op;
  std::string inputs_dir;
  std::string outputs_dir;
  std::optional<std::string> threads;  ///< The --threads text, when given (even empty).
  /// (attribute name without "--", value) in command-line order.
  std::vector<std::pair<std::string, std::string>> attributes;
};

/// Adds the `run` subcommand to `app`; parsing fills `*request`.
CLI::App* AddRunCommand(CLI::App* app, RunRequest* request);

/// Runs a parsed `run` command and returns the exit status, having reported any error.
int RunCommand(const RunRequest& request);

/// The attributes `op` takes (without "--"), in the spec's order; empty for an unknown op.
std::vector<std::string> OpAttributeNames(const std::string& op);

}  // namespace dynattn::cli

#endif  // DYNATTN_TOOLS_RUN_COMMAND_H_
