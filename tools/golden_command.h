// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `dynattn golden --outputs DIR [--cases N] [--seed S]`: writes the fixed golden matrix
// (reference/golden_matrix.h) as files, inputs and the CPU's outputs, so that another
// backend or implementation (the CUDA module, a notebook, PPLNN) can be checked against the CPU
// case by case without linking to the test suites. Every case is computed by the `run` command's
// own code, so `dynattn run` on a case's inputs reproduces its outputs byte for byte.

#ifndef DYNATTN_TOOLS_GOLDEN_COMMAND_H_
#define DYNATTN_TOOLS_GOLDEN_COMMAND_H_

#include <cstdint>
#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace dynattn::cli {

/// The `golden` command line as typed.
struct GoldenRequest {
  std::string outputs_dir;  ///< Created when missing; must be empty when it exists.
  int cases = 0;            ///< Only the first N cases of the matrix; 0 = all of them.
  uint64_t seed = 0;        ///< Base seed of the matrix (set to its default by AddGoldenCommand).
};

/// Adds the `golden` subcommand to `app`; parsing fills `*request`.
CLI::App* AddGoldenCommand(CLI::App* app, GoldenRequest* request);

/// Writes the matrix and returns the exit status, having reported any error. Per case:
/// DIR/NAME/inputs/*.npy, DIR/NAME/outputs/*.npy, DIR/NAME/attributes.txt and
/// DIR/NAME/command.txt; DIR/manifest.txt lists the cases.
int RunGoldenCommand(const GoldenRequest& request);

}  // namespace dynattn::cli

#endif  // DYNATTN_TOOLS_GOLDEN_COMMAND_H_
