// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The `run` command. It is a thin, strict shell around the library: it reads the inputs named
// as in the spec, allocates the outputs with the shapes ops.h documents, lets the library
// validate everything, and writes files only after the call succeeded, so that a failed run
// never leaves a partial or stale output behind that a comparison script could pick up.

#include "tools/run_command.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string_view>
#include <system_error>

#include "dynattn/named_args.h"
#include "dynattn/op_signatures.h"
#include "dynattn/ops.h"
#include "tools/npy.h"
#include "tools/run_support.h"
#include "tools/unified_run.h"

namespace dynattn::cli {
namespace {

namespace fs = std::filesystem;

using run_support::Arrays;
using run_support::AttentionOutputShape;
using run_support::Attributes;
using run_support::Lookup;
using run_support::MakeCacheAttrs;
using run_support::PendingOutputs;
using run_support::PlanAllocateRun;

enum class OpKind {
  kKeyValueCache,
  kMultiHeadAttention,
  kMultiHeadCacheAttention,
  kUnifiedAttention,
};

// An op's input files from its tensor table (dynattn/op_signatures.h): the tensors it reads are
// required (roles Read, Index, Cache), its optional ones (Mask, Offsets, Host, Scale) are read when
// their file is there, and what it writes is an output.
struct InputLists {
  std::vector<std::string> required, optional;
  void Add(const char* name, std::string_view role) {
    if (role == "Read" || role == "Index" || role == "Cache") required.push_back(name);
    if (role == "Mask" || role == "Offsets" || role == "Host" || role == "Scale") {
      optional.push_back(name);
    }
  }
};
#define DYNATTN_CLI_INPUT(member, role) lists.Add(#member, #role);
#define DYNATTN_CLI_INPUTS(TENSORS) \
  [] {                              \
    InputLists lists;               \
    TENSORS(DYNATTN_CLI_INPUT)      \
    return lists;                   \
  }()

// What the tool needs to know about one op: its file inputs and its attributes (pmx-ops §4-§6,
// unified-and-ksana §1 for unified_attention).
struct OpSpec {
  const char* name;
  OpKind kind;
  InputLists inputs;
  std::vector<std::string> attributes;
};

// How an attribute's text is read.
enum class AttrKind { kInt, kBool, kReal, kName };

// One attribute of the tool: its name, kind and default (as text).
struct AttributeDef {
  const char* name;
  AttrKind kind;
  const char* default_text;
};

// Attributes with the PPLNN parser's defaults, in the spec's order, then unified attention's own
// (block_size has no default: 0 is rejected, so it must be given), then the score attributes
// (sliding window, soft-cap, softmax scale), the fp8 cache format and the numerics tier. An empty
// cache_dtype means "the cache file's own dtype".
const std::vector<AttributeDef>& AttributeDefaults() {
  static const std::vector<AttributeDef> defaults = {
      {"num_heads", AttrKind::kInt, "0"},        {"head_dim", AttrKind::kInt, "0"},
      {"is_causal", AttrKind::kBool, "1"},       {"is_alibi", AttrKind::kBool, "0"},
      {"num_kv_heads", AttrKind::kInt, "0"},     {"num_layer", AttrKind::kInt, "1"},
      {"layer_idx", AttrKind::kInt, "0"},        {"quant_bit", AttrKind::kInt, "0"},
      {"quant_group", AttrKind::kInt, "8"},      {"num_repeat", AttrKind::kInt, "1"},
      {"cache_mode", AttrKind::kInt, "0"},       {"cache_layout", AttrKind::kInt, "0"},
      {"page_size", AttrKind::kInt, "128"},      {"block_size", AttrKind::kInt, "0"},
      {"return_lse", AttrKind::kBool, "0"},      {"window_left", AttrKind::kInt, "-1"},
      {"logits_soft_cap", AttrKind::kReal, "0"}, {"softmax_scale", AttrKind::kReal, "0"},
      {"cache_dtype", AttrKind::kName, ""},      {"head_dim_v", AttrKind::kInt, "0"},
      {"value_from_key", AttrKind::kBool, "0"},  {"precision", AttrKind::kName, "exact"},
  };
  return defaults;
}

// multi_head_attention's value file may be absent: with value_from_key the values are the keys'
// (the library names a missing one otherwise).
InputLists MhaInputs() {
  InputLists lists = DYNATTN_CLI_INPUTS(DYNATTN_MULTI_HEAD_ATTENTION_TENSORS);
  lists.required.erase(std::find(lists.required.begin(), lists.required.end(), "value"));
  lists.optional.insert(lists.optional.begin(), "value");
  return lists;
}

// unified_attention's cache is a PMX cache file here (the library takes a BlockCache view of it).
InputLists UnifiedInputs() {
  InputLists lists = DYNATTN_CLI_INPUTS(DYNATTN_UNIFIED_ATTENTION_TENSORS);
  lists.required.push_back("cache");
  lists.optional.insert(lists.optional.begin(), "scale");
  return lists;
}

const std::vector<OpSpec>& OpSpecs() {
  static const std::vector<OpSpec> specs = {
      {"key_value_cache",
       OpKind::kKeyValueCache,
       DYNATTN_CLI_INPUTS(DYNATTN_KEY_VALUE_CACHE_TENSORS),
       {"num_layer", "layer_idx", "quant_bit", "quant_group", "num_repeat", "cache_mode",
        "cache_layout", "page_size", "cache_dtype"}},
      {"multi_head_attention",
       OpKind::kMultiHeadAttention,
       MhaInputs(),
       {"num_heads", "head_dim", "is_causal", "is_alibi", "num_kv_heads", "return_lse",
        "window_left", "logits_soft_cap", "softmax_scale", "head_dim_v", "value_from_key",
        "precision"}},
      {"multi_head_cache_attention",
       OpKind::kMultiHeadCacheAttention,
       DYNATTN_CLI_INPUTS(DYNATTN_MULTI_HEAD_CACHE_ATTENTION_TENSORS),
       {"num_heads", "head_dim", "is_causal", "is_alibi", "num_kv_heads", "num_layer", "layer_idx",
        "quant_bit", "quant_group", "cache_mode", "cache_layout", "page_size", "return_lse",
        "window_left", "logits_soft_cap", "softmax_scale", "cache_dtype", "precision"}},
      {"unified_attention",
       OpKind::kUnifiedAttention,
       UnifiedInputs(),
       {"num_heads", "head_dim", "num_kv_heads", "num_layer", "layer_idx", "quant_bit",
        "quant_group", "cache_layout", "block_size", "is_alibi", "return_lse", "window_left",
        "logits_soft_cap", "softmax_scale", "cache_dtype", "precision"}},
  };
  return specs;
}

const AttributeDef& DefinitionOf(const std::string& name) {
  for (const AttributeDef& def : AttributeDefaults()) {
    if (name == def.name) return def;
  }
  return AttributeDefaults().front();  // unreachable: every op's attribute is defined
}

bool Contains(const std::vector<std::string>& list, const std::string& item) {
  for (const std::string& entry : list) {
    if (entry == item) return true;
  }
  return false;
}

std::string JoinNames(const std::vector<std::string>& names, const char* prefix) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) text += (i > 0 ? ", " : "") + (prefix + names[i]);
  return text;
}

