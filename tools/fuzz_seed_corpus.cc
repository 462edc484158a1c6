// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// `fuzz_seed_corpus GOLDEN_DIR OUT_DIR`: the fuzz seed corpus from `dynattn golden`'s cases. Each
// case's op, attributes, tensor shapes, dtypes and index values become one fuzz input
// (fuzz_input.h); its data values are not carried (the harness generates them). So the fuzzer
// starts from every valid configuration of the golden matrix and mutates from there.

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "tools/npy.h"

namespace fs = std::filesystem;
using dynattn::DType;

namespace {

bool OpOf(const std::string& name, dynattn_fuzz::Op* op) {
  const std::map<std::string, dynattn_fuzz::Op> ops = {
      {"key_value_cache", dynattn_fuzz::Op::kKeyValueCache},
      {"multi_head_attention", dynattn_fuzz::Op::kMultiHeadAttention},
      {"multi_head_cache_attention", dynattn_fuzz::Op::kMultiHeadCacheAttention},
      {"unified_attention", dynattn_fuzz::Op::kUnified}};
  auto it = ops.find(name);
  if (it == ops.end()) return false;
  *op = it->second;
  return true;
}

/// "name value" lines of attributes.txt ("op NAME" included).
std::map<std::string, std::string> ReadAttributes(const fs::path& path) {
  std::map<std::string, std::string> values;
  std::ifstream in(path);
  std::string name, value;
  while (in >> name >> value) values[name] = value;
  return values;
}

void SetAttrs(const std::map<std::string, std::string>& values, dynattn_fuzz::Attrs* a) {
  const std::pair<const char*, int64_t*> fields[] = {
      {"num_heads", &a->num_heads},       {"num_kv_heads", &a->num_kv_heads},
      {"head_dim", &a->head_dim},         {"is_causal", &a->is_causal},
      {"is_alibi", &a->is_alibi},         {"num_layer", &a->num_layer},
      {"layer_idx", &a->layer_idx},       {"quant_bit", &a->quant_bit},
      {"quant_group", &a->quant_group},   {"cache_mode", &a->cache_mode},
      {"cache_layout", &a->cache_layout}, {"page_size", &a->page_size},
      {"num_repeat", &a->num_repeat},     {"block_size", &a->block_size}};
  for (const auto& [name, field] : fields) {
    auto it = values.find(name);
    if (it != values.end()) *field = std::stoll(it->second);
  }
}

/// The extension's attributes: window, soft-cap, softmax scale, and an fp8 cache's format.
void SetExt(const std::map<std::string, std::string>& values, dynattn_fuzz::Ext* ext) {
  auto value = [&values](const char* name) -> const std::string* {
    auto it = values.find(name);
    return it == values.end() ? nullptr : &it->second;
  };
  if (const std::string* v = value("window_left")) ext->window_left = std::stoll(*v);
  if (const std::string* v = value("logits_soft_cap")) ext->logits_soft_cap = std::stof(*v);
  if (const std::string* v = value("softmax_scale")) ext->softmax_scale = std::stof(*v);
  if (const std::string* v = value("head_dim_v")) ext->head_dim_v = std::stoll(*v);
  if (const std::string* v = value("value_from_key")) ext->value_from_key = *v != "0";
  if (const std::string* v = value("cache_dtype")) {
    ext->cache =
        *v == "fp8_e5m2" ? dynattn_fuzz::CacheChoice::kF8E5M2 : dynattn_fuzz::CacheChoice::kF8E4M3;
  }
}

/// The float32 values of an extra tensor (sinks, k_scale, v_scale), at most kMaxRealValues.
std::vector<float> RealValues(const dynattn::cli::NpyArray& a) {
  std::vector<float> values;
  if (a.dtype != DType::kF32) return values;
  const size_t n = a.bytes.size() / sizeof(float);
  for (size_t i = 0; i < n && i < dynattn_fuzz::kMaxRealValues; ++i) {
    values.push_back(reinterpret_cast<const float*>(a.bytes.data())[i]);
  }
  return values;
}

/// The tensor `name` of the case (inputs/ first, then outputs/), or false when it has none.
bool ReadTensor(const fs::path& case_dir, const std::string& name, dynattn::cli::NpyArray* out) {
  for (const char* sub : {"inputs", "outputs"}) {
    const fs::path path = case_dir / sub / (name + ".npy");
    if (fs::exists(path)) return dynattn::cli::ReadNpy(path.string(), out).ok();
  }
  return false;
}

int64_t IndexValue(const dynattn::cli::NpyArray& a, size_t i) {
  if (a.dtype == DType::kI32) return reinterpret_cast<const int32_t*>(a.bytes.data())[i];
  return reinterpret_cast<const int64_t*>(a.bytes.data())[i];
}

/// The fuzz input of one golden case; false when the case is not one of the fuzzed ops.
bool CaseToCall(const fs::path& case_dir, int ordinal, dynattn_fuzz::Call* call) {
  const auto values = ReadAttributes(case_dir / "attributes.txt");
  auto op = values.find("op");
  if (op == values.end() || !OpOf(op->second, &call->op)) return false;
  SetAttrs(values, &call->attrs);
  SetExt(values, &call->ext);
  call->flags.two_threads = ordinal % 2;
  call->flags.plan_run = (ordinal / 2) % 2;
  const auto precision = values.find("precision");  // golden fast cells, and a third of the rest
  call->flags.fast = (precision != values.end() && precision->second == "fast") || ordinal % 3 == 0;
  for (const dynattn_fuzz::TensorSpec& spec : dynattn_fuzz::AllTensors(call->op)) {
    dynattn_fuzz::TensorInput t;
    dynattn::cli::NpyArray a;
    if (ReadTensor(case_dir, spec.name, &a)) {
      t.present = true;
      t.rank = static_cast<int>(a.shape.size());
      for (int d = 0; d < t.rank && d < 6; ++d) t.shape[d] = a.shape[d];
      if (spec.role == dynattn_fuzz::Role::kActivation) {
        call->flags.f16 = a.dtype == DType::kF16;
        call->ext.bf16 = a.dtype == DType::kBF16;
      }
      if (spec.role == dynattn_fuzz::Role::kCache && a.dtype == DType::kBF16) {
        call->ext.cache = dynattn_fuzz::CacheChoice::kBF16;
      }
      if (spec.role == dynattn_fuzz::Role::kSinks ||
          spec.role == dynattn_fuzz::Role::kTensorScale) {
        t.real_values = RealValues(a);
      }
      if (spec.role == dynattn_fuzz::Role::kScale) call->flags.f32_scale = a.dtype == DType::kF32;
      if (spec.role == dynattn_fuzz::Role::kIndex) {
        call->flags.int32_index = a.dtype == DType::kI32;
        const size_t n = a.bytes.size() / dynattn::DTypeSize(a.dtype);
        for (size_t i = 0; i < n && i < dynattn_fuzz::kMaxIndexValues; ++i) {
          t.index_values.push_back(IndexValue(a, i));
        }
      }
    }
    call->tensors.push_back(t);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_seed_corpus GOLDEN_DIR OUT_DIR\n");
    return 2;
  }
  const fs::path golden(argv[1]), out(argv[2]);
  fs::create_directories(out);
  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(golden)) {
    if (fs::exists(entry.path() / "attributes.txt")) cases.push_back(entry.path());
  }
  std::sort(cases.begin(), cases.end());
  int written = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    dynattn_fuzz::Call call;
    if (!CaseToCall(cases[i], static_cast<int>(i), &call)) continue;
    std::ofstream file(out / cases[i].filename(), std::ios::binary);
    const std::string bytes = dynattn_fuzz::Encode(call);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ++written;
  }
  std::printf("%d seed inputs from %zu golden cases in %s\n", written, cases.size(), argv[1]);
  return written > 0 ? 0 : 1;
}
