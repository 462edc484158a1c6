// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The `golden` command (see the header). Cases come from the test suites' generator and go
// through RunCommand unchanged: the writer only turns a case into input files and a RunRequest,
// so the golden outputs are by construction what `dynattn run` computes on the CPU.

#include "tools/golden_command.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>
#include <vector>

#include "reference/golden_matrix.h"
#include "tools/dtypes.h"
#include "tools/npy.h"
#include "tools/run_command.h"

namespace dynattn::cli {
namespace {

namespace fs = std::filesystem;

using dynattn_ref::Array;
using dynattn_ref::Case;
using dynattn_ref::GoldenSpec;

// A float attribute as the shortest text that reads back as the same float.
std::string RealText(double value) {
  char text[32];
  for (int digits = 6; digits <= 9; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
    if (std::strtof(text, nullptr) == static_cast<float>(value)) break;
  }
  return text;
}

// The value of one `run` attribute for a case, as text (unified attention always returns its
// lse, the other ops' cases keep their outputs); empty for an attribute not passed: cache_dtype
// when the case's cache dtype decides, return_lse outside unified attention.
std::string AttributeValue(const Case& c, const std::string& name) {
  const dynattn_ref::Attrs& a = c.attrs;
  const std::vector<std::pair<const char*, int>> values = {
      {"num_heads", a.num_heads},       {"head_dim", a.head_dim},
      {"is_causal", a.is_causal},       {"is_alibi", a.is_alibi},
      {"num_kv_heads", a.num_kv_heads}, {"num_layer", a.num_layer},
      {"layer_idx", a.layer_idx},       {"quant_bit", a.quant_bit},
      {"quant_group", a.quant_group},   {"num_repeat", a.num_repeat},
      {"cache_mode", a.cache_mode},     {"cache_layout", a.cache_layout},
      {"page_size", a.page_size},       {"block_size", a.block_size},
      {"window_left", a.window_left}};
  for (const auto& [key, value] : values) {
    if (name == key) return std::to_string(value);
  }
  if (name == "logits_soft_cap") return RealText(a.logits_soft_cap);
  if (name == "softmax_scale") return RealText(a.softmax_scale);
  if (name == "cache_dtype") return a.cache_dtype;
  if (name == "return_lse") return c.op == "unified_attention" ? "1" : "";
  if (name == "head_dim_v") return a.head_dim_v > 0 ? std::to_string(a.head_dim_v) : "";
  if (name == "value_from_key") return a.value_from_key != 0 ? "1" : "";
  if (name == "precision") return a.precision;
  return "";
}

// The `run` request that computes `c` from DIR/NAME/inputs into DIR/NAME/outputs.
RunRequest MakeRunRequest(const Case& c, const fs::path& case_dir) {
  RunRequest request;
  request.op = c.op;
  request.inputs_dir = (case_dir / "inputs").string();
  request.outputs_dir = (case_dir / "outputs").string();
  for (const std::string& name : OpAttributeNames(c.op)) {
    const std::string value = AttributeValue(c, name);
    if (!value.empty()) request.attributes.emplace_back(name, value);
  }
  return request;
}

Status WriteInputs(const Case& c, const std::string& dir) {
  for (const auto& [name, array] : c.inputs) {
    const std::string path = (fs::path(dir) / (name + ".npy")).string();
    DYNATTN_RETURN_IF_ERROR(WriteNpy(path, DTypeOf(array.dt), array.shape, array.bytes.data()));
  }
  return Status::Ok();
}

Status WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return Status::Invalid(path.string(), "cannot write");
  return Status::Ok();
}

// attributes.txt ("op NAME", then "ATTR VALUE" per line) and command.txt (the `run` line,
// relative to the case's directory, writing into a fresh directory `out`).
Status WriteDescription(const Case& c, const RunRequest& request, const fs::path& case_dir) {
  std::string attributes = "op " + c.op + "\n";
  std::string command = "dynattn run " + c.op + " --inputs inputs --outputs out";
  for (const auto& [name, value] : request.attributes) {
    attributes += name + " " + value + "\n";
    command += " --" + name + "=" + value;
  }
  DYNATTN_RETURN_IF_ERROR(WriteText(case_dir / "attributes.txt", attributes));
  return WriteText(case_dir / "command.txt", command + "\n");
}

Status PrepareOutputDir(const std::string& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error || !fs::is_directory(dir, error)) {
    return Status::Invalid("--outputs " + dir, "cannot be created as a directory");
  }
  if (!fs::is_empty(dir, error) || error) {
    return Status::Invalid("--outputs " + dir, "must be empty (or not exist yet)");
  }
  return Status::Ok();
}

Status MakeCaseDirs(const fs::path& case_dir) {
  std::error_code error;
  for (const char* sub : {"inputs", "outputs"}) {
    fs::create_directories(case_dir / sub, error);
    if (error) return Status::Invalid((case_dir / sub).string(), "cannot be created");
  }
  return Status::Ok();
}

// Writes one case; returns the exit status (RunCommand reports its own errors).
int WriteCase(const GoldenSpec& spec, const fs::path& root, std::string* manifest) {
  const Case c = dynattn_ref::MakeGoldenCase(spec);
  const fs::path case_dir = root / spec.name;
  const RunRequest request = MakeRunRequest(c, case_dir);
  Status status = MakeCaseDirs(case_dir);
  if (status.ok()) status = WriteInputs(c, request.inputs_dir);
  if (status.ok()) status = WriteDescription(c, request, case_dir);
  if (!status.ok()) {
    ReportError(status.message());
    return kExitFailure;
  }
  const int exit_code = RunCommand(request);
  if (exit_code != kExitOk) {
    ReportError("golden case " + spec.name + " failed: " + c.description);
    return exit_code;
  }
  *manifest += spec.name + "\t" + c.op + "\t" + c.description + "\n";
  return kExitOk;
}

}  // namespace

CLI::App* AddGoldenCommand(CLI::App* app, GoldenRequest* request) {
  request->seed = dynattn_ref::kGoldenSeed;
  CLI::App* golden = app->add_subcommand(
      "golden", "Write the fixed matrix of golden cases: inputs and the CPU's outputs as .npy");
  golden->add_option("--outputs", request->outputs_dir, "Directory to write (empty or new)")
      ->required();
  golden->add_option("--cases", request->cases, "Write only the first N cases (default: all)")
      ->check(CLI::NonNegativeNumber);
  golden->add_option("--seed", request->seed, "Base seed of the matrix")->capture_default_str();
  return golden;
}

int RunGoldenCommand(const GoldenRequest& request) {
  const Status status = PrepareOutputDir(request.outputs_dir);
  if (!status.ok()) {
    ReportError(status.message());
    return kExitInvalid;
  }
  std::vector<GoldenSpec> specs = dynattn_ref::GoldenMatrix(request.seed);
  if (request.cases > 0 && static_cast<size_t>(request.cases) < specs.size()) {
    specs.resize(request.cases);
  }
  std::string manifest = "# dynattn golden --seed " + std::to_string(request.seed) + ": " +
                         std::to_string(specs.size()) + " cases (name, op, description)\n";
  for (const GoldenSpec& spec : specs) {
    const int exit_code = WriteCase(spec, request.outputs_dir, &manifest);
    if (exit_code != kExitOk) return exit_code;
  }
  const Status written = WriteText(fs::path(request.outputs_dir) / "manifest.txt", manifest);
  if (!written.ok()) {
    ReportError(written.message());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace dynattn::cli
