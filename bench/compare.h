// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Two builds of libdynattn timed against each other in one process (`dynattn compare`): each
// shared library is loaded as its own copy (dlopen by path), and the step matrix's rows are run
// through both, call by call in alternating order. A machine whose speed drifts between runs
// (a shared VM moves by 30% from one minute to the next) drifts under both calls of a round
// alike, so the median of the per-round time ratios holds where two separate runs do not.

#ifndef DYNATTN_BENCH_COMPARE_H_
#define DYNATTN_BENCH_COMPARE_H_

#include <string>

#include "bench/benchmark.h"  // ErrorReporter

namespace dynattn::bench {

/// What `dynattn compare` runs.
struct CompareOptions {
  std::string old_library;  ///< Path of the baseline libdynattn.so.
  std::string new_library;  ///< Path of the library compared with it.
  /// Comma-separated substrings of step-matrix row names (as `dynattn bench --rows`).
  std::string rows = "decode_8x4096_f16_paged,prefill_512_causal";
  int rounds = 15;  ///< Rounds of one call of each library (the order alternates by round).
  int threads = 1;  ///< Threads of every call.
  bool pin = true;  ///< Pin the calls' threads to CPUs.
  ErrorReporter report_error;  ///< Where errors go; empty: "compare: MESSAGE" on stderr.
};

/// How a comparison ended.
enum class CompareOutcome {
  kDone,
  kInvalid,  ///< A library could not be loaded or no row matched (reported; nothing timed).
  kFailed,   ///< A call returned an error (reported).
};

/// Times each selected row through both libraries and prints, per row, each library's median
/// and fastest call, the median of the per-round ratios new / old with its quartiles, and
/// whether the two outputs have the same bits.
CompareOutcome CompareLibraries(const CompareOptions& options);

}  // namespace dynattn::bench

#endif  // DYNATTN_BENCH_COMPARE_H_
