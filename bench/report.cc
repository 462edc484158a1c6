// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Table and JSON output of `dynattn bench`. Field names of the JSON are part of its interface
// (scripts read them); keep them stable.

#include "bench/report.h"

#include <cmath>

namespace dynattn::bench {
namespace {

/// A JSON string literal (the names here are plain ASCII, but quote and control characters are
/// escaped all the same).
std::string Quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

/// A JSON number, or null when not finite.
std::string Number(double value) {
  if (!std::isfinite(value)) return "null";
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", value);
  return text;
}

std::string Field(const char* name, const std::string& json_value) {
  return Quoted(name) + ": " + json_value;
}

/// `items` between `open` and `close`, separated by `separator`.
std::string Join(const char* open, const std::vector<std::string>& items, const char* separator,
                 const char* close) {
  std::string out = open;
  for (size_t i = 0; i < items.size(); ++i) out += (i == 0 ? "" : separator) + items[i];
  return out + close;
}

std::string RowJson(const RowResult& r) {
  return Join(
      "{",
      {Field("step", Quoted(r.step)), Field("kind", Quoted(r.kind)),
       Field("cache", Quoted(r.cache)), Field("cache_mode", Quoted(r.cache_mode)),
       Field("context", std::to_string(r.context)), Field("median_ms", Number(r.median_ms)),
       Field("gbps", Number(r.gbps)), Field("gflops", Number(r.gflops)),
       Field("roofline_ms", Number(r.roofline_ms)), Field("roofline_pct", Number(r.roofline_pct())),
       Field("vs_onednn", Number(r.vs_onednn())), Field("vs_eigen", Number(r.vs_eigen())),
       Field("onednn_ms", Number(r.onednn_ms)), Field("eigen_ms", Number(r.eigen_ms))},
      ", ", "}");
}

std::string BaselineJson(const BaselineResult& b) {
  return Join("{",
              {Field("shape", Quoted(b.shape)), Field("kind", Quoted(b.kind)),
               Field("cache", Quoted("f32")), Field("context", std::to_string(b.context)),
               Field("onednn_ms", Number(b.onednn_ms)), Field("eigen_ms", Number(b.eigen_ms)),
               Field("fp32_kv_bytes", Number(b.fp32_bytes)), Field("flops", Number(b.flops)),
               Field("onednn_implementations", Quoted(b.onednn_implementations))},
              ", ", "}");
}

std::string SharedPrefixJson(const SharedPrefixResult& r, const MachineLimits& machine) {
  return Join(
      "{",
      {Field("step", Quoted(r.step)), Field("cache", Quoted(r.cache)),
       Field("requests", std::to_string(r.requests)), Field("prefix", std::to_string(r.prefix)),
       Field("own", std::to_string(r.own)), Field("phase", Quoted(r.phase)),
       Field("unified_ms", Number(r.unified_ms)),
       Field("unified_cache_bytes", Number(r.unified_bytes)),
       Field("unified_gbps", Number(r.unified_gbps())),
       Field("unified_gflops", Number(r.unified_gflops())),
       Field("unified_bandwidth_pct", Number(100.0 * r.unified_gbps() / machine.bandwidth_gbps)),
       Field("decodes_ms", Number(r.decodes_ms)),
       Field("decodes_cache_bytes", Number(r.decodes_bytes)),
       Field("decodes_gbps", Number(r.decodes_gbps())),
       Field("decodes_gflops", Number(r.decodes_gflops())),
       Field("decodes_bandwidth_pct", Number(100.0 * r.decodes_gbps() / machine.bandwidth_gbps)),
       Field("flops", Number(r.flops)), Field("speedup", Number(r.speedup()))},
      ", ", "}");
}

template <typename T, typename ToJson>
std::string List(const std::vector<T>& items, ToJson to_json) {
  std::vector<std::string> texts;
  for (const T& item : items) texts.push_back(to_json(item));
  return Join("[\n    ", texts, ",\n    ", "\n  ]");
}

void PrintRows(const std::vector<RowResult>& rows, std::FILE* out) {
  if (rows.empty()) return;
  std::fprintf(out, "%-28s %9s %7s %8s %9s %8s %8s %8s\n", "step", "median ms", "GB/s", "GFLOP/s",
               "roofl. ms", "% roofl.", "vs oneDNN", "vs Eigen");
  for (const RowResult& r : rows) {
    std::fprintf(out, "%-28s %9.2f %7.2f %8.1f %9.2f %7.1f%% %8.2fx %7.2fx\n", r.step.c_str(),
                 r.median_ms, r.gbps, r.gflops, r.roofline_ms, r.roofline_pct(), r.vs_onednn(),
                 r.vs_eigen());
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

void PrintReport(const MachineLimits& machine, const std::vector<RowResult>& rows,
                 const std::vector<BaselineResult>& baselines,
                 const std::vector<SharedPrefixResult>& shared_prefix, std::FILE* out) {
  std::fprintf(out, "machine: %s, %d threads: read %.1f GB/s, fp32 FMA %.0f GFLOP/s\n",
               machine.target.c_str(), machine.threads, machine.bandwidth_gbps, machine.fma_gflops);
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
  std::vector<std::string> shared;
  for (const SharedPrefixResult& r : shared_prefix) shared.push_back(SharedPrefixJson(r, machine));
  const std::string json = Join(
      "{\n  ",
      {Field("bandwidth_gbps", Number(machine.bandwidth_gbps)),
       Field("fma_gflops", Number(machine.fma_gflops)),
       Field("threads", std::to_string(machine.threads)), Field("target", Quoted(machine.target)),
       Field("foreign_load_pct", Number(100.0 * machine.foreign_load)),
       Field("openmp_wait_policy", Quoted(machine.openmp_wait_policy)),
       Field("repetitions", std::to_string(repetitions)), Field("rows", List(rows, RowJson)),
       Field("baselines", List(baselines, BaselineJson)),
       Field("shared_prefix", Join("[\n    ", shared, ",\n    ", "\n  ]"))},
      ",\n  ", "\n}\n");
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return false;
  const bool written = std::fwrite(json.data(), 1, json.size(), file) == json.size();
  return std::fclose(file) == 0 && written;
}

}  // namespace dynattn::bench
