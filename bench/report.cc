// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Table and JSON output of `dynattn bench`. Field names of the JSON are part of its interface
// (scripts read them); keep them stable.

#include "bench/report.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>

namespace dynattn::bench {
namespace {

using Json = nlohmann::ordered_json;  // keys in the order written, as readers see them

/// A JSON number, or null when not finite.
Json Number(double value) { return std::isfinite(value) ? Json(value) : Json(nullptr); }

Json RowJson(const RowResult& r) {
  return {{"step", r.step},
          {"kind", r.kind},
          {"cache", r.cache},
          {"cache_mode", r.cache_mode},
          {"context", r.context},
          {"median_ms", Number(r.median_ms)},
          {"spread_pct", Number(r.spread_pct)},
          {"pinned_ms", r.pinned_ms > 0 ? Number(r.pinned_ms) : Json(nullptr)},
          {"pinned_spread_pct", r.pinned_ms > 0 ? Number(r.pinned_spread_pct) : Json(nullptr)},
          {"hot_ms", Number(r.hot_ms)},
          {"hot_gbps_per_core", Number(r.hot_gbps_per_core)},
          {"hot_gelems_per_core", Number(r.hot_gelems_per_core)},
          {"gbps", Number(r.gbps)},
          {"gflops", Number(r.gflops)},
          {"roofline_ms", Number(r.roofline_ms)},
          {"roofline_pct", Number(r.roofline_pct())},
          {"fma_peak_pct", Number(r.fma_peak_pct)},
          {"dot_peak_pct", r.dot_peak_pct >= 0 ? Number(r.dot_peak_pct) : Json(nullptr)},
          {"vs_onednn", Number(r.vs_onednn())},
          {"vs_eigen", Number(r.vs_eigen())},
          {"onednn_ms", Number(r.onednn_ms)},
          {"eigen_ms", Number(r.eigen_ms)}};
}

Json BaselineJson(const BaselineResult& b) {
  return {{"shape", b.shape},
          {"kind", b.kind},
          {"cache", "f32"},
          {"context", b.context},
          {"onednn_ms", Number(b.onednn_ms)},
          {"eigen_ms", Number(b.eigen_ms)},
          {"fp32_kv_bytes", Number(b.fp32_bytes)},
          {"flops", Number(b.flops)},
          {"onednn_implementations", b.onednn_implementations}};
}

Json SharedPrefixJson(const SharedPrefixResult& r, const MachineLimits& machine) {
  return {{"step", r.step},
          {"cache", r.cache},
          {"requests", r.requests},
          {"prefix", r.prefix},
          {"own", r.own},
          {"phase", r.phase},
          {"unified_ms", Number(r.unified_ms)},
          {"unified_cache_bytes", Number(r.unified_bytes)},
          {"unified_gbps", Number(r.unified_gbps())},
          {"unified_gflops", Number(r.unified_gflops())},
          {"unified_bandwidth_pct", Number(100.0 * r.unified_gbps() / machine.bandwidth_gbps)},
          {"decodes_ms", Number(r.decodes_ms)},
          {"decodes_cache_bytes", Number(r.decodes_bytes)},
          {"decodes_gbps", Number(r.decodes_gbps())},
          {"decodes_gflops", Number(r.decodes_gflops())},
          {"decodes_bandwidth_pct", Number(100.0 * r.decodes_gbps() / machine.bandwidth_gbps)},
          {"flops", Number(r.flops)},
          {"speedup", Number(r.speedup())}};
}

void PrintRows(const std::vector<RowResult>& rows, std::FILE* out) {
  if (rows.empty()) return;
  std::fprintf(out, "%-36s %9s %7s %7s %8s %6s %6s %9s %8s %8s %8s %12s %12s %9s %7s\n", "step",
               "median ms", "spread", "GB/s", "GFLOP/s", "% FMA", "% dot", "roofl. ms", "% roofl.",
               "vs oneDNN", "vs Eigen", "hot GB/s/c", "hot Gel/s/c", "pinned ms", "spread");
  for (const RowResult& r : rows) {
    char dot[16] = "-";
    if (r.dot_peak_pct >= 0) std::snprintf(dot, sizeof(dot), "%.0f%%", r.dot_peak_pct);
    std::fprintf(
        out,
        "%-36s %9.3f %6.0f%% %7.2f %8.1f %5.0f%% %6s %9.2f %7.1f%% %8.2fx %7.2fx %12.2f %12.2f",
        r.step.c_str(), r.median_ms, r.spread_pct, r.gbps, r.gflops, r.fma_peak_pct, dot,
        r.roofline_ms, r.roofline_pct(), r.vs_onednn(), r.vs_eigen(), r.hot_gbps_per_core,
        r.hot_gelems_per_core);
    if (r.pinned_ms > 0) {
      std::fprintf(out, " %9.3f %6.0f%%", r.pinned_ms, r.pinned_spread_pct);
    }
    std::fprintf(out, "\n");
  }
}

void PrintBaselines(const std::vector<BaselineResult>& baselines, std::FILE* out) {
  if (baselines.empty()) return;
  std::fprintf(out, "\ncomposed fp32 baselines (K/V fp32 head-major, GQA heads stacked):\n");
  std::fprintf(out, "%-28s %9s %9s %12s %12s\n", "shape", "oneDNN ms", "Eigen ms", "oneDNN GB/s",
               "oneDNN GF/s");
  for (const BaselineResult& b : baselines) {
    std::fprintf(out, "%-28s %9.2f %9.2f %12.2f %12.1f\n", b.shape.c_str(), b.onednn_ms, b.eigen_ms,
                 b.fp32_bytes / b.onednn_ms / 1e6, b.flops / b.onednn_ms / 1e6);
  }
  if (!baselines.empty()) {  // the last shape (mixed) uses every primitive kind
    const BaselineResult& last = baselines.back();
    std::fprintf(out, "oneDNN primitives (%s): %s\n", last.shape.c_str(),
                 last.onednn_implementations.c_str());
  }
}

/// One line of the shared-prefix table: one form of a step.
void PrintSharedPrefixLine(const std::string& step, const std::string& form, double ms,
                           double bytes, double flops, const MachineLimits& machine,
                           const std::string& speedup, std::FILE* out) {
  const double gbps = bytes / ms / 1e6;
  std::fprintf(out, "%-31s %-15s %9.2f %8.1f %7.2f %5.0f%% %8.1f %8s\n", step.c_str(), form.c_str(),
               ms, bytes / 1e6, gbps, 100.0 * gbps / machine.bandwidth_gbps, flops / ms / 1e6,
               speedup.c_str());
}

void PrintSharedPrefix(const std::vector<SharedPrefixResult>& shared_prefix,
                       const MachineLimits& machine, std::FILE* out) {
  if (shared_prefix.empty()) return;
  std::fprintf(out,
               "\nshared prefix: unified attention vs the same step as independent paged decodes "
               "(same cache):\n");
  std::fprintf(out, "%-31s %-15s %9s %8s %7s %6s %8s %8s\n", "step", "form (plan)", "median ms",
               "MB read", "GB/s", "% bw", "GFLOP/s", "speedup");
  for (const SharedPrefixResult& r : shared_prefix) {
    char speedup[32];
    std::snprintf(speedup, sizeof(speedup), "%.2fx", r.speedup());
    PrintSharedPrefixLine(r.step, "unified (" + r.phase + ")", r.unified_ms, r.unified_bytes,
                          r.flops, machine, speedup, out);
    PrintSharedPrefixLine("", "decodes", r.decodes_ms, r.decodes_bytes, r.flops, machine, "", out);
  }
}

}  // namespace

namespace {

/// ", bf16 dot 1234 GFLOP/s (AVX512_BF16), int8 dot 2345 GOP/s (AVX512_VNNI)", with "none"
/// for an instruction set the CPU lacks.
std::string DotPeaksText(const MachineLimits& machine) {
  const auto peak = [](const char* name, double value, const std::string& isa, const char* unit,
                       const char* lacking) {
    char text[96];
    if (isa.empty()) {
      std::snprintf(text, sizeof(text), ", %s dot none (no %s)", name, lacking);
    } else {
      std::snprintf(text, sizeof(text), ", %s dot %.0f %s (%s)", name, value, unit, isa.c_str());
    }
    return std::string(text);
  };
  return peak("bf16", machine.bf16_dot_gflops, machine.bf16_dot_isa, "GFLOP/s", "AVX512_BF16") +
         peak("int8", machine.int8_dot_gops, machine.int8_dot_isa, "GOP/s",
              "AVX512_VNNI or AVX_VNNI");
}

}  // namespace

void PrintReport(const MachineLimits& machine, const std::vector<RowResult>& rows,
                 const std::vector<BaselineResult>& baselines,
                 const std::vector<SharedPrefixResult>& shared_prefix, std::FILE* out) {
  std::fprintf(out,
               "machine: %s, %d threads: read %.1f GB/s (%.1f in the dimension-major keys' order), "
               "fp32 FMA %.0f GFLOP/s%s\n",
               machine.target.c_str(), machine.threads, machine.bandwidth_gbps,
               machine.dim_major_read_gbps, machine.fma_gflops, DotPeaksText(machine).c_str());
  std::fprintf(out, "baselines: OpenMP wait policy %s\n", machine.openmp_wait_policy.c_str());
  std::fprintf(out, "other processes used %.0f%% of the machine's CPU time while timing%s\n",
               100.0 * machine.foreign_load,
               machine.foreign_load > 0.1 ? " (figures are disturbed; rerun when it is idle)" : "");
  PrintRows(rows, out);
  PrintBaselines(baselines, out);
  PrintSharedPrefix(shared_prefix, machine, out);
}

bool WriteJson(const std::string& path, const MachineLimits& machine, int repetitions,
               const std::vector<RowResult>& rows, const std::vector<BaselineResult>& baselines,
               const std::vector<SharedPrefixResult>& shared_prefix) {
  Json json = {{"bandwidth_gbps", Number(machine.bandwidth_gbps)},
               {"dim_major_read_gbps", Number(machine.dim_major_read_gbps)},
               {"fma_gflops", Number(machine.fma_gflops)},
               {"bf16_dot_gflops",
                machine.bf16_dot_isa.empty() ? Json(nullptr) : Number(machine.bf16_dot_gflops)},
               {"bf16_dot_isa", machine.bf16_dot_isa},
               {"int8_dot_gops",
                machine.int8_dot_isa.empty() ? Json(nullptr) : Number(machine.int8_dot_gops)},
               {"int8_dot_isa", machine.int8_dot_isa},
               {"threads", machine.threads},
               {"target", machine.target},
               {"foreign_load_pct", Number(100.0 * machine.foreign_load)},
               {"openmp_wait_policy", machine.openmp_wait_policy},
               {"repetitions", repetitions},
               {"rows", Json::array()},
               {"baselines", Json::array()},
               {"shared_prefix", Json::array()}};
  for (const RowResult& r : rows) json["rows"].push_back(RowJson(r));
  for (const BaselineResult& b : baselines) json["baselines"].push_back(BaselineJson(b));
  for (const SharedPrefixResult& r : shared_prefix) {
    json["shared_prefix"].push_back(SharedPrefixJson(r, machine));
  }
  std::ofstream file(path);
  file << json.dump(2) << "\n";
  file.close();
  return static_cast<bool>(file);
}

namespace {

std::string Format(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), format, value);
  return text;
}

