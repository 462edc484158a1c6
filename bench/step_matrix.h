// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The fixed matrix of serving steps `dynattn bench` times, and the composed baselines' shape for
// each. Names are stable (scripts compare runs by them); the baselines depend only on the
// (seqlen, context) of the requests, so one baseline shape serves every cache type and mode.

#ifndef DYNATTN_BENCH_STEP_MATRIX_H_
#define DYNATTN_BENCH_STEP_MATRIX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "bench/fp32_batch.h"
#include "bench/serving_step.h"

namespace dynattn::bench {

/// One libdynattn row of the benchmark.
struct BenchRow {
  std::string step;      ///< Stable name, e.g. "decode_8x4096_int8_paged".
  std::string kind;      ///< "decode", "prefill" or "mixed".
  std::string baseline;  ///< The baseline shape it is compared with, e.g. "decode_8x4096".
  int64_t context = 0;   ///< Decode context, prompt length (prefill), largest context (mixed).
  StepShape shape;       ///< Llama-3-8B-like layer: 32/8 heads, D = 128, groups of 8.
};

/// The step matrix. `quick` keeps decode 8x4096 (f16, int8, int4), prefill 512 (f16, int8) and
/// the mixed step.
std::vector<BenchRow> StepMatrix(bool quick);

/// The rows whose step name contains one of the comma-separated substrings of `filter`, in
/// their order (all of them when `filter` is empty): `dynattn bench --rows`.
std::vector<BenchRow> SelectRows(std::vector<BenchRow> rows, const std::string& filter);

/// "f16", "int8" or "int4".
const char* CacheName(int quant_bit);

/// The cache of a step: "f16", "bf16", "fp8e4m3", "fp8e5m2", "int8" or "int4".
const char* CacheLabel(const StepShape& shape);

/// "paged" (cache_mode 1) or "offset" (cache_mode 0).
const char* CacheModeName(int cache_mode);

/// The composed baselines' requests for a step: the same (seqlen, context) per request.
std::vector<Fp32Request> BaselineRequests(const StepShape& shape);

}  // namespace dynattn::bench

#endif  // DYNATTN_BENCH_STEP_MATRIX_H_
