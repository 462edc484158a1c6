// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// Shared pieces of the `run` command (see the header).

#include "tools/run_support.h"

#include <unistd.h>

#include <limits>

namespace dynattn::cli::run_support {
namespace {

int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(pages) * page_size;
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "(";
  for (size_t i = 0; i < shape.size(); ++i) text += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return text + ")";
}

}  // namespace

Status AllocateOutput(const std::string& name, DType dtype, const std::vector<int64_t>& shape,
                      Arrays* outputs) {
  int64_t bytes = static_cast<int64_t>(DTypeSize(dtype));
  for (int64_t extent : shape) {
    if (__builtin_mul_overflow(bytes, extent, &bytes)) bytes = std::numeric_limits<int64_t>::max();
  }
  if (bytes > PhysicalMemoryBytes()) {
    return Status::Invalid(name, "output of shape " + ShapeText(shape) + " needs " +
                                     std::to_string(bytes) + " bytes, more than this machine has");
  }
  (*outputs)[name] = MakeZeroArray(dtype, shape);
  return Status::Ok();
}

TensorLookup Lookup(Arrays& inputs, Arrays* outputs) {
  return [&inputs, outputs](const std::string& name) {
    for (Arrays* arrays : {outputs, &inputs}) {
      auto it = arrays->find(name);
      if (it != arrays->end()) return it->second.View();
    }
    return TensorView();
  };
}

std::vector<int64_t> AttentionOutputShape(const NpyArray& query) {
  if (query.shape.size() == 3) return query.shape;
  return {0, 0, 0};
}

CacheAttrs MakeCacheAttrs(const Attributes& attributes) {
  CacheAttrs cache;
  cache.num_layer = attributes.at("num_layer");
  cache.layer_idx = attributes.at("layer_idx");
  cache.quant_bit = attributes.at("quant_bit");
  cache.quant_group = attributes.at("quant_group");
  cache.cache_mode = attributes.at("cache_mode");
  cache.cache_layout = attributes.at("cache_layout");
  cache.page_size = attributes.at("page_size");
  return cache;
}

}  // namespace dynattn::cli::run_support