void MarkdownRows(const std::vector<RowResult>& rows, std::ostream& out) {
  if (rows.empty()) return;
  out << "\n| step | median ms | GB/s | GFLOP/s | % FMA peak | % bf16 dot peak | roofline ms | "
         "% roofline | vs oneDNN | vs Eigen | hot GB/s per core | hot G elements/s per core | "
         "pinned ms |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const RowResult& r : rows) {
    out << "| " << r.step << " | " << Format("%.3f", r.median_ms) << " | " << Format("%.2f", r.gbps)
        << " | " << Format("%.1f", r.gflops) << " | " << Format("%.1f%%", r.fma_peak_pct) << " | "
        << (r.dot_peak_pct >= 0 ? Format("%.1f%%", r.dot_peak_pct) : "-") << " | "
        << Format("%.2f", r.roofline_ms) << " | " << Format("%.1f%%", r.roofline_pct()) << " | "
        << Format("%.2fx", r.vs_onednn()) << " | " << Format("%.2fx", r.vs_eigen()) << " | "
        << Format("%.2f", r.hot_gbps_per_core) << " | " << Format("%.2f", r.hot_gelems_per_core)
        << " | " << (r.pinned_ms > 0 ? Format("%.3f", r.pinned_ms) : "-") << " |\n";
  }
}