Status FindOp(const std::string& name, const OpSpec** spec) {
  for (const OpSpec& candidate : OpSpecs()) {
    if (name == candidate.name) {
      *spec = &candidate;
      return Status::Ok();
    }
  }
  return Status::Invalid("OP '" + name + "'",
                         "unknown op; expected key_value_cache, multi_head_attention, "
                         "multi_head_cache_attention or unified_attention");
}

// Parses a whole string as an int in [min, max].
bool ParseInt(const std::string& text, int64_t min, int64_t max, int* value) {
  int64_t parsed = 0;
  const char* end = text.data() + text.size();
  auto [ptr, error] = std::from_chars(text.data(), end, parsed);
  if (error != std::errc() || ptr != end || parsed < min || parsed > max) return false;
  *value = static_cast<int>(parsed);
  return true;
}

// Parses a whole string as a float (any spelling std::from_chars takes, "nan" and "inf"
// included: whether a value is allowed is the library's rule, reported with its message).
bool ParseReal(const std::string& text, float* value) {
  const char* end = text.data() + text.size();
  auto [ptr, error] = std::from_chars(text.data(), end, *value);
  return error == std::errc() && ptr == end && !text.empty();
}

// The fp8 formats a uint8 cache file can be read as.
Status ParseCacheDType(const std::string& text, DType* dtype) {
  if (text == "fp8_e4m3") {
    *dtype = DType::kF8E4M3;
  } else if (text == "fp8_e5m2") {
    *dtype = DType::kF8E5M2;
  } else {
    return Status::Invalid("--cache_dtype", "'" + text + "' is not fp8_e4m3 or fp8_e5m2");
  }
  return Status::Ok();
}

