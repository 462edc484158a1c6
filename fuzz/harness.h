// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// One fuzz input through the library: decode (fuzz_input.h), build the tensors (outputs poisoned,
// every buffer snapshotted), call the op, then check the contract:
// * refused: a Status naming an input ("<name>: <rule>"), and every byte of every buffer (cache,
//   scales, outputs included) exactly as before;
// * accepted: inputs unchanged, every output element written (no poison left) and finite, and,
//   on the plan/run path, a second Run giving the same bits.
// A broken contract prints what broke and aborts, which libFuzzer reports as a crash.

#ifndef DYNATTN_FUZZ_HARNESS_H_
#define DYNATTN_FUZZ_HARNESS_H_

#include <cstddef>
#include <cstdint>

namespace dynattn_fuzz {

/// Runs one input; returns 0 (libFuzzer's convention), aborts on a broken contract.
int RunOneInput(const uint8_t* data, size_t size);

/// Counters over the inputs run so far (for the replay tool's summary).
struct Totals {
  int64_t inputs = 0;
  int64_t accepted = 0;  ///< Calls the library accepted and ran.
  int64_t refused = 0;   ///< Calls refused with a Status.
  int64_t skipped = 0;   ///< Inputs whose tensors exceed the harness's memory or work caps.
};
const Totals& RunTotals();

}  // namespace dynattn_fuzz

#endif  // DYNATTN_FUZZ_HARNESS_H_