void MarkdownBaselines(const std::vector<BaselineResult>& baselines, std::ostream& out) {
  if (baselines.empty()) return;
  out << "\nComposed fp32 baselines (K/V fp32 head-major, GQA heads stacked):\n\n"
         "| shape | oneDNN ms | Eigen ms | oneDNN GB/s | oneDNN GFLOP/s |\n|---|---|---|---|---|\n";
  for (const BaselineResult& b : baselines) {
    out << "| " << b.shape << " | " << Format("%.2f", b.onednn_ms) << " | "
        << Format("%.2f", b.eigen_ms) << " | " << Format("%.2f", b.fp32_bytes / b.onednn_ms / 1e6)
        << " | " << Format("%.1f", b.flops / b.onednn_ms / 1e6) << " |\n";
  }
}

void MarkdownSharedPrefix(const std::vector<SharedPrefixResult>& shared_prefix,
                          const MachineLimits& machine, std::ostream& out) {
  if (shared_prefix.empty()) return;
  out << "\nShared prefix: unified attention vs the same step as independent paged decodes:\n\n"
         "| step | form (plan) | median ms | MB read | GB/s | % bandwidth | GFLOP/s | speedup |\n"
         "|---|---|---|---|---|---|---|---|\n";
  for (const SharedPrefixResult& r : shared_prefix) {
    auto line = [&](const std::string& step, const std::string& form, double ms, double bytes,
                    const std::string& speedup) {
      const double gbps = bytes / ms / 1e6;
      out << "| " << step << " | " << form << " | " << Format("%.2f", ms) << " | "
          << Format("%.1f", bytes / 1e6) << " | " << Format("%.2f", gbps) << " | "
          << Format("%.0f%%", 100.0 * gbps / machine.bandwidth_gbps) << " | "
          << Format("%.1f", r.flops / ms / 1e6) << " | " << speedup << " |\n";
    };
    line(r.step, "unified (" + r.phase + ")", r.unified_ms, r.unified_bytes,
         Format("%.2fx", r.speedup()));
    line("", "decodes", r.decodes_ms, r.decodes_bytes, "");
  }
}

}  // namespace

bool WriteMarkdown(const std::string& path, const MachineLimits& machine, int repetitions,
                   const std::vector<RowResult>& rows, const std::vector<BaselineResult>& baselines,
                   const std::vector<SharedPrefixResult>& shared_prefix) {
  std::ofstream file(path);
  file << "Machine: " << machine.target << ", " << machine.threads << " threads: read "
       << Format("%.1f", machine.bandwidth_gbps) << " GB/s ("
       << Format("%.1f", machine.dim_major_read_gbps)
       << " in the dimension-major keys' order), fp32 FMA " << Format("%.0f", machine.fma_gflops)
       << " GFLOP/s" << DotPeaksText(machine) << "; medians of " << repetitions
       << " calls; other processes took " << Format("%.0f%%", 100.0 * machine.foreign_load)
       << " of the CPU time while timing.\n";
  MarkdownRows(rows, file);
  MarkdownBaselines(baselines, file);
  MarkdownSharedPrefix(shared_prefix, machine, file);
  file.close();
  return static_cast<bool>(file);
}

}  // namespace dynattn::bench