Status ParseAttribute(const AttributeDef& def, const std::string& text, Attributes* attributes) {
  const std::string flag = std::string("--") + def.name;
  int integer = 0;
  switch (def.kind) {
    case AttrKind::kBool:
      if (!ParseInt(text, 0, 1, &integer)) {
        return Status::Invalid(flag, "'" + text + "' is not 0 or 1");
      }
      attributes->ints[def.name] = integer;
      return Status::Ok();
    case AttrKind::kInt:
      if (!ParseInt(text, std::numeric_limits<int>::min(), std::numeric_limits<int>::max(),
                    &integer)) {
        return Status::Invalid(flag, "'" + text + "' is not an integer in the int32 range");
      }
      attributes->ints[def.name] = integer;
      return Status::Ok();
    case AttrKind::kReal: {
      float real = 0.0f;
      if (!ParseReal(text, &real)) {
        return Status::Invalid(flag, "'" + text + "' is not a number");
      }
      attributes->reals[def.name] = real;
      return Status::Ok();
    }
    case AttrKind::kName: {
      if (def.name == std::string("precision")) {
        if (text != "exact" && text != "fast") {
          return Status::Invalid(flag, "'" + text + "' is not exact or fast");
        }
        attributes->names[def.name] = text;
        return Status::Ok();
      }
      DType ignored = DType::kF32;
      DYNATTN_RETURN_IF_ERROR(ParseCacheDType(text, &ignored));
      attributes->names[def.name] = text;
      return Status::Ok();
    }
  }
  return Status::Ok();
}

// Checks every given attribute against the op and fills in the defaults of the others.
Status ParseAttributes(const OpSpec& spec, const RunRequest& request, Attributes* attributes) {
  for (const auto& [name, text] : request.attributes) {
    if (!Contains(spec.attributes, name)) {
      return Status::Invalid("--" + name, std::string("is not an attribute of ") + spec.name +
                                              " (it takes " + JoinNames(spec.attributes, "--") +
                                              ")");
    }
    DYNATTN_RETURN_IF_ERROR(ParseAttribute(DefinitionOf(name), text, attributes));
  }
  for (const AttributeDef& def : AttributeDefaults()) {
    const bool given = attributes->ints.count(def.name) + attributes->reals.count(def.name) +
                           attributes->names.count(def.name) >
                       0;
    if (given) continue;
    if (def.kind == AttrKind::kName) {
      attributes->names[def.name] = def.default_text;
    } else {
      DYNATTN_RETURN_IF_ERROR(ParseAttribute(def, def.default_text, attributes));
    }
  }
  return Status::Ok();
}

