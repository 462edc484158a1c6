// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// What `dynattn bench` prints and writes: the figures of every row relative to the machine's
// limits and to the composed baselines, as a table on stdout and as one JSON object (written by
// hand: the format is small and fixed, and the project takes no JSON dependency for it).

#ifndef DYNATTN_BENCH_REPORT_H_
#define DYNATTN_BENCH_REPORT_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace dynattn::bench {

/// The machine's limits, measured in the same run.
struct MachineLimits {
  std::string target;  ///< The kernels' target, e.g. "AVX3" or "AVX2 (forced)"; the limits are
                       ///< always measured with the machine's best one.
  int threads = 0;     ///< Threads of every measurement and of every timed call.
  double bandwidth_gbps = 0;  ///< Streaming read, all threads.
  /// Read in the dimension-major decode kernel's order (MeasureDimMajorReadBandwidth), all
  /// threads: what that layout leaves of bandwidth_gbps.
  double dim_major_read_gbps = 0;
  double fma_gflops = 0;  ///< fp32 FMA peak, all threads.
  /// bf16 dot-product peak (GFLOP/s) and int8 dot-product peak (G operations/s), all threads,
  /// with the instruction set each used: 0 and "" where the CPU has none (the fast tier then
  /// runs the exact kernels).
  double bf16_dot_gflops = 0, int8_dot_gops = 0;
  std::string bf16_dot_isa, int8_dot_isa;
  double foreign_load = 0;         ///< Share of all CPUs' time other processes took while timing.
  std::string openmp_wait_policy;  ///< OMP_WAIT_POLICY of the baselines, or "default".
};

/// Medians of the two composed fp32 baselines on one shape.
struct BaselineResult {
  std::string shape;    ///< e.g. "decode_8x4096".
  std::string kind;     ///< "decode", "prefill" or "mixed".
  int64_t context = 0;  ///< As BenchRow::context.
  double onednn_ms = 0;
  double eigen_ms = 0;
  double fp32_bytes = 0;  ///< fp32 K and V bytes read.
  double flops = 0;       ///< Causal-effective flops (as the libdynattn rows count them).
  std::string onednn_implementations;  ///< oneDNN's chosen primitive implementations.
};

/// One libdynattn row and its figures.
struct RowResult {
  std::string step, kind, cache, cache_mode;
  int64_t context = 0;
  double median_ms = 0;   ///< Unpinned threads (pinned when only those were timed).
  double spread_pct = 0;  ///< (slowest - fastest) / median of those calls, in percent.
  double pinned_ms = 0;   ///< Median with pinned threads; 0 when not timed (or the only mode).
  double pinned_spread_pct = 0;
  /// The row's hot step (HotShape: one request, one KV head, at most kHotKeys keys) on one
  /// thread with its K/V in the caches: the kernel's rate per core without the memory's limit.
  double hot_ms = 0;
  double hot_gbps_per_core = 0;    ///< Its KV bytes (own cache type) per second.
  double hot_gelems_per_core = 0;  ///< Its K and V elements per second, in billions.
  double gbps = 0;                 ///< KV bytes read (its own cache type) per second.
  double gflops = 0;               ///< Causal-effective flops per second.
  double roofline_ms = 0;          ///< max(bytes / bandwidth, flops / FMA peak).
  double fma_peak_pct = 0;         ///< gflops as a share of the fp32 FMA peak, in percent.
  /// For a fast row whose kernels take bf16 dot products (an fp16 or bf16 cache on a CPU with
  /// AVX512_BF16): gflops as a share of the bf16 dot peak, in percent; negative elsewhere.
  double dot_peak_pct = -1;
  double onednn_ms = 0;  ///< The baselines' medians on the same shape.
  double eigen_ms = 0;

  double roofline_pct() const { return 100.0 * roofline_ms / median_ms; }
  double vs_onednn() const { return onednn_ms / median_ms; }  ///< > 1: libdynattn faster.
  double vs_eigen() const { return eigen_ms / median_ms; }
};

/// A shared-prefix decode step through UnifiedAttention next to the same step as independent
/// decodes (MultiHeadCacheAttention, paged, over the same cache memory).
struct SharedPrefixResult {
  std::string step;    ///< e.g. "shared_prefix_64x2048+256_f16".
  std::string cache;   ///< "f16" or "int8".
  std::string phase;   ///< The unified plan's paths (UnifiedStepSummary::phase), e.g. "-su".
  int requests = 0;    ///< Decoding requests, one new token each.
  int64_t prefix = 0;  ///< Shared prefix tokens.
  int64_t own = 0;     ///< Cached tokens of each request after the prefix.
  double unified_ms = 0;
  double unified_bytes = 0;  ///< UnifiedStepSummary::cache_bytes_read.
  double decodes_ms = 0;
  double decodes_bytes = 0;  ///< Every context row of every request: K, V and scales.
  double flops = 0;          ///< 4 x (query, key) pairs x D x Hq, the same for both.

  double unified_gbps() const { return unified_bytes / unified_ms / 1e6; }
  double decodes_gbps() const { return decodes_bytes / decodes_ms / 1e6; }
  double unified_gflops() const { return flops / unified_ms / 1e6; }
  double decodes_gflops() const { return flops / decodes_ms / 1e6; }
  double speedup() const { return decodes_ms / unified_ms; }  ///< > 1: unified faster.
};

/// Prints the machine line, the rows table, the baselines table and the shared-prefix table to
/// `out`; an empty table is left out.
void PrintReport(const MachineLimits& machine, const std::vector<RowResult>& rows,
                 const std::vector<BaselineResult>& baselines,
                 const std::vector<SharedPrefixResult>& shared_prefix, std::FILE* out);

/// Writes the JSON object to `path`; false (with errno set by stdio) when it cannot be written.
bool WriteJson(const std::string& path, const MachineLimits& machine, int repetitions,
               const std::vector<RowResult>& rows, const std::vector<BaselineResult>& baselines,
               const std::vector<SharedPrefixResult>& shared_prefix);

/// Writes the same tables as Markdown to `path` (the machine, the rows, the baselines, the
/// shared-prefix steps), as bench/README.md shows its last run; false when it cannot be written.
bool WriteMarkdown(const std::string& path, const MachineLimits& machine, int repetitions,
                   const std::vector<RowResult>& rows, const std::vector<BaselineResult>& baselines,
                   const std::vector<SharedPrefixResult>& shared_prefix);

}  // namespace dynattn::bench

#endif  // DYNATTN_BENCH_REPORT_H_
