// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `dynattn compare OLD.so NEW.so`: two builds of the library timed against each other in one
// process on rows of the benchmark's step matrix (bench/compare.h).

#ifndef DYNATTN_TOOLS_COMPARE_COMMAND_H_
#define DYNATTN_TOOLS_COMPARE_COMMAND_H_

#include "bench/compare.h"  // CompareOptions only: the header needs nothing that bench/ links

namespace CLI {
class App;
}  // namespace CLI

namespace dynattn::cli {

CLI::App* AddCompareCommand(CLI::App* app, bench::CompareOptions* options);

int RunCompareCommand(const bench::CompareOptions& options);

}  // namespace dynattn::cli

#endif  // DYNATTN_TOOLS_COMPARE_COMMAND_H_