Status ParseThreads(const std::optional<std::string>& text, RunOptions* options) {
  if (!text.has_value()) return Status::Ok();  // given empty, it is refused like any non-number
  constexpr int kMaxThreads = 1024;            // the library's limit (RunOptions::num_threads)
  if (!ParseInt(*text, 0, kMaxThreads, &options->num_threads)) {
    return Status::Invalid("--threads", "'" + *text + "' is not an integer in [0, 1024]");
  }
  return Status::Ok();
}

Status CheckOutputDir(const std::string& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    return Status::Invalid("--outputs " + dir, "is not an existing directory");
  }
  fs::directory_iterator entries(dir, error);
  if (error) return Status::Invalid("--outputs " + dir, "cannot be listed: " + error.message());
  if (entries != fs::directory_iterator()) {
    return Status::Invalid("--outputs " + dir,
                           "must be empty but holds '" + entries->path().filename().string() + "'");
  }
  return Status::Ok();
}

// The input directory must exist, and every .npy in it must be an input of the op, so that a
// misspelled optional input (which would silently be left out) is caught.
bool IsInputOfAnyOp(const std::string& name) {
  for (const OpSpec& spec : OpSpecs()) {
    if (Contains(spec.inputs.required, name) || Contains(spec.inputs.optional, name)) return true;
  }
  return false;
}

Status CheckInputDir(const std::string& dir, const OpSpec& spec) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    return Status::Invalid("--inputs " + dir, "is not an existing directory");
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const fs::path& path = entry.path();
    if (path.extension() != ".npy") continue;
    const std::string name = path.stem().string();
    // Inputs of other ops are ignored (a golden-file writer may leave them); any other name is
    // most likely a misspelled optional input, which must not be dropped silently.
    if (!IsInputOfAnyOp(name)) {
      return Status::Invalid(path.string(), "'" + name + "' is not an input of " + spec.name +
                                                " (it takes " +
                                                JoinNames(spec.inputs.required, "") + ", " +
                                                JoinNames(spec.inputs.optional, "") + ")");
    }
  }
  if (error) return Status::Invalid("--inputs " + dir, "cannot be listed: " + error.message());
  return Status::Ok();
}

std::string InputPath(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / (name + ".npy")).string();
}

Status LoadInputs(const std::string& dir, const OpSpec& spec, Arrays* arrays) {
  for (const std::string& name : spec.inputs.required) {
    const std::string path = InputPath(dir, name);
    std::error_code error;
    if (!fs::exists(path, error)) {
      return Status::Invalid(path, "required input '" + name + "' of " + spec.name + " is missing");
    }
    DYNATTN_RETURN_IF_ERROR(ReadNpy(path, &(*arrays)[name]));
  }
  for (const std::string& name : spec.inputs.optional) {
    const std::string path = InputPath(dir, name);
    std::error_code error;
    // An optional input is absent only when nothing is there: a dangling link is a broken input.
    if (fs::exists(fs::symlink_status(path, error))) {
      DYNATTN_RETURN_IF_ERROR(ReadNpy(path, &(*arrays)[name]));
    }
  }
  return Status::Ok();
}

// A uint8 file holds fp8 bytes whose format only --cache_dtype names, and only the cache may
// be fp8: any other uint8 input, a uint8 cache without --cache_dtype, or --cache_dtype with a
// cache of another dtype is refused, so that no byte is ever read in a format nobody chose.
Status ResolveFp8Inputs(const std::string& dir, const Attributes& attributes, Arrays* arrays) {
  const std::string& cache_dtype = attributes.Name("cache_dtype");
  for (auto& [name, array] : *arrays) {
    if (!array.fp8_bytes || (name == "cache" && !cache_dtype.empty())) continue;
    return Status::Invalid(
        InputPath(dir, name),
        name == "cache" ? "a uint8 cache holds fp8 bytes: name their format with "
                          "--cache_dtype fp8_e4m3 or fp8_e5m2"
                        : "uint8 data is accepted only for an fp8 cache (with --cache_dtype)");
  }
  if (cache_dtype.empty()) return Status::Ok();
  auto cache = arrays->find("cache");
  if (cache == arrays->end() || !cache->second.fp8_bytes) {
    const std::string got = cache == arrays->end() ? "none" : DTypeName(cache->second.dtype);
    return Status::Invalid("--cache_dtype",
                           cache_dtype + " needs a uint8 cache.npy (its fp8 bytes), got " + got);
  }
  return ParseCacheDType(cache_dtype, &cache->second.dtype);
}

// kvstarts[B] when kvstarts looks sane, else 0 (the library then reports what is wrong).
int64_t GatheredRows(const Arrays& inputs) {
  const NpyArray& kvstarts = inputs.at("kvstarts");
  if (kvstarts.dtype != DType::kI64 || kvstarts.shape.size() != 1 || kvstarts.shape[0] < 1) {
    return 0;
  }
  int64_t last = 0;
  std::memcpy(&last, kvstarts.bytes.data() + (kvstarts.bytes.size() - sizeof(last)), sizeof(last));
  return last >= 0 && last <= (int64_t{1} << 31) ? last : 0;
}

AttentionAttrs MakeAttentionAttrs(const Attributes& attributes) {
  AttentionAttrs attention;
  attention.num_heads = attributes.at("num_heads");
  attention.head_dim = attributes.at("head_dim");
  attention.head_dim_v = static_cast<int>(attributes.at("head_dim_v"));
  attention.value_from_key = attributes.at("value_from_key") != 0;
  attention.is_causal = attributes.at("is_causal") != 0;
  attention.is_alibi = attributes.at("is_alibi") != 0;
  attention.num_kv_heads = attributes.at("num_kv_heads");
  run_support::SetScoreAttrs(attributes, &attention);
  return attention;
}

Status CallKeyValueCache(const Attributes& attributes, const RunOptions& options, Arrays& inputs,
                         PendingOutputs* pending, Arrays* outputs) {
  KeyValueCacheAttrs attrs;
  attrs.cache = MakeCacheAttrs(attributes);
  attrs.num_repeat = attributes.at("num_repeat");
  const NpyArray& current_key = inputs.at("current_key");
  std::vector<int64_t> shape = {GatheredRows(inputs), 0, 0};
  if (current_key.shape.size() == 3) {
    shape[1] = SaturatingMul(current_key.shape[1], std::max(attrs.num_repeat, 0));
    shape[2] = current_key.shape[2];
  }
  pending->Add("key", current_key.dtype, shape);
  pending->Add("value", current_key.dtype, shape);
  return PlanAllocateRun(
      options, inputs, pending, outputs,
      [&](const TensorLookup& t, Plan* plan) {
        return PlanKeyValueCache(attrs, KeyValueCacheArgsByName(t), plan);
      },
      [](const Plan& plan, const TensorLookup& t, Context* context) {
        return RunKeyValueCache(plan, KeyValueCacheArgsByName(t), context);
      });
}

Status CallMultiHeadAttention(const Attributes& attributes, const RunOptions& options,
                              Arrays& inputs, PendingOutputs* pending, Arrays* outputs) {
  const NpyArray& query = inputs.at("query");
  const AttentionAttrs attrs = MakeAttentionAttrs(attributes);
  pending->Add("attn_output", query.dtype, AttentionOutputShape(query, attrs.head_dim_v));
  AddLseIfAsked(attributes, query, pending);
  return PlanAllocateRun(
      options, inputs, pending, outputs,
      [&](const TensorLookup& t, Plan* plan) {
        return PlanMultiHeadAttention(attrs, MultiHeadAttentionArgsByName(t), plan);
      },
      [](const Plan& plan, const TensorLookup& t, Context* context) {
        return RunMultiHeadAttention(plan, MultiHeadAttentionArgsByName(t), context);
      });
}

Status CallMultiHeadCacheAttention(const Attributes& attributes, const RunOptions& options,
                                   Arrays& inputs, PendingOutputs* pending, Arrays* outputs) {
  const NpyArray& query = inputs.at("query");
  pending->Add("attn_output", query.dtype, AttentionOutputShape(query));
  AddLseIfAsked(attributes, query, pending);
  MultiHeadCacheAttentionAttrs attrs;
  attrs.attention = MakeAttentionAttrs(attributes);
  attrs.cache = MakeCacheAttrs(attributes);
  return PlanAllocateRun(
      options, inputs, pending, outputs,
      [&](const TensorLookup& t, Plan* plan) {
        return PlanMultiHeadCacheAttention(attrs, MultiHeadCacheAttentionArgsByName(t), plan);
      },
      [](const Plan& plan, const TensorLookup& t, Context* context) {
        return RunMultiHeadCacheAttention(plan, MultiHeadCacheAttentionArgsByName(t), context);
      });
}

Status CallOp(const OpSpec& spec, const Attributes& attributes, const RunOptions& options,
              Arrays& inputs, PendingOutputs* pending, Arrays* outputs) {
  switch (spec.kind) {
    case OpKind::kKeyValueCache:
      return CallKeyValueCache(attributes, options, inputs, pending, outputs);
    case OpKind::kMultiHeadAttention:
      return CallMultiHeadAttention(attributes, options, inputs, pending, outputs);
    case OpKind::kMultiHeadCacheAttention:
      return CallMultiHeadCacheAttention(attributes, options, inputs, pending, outputs);
    case OpKind::kUnifiedAttention:
      return CallUnifiedAttention(attributes, options, inputs, pending, outputs);
  }
  return Status::Invalid(spec.name, "unhandled op");
}

// The files a successful run writes: its outputs, then the in-out cache and scale.
std::vector<std::pair<std::string, const NpyArray*>> FilesToWrite(const Arrays& inputs,
                                                                  const Arrays& outputs) {
  std::vector<std::pair<std::string, const NpyArray*>> files;
  for (const auto& [name, array] : outputs) files.emplace_back(name, &array);
  for (const char* in_out : {"cache", "scale"}) {
    auto it = inputs.find(in_out);
    if (it != inputs.end()) files.emplace_back(in_out, &it->second);
  }
  return files;
}

void RemoveAll(const std::vector<std::string>& paths) {
  std::error_code ignored;
  for (const std::string& path : paths) fs::remove(path, ignored);
}

// Writes every file under a temporary name, then renames them all; on any failure removes
// whatever it wrote, so the directory is left as empty as it was found.
Status WriteOutputFiles(const std::string& dir,
                        const std::vector<std::pair<std::string, const NpyArray*>>& files) {
  std::vector<std::string> temporaries;
  for (const auto& [name, array] : files) {
    temporaries.push_back((fs::path(dir) / ("." + name + ".npy.partial")).string());
    Status status = WriteNpy(temporaries.back(), *array);
    if (!status.ok()) {
      RemoveAll(temporaries);
      return status;
    }
  }
  std::vector<std::string> finals;
  for (size_t i = 0; i < files.size(); ++i) {
    finals.push_back(InputPath(dir, files[i].first));
    std::error_code error;
    fs::rename(temporaries[i], finals.back(), error);
    if (error) {
      finals.pop_back();
      RemoveAll(finals);
      RemoveAll(temporaries);
      return Status::Invalid(InputPath(dir, files[i].first), "cannot write: " + error.message());
    }
  }
  return Status::Ok();
}

// Everything up to and including the library call; any failure here is an invalid input.
Status PrepareAndCall(const RunRequest& request, Arrays* inputs, PendingOutputs* pending,
                      Arrays* outputs) {
  const OpSpec* spec = nullptr;
  DYNATTN_RETURN_IF_ERROR(FindOp(request.op, &spec));
  Attributes attributes;
  DYNATTN_RETURN_IF_ERROR(ParseAttributes(*spec, request, &attributes));
  RunOptions options;
  DYNATTN_RETURN_IF_ERROR(ParseThreads(request.threads, &options));
  DYNATTN_RETURN_IF_ERROR(CheckOutputDir(request.outputs_dir));
  DYNATTN_RETURN_IF_ERROR(CheckInputDir(request.inputs_dir, *spec));
  DYNATTN_RETURN_IF_ERROR(LoadInputs(request.inputs_dir, *spec, inputs));
  DYNATTN_RETURN_IF_ERROR(ResolveFp8Inputs(request.inputs_dir, attributes, inputs));
  return CallOp(*spec, attributes, options, *inputs, pending, outputs);
}

// "Attribute of key_value_cache, multi_head_cache_attention (default 8)".
std::string AttributeHelp(const AttributeDef& def) {
  std::vector<std::string> ops;
  for (const OpSpec& spec : OpSpecs()) {
    if (Contains(spec.attributes, def.name)) ops.push_back(spec.name);
  }
  std::string help = "Attribute of " + JoinNames(ops, "");
  if (def.name == std::string("precision")) {
    return help + ": exact or fast, the numerics tier (default exact)";
  }
  if (def.kind == AttrKind::kName) {
    return help + ": fp8_e4m3 or fp8_e5m2, the format of a uint8 cache.npy (no default)";
  }
  return help + " (default " + def.default_text + ")";
}

const char* TypeName(AttrKind kind) {
  switch (kind) {
    case AttrKind::kInt:
    case AttrKind::kBool:
      return "INT";
    case AttrKind::kReal:
      return "REAL";
    case AttrKind::kName:
      return "NAME";
  }
  return "TEXT";
}

}  // namespace

void ReportError(const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!line.empty() && line.back() == ' ') line.pop_back();
  std::fprintf(stderr, "dynattn: %s\n", line.c_str());
}

CLI::App* AddRunCommand(CLI::App* app, RunRequest* request) {
  CLI::App* run = app->add_subcommand(
      "run", "Run one op on the .npy files of a directory and write its outputs as .npy files");
  run->add_option("OP", request->op,
                  "key_value_cache, multi_head_attention, multi_head_cache_attention or "
                  "unified_attention")
      ->required();
  run->add_option("--inputs", request->inputs_dir, "Directory with one NAME.npy per input")
      ->required();
  run->add_option("--outputs", request->outputs_dir, "Existing empty directory for the outputs")
      ->required();
  run->add_option_function<std::string>(
         "--threads", [request](const std::string& value) { request->threads = value; },
         "Worker threads (0 = all cores)")
      ->type_name("INT");
  for (const AttributeDef& def : AttributeDefaults()) {
    const std::string attribute = def.name;
    run->add_option_function<std::string>(
           "--" + attribute,
           [request, attribute](const std::string& value) {
             request->attributes.emplace_back(attribute, value);
           },
           AttributeHelp(def))
        ->type_name(TypeName(def.kind));
  }
  return run;
}

std::vector<std::string> OpAttributeNames(const std::string& op) {
  const OpSpec* spec = nullptr;
  if (!FindOp(op, &spec).ok()) return {};
  return spec->attributes;
}

int RunCommand(const RunRequest& request) {
  Arrays inputs;
  Arrays outputs;
  PendingOutputs pending;
  Status status = PrepareAndCall(request, &inputs, &pending, &outputs);
  if (!status.ok()) {
    ReportError(status.message());
    return pending.out_of_memory() ? kExitFailure : kExitInvalid;
  }
  status = WriteOutputFiles(request.outputs_dir, FilesToWrite(inputs, outputs));
  if (!status.ok()) {
    ReportError(status.message());
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace dynattn::cli
