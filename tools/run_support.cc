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

void PendingOutputs::Add(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  pending_.push_back({name, dtype, shape});
}

TensorLookup PendingOutputs::Lookup(Arrays& inputs) const {
  return [this, &inputs](const std::string& name) {
    for (const Pending& output : pending_) {
      if (output.name == name) {
        return TensorView::Dense(nullptr, output.dtype, static_cast<int>(output.shape.size()),
                                 output.shape.data());
      }
    }
    auto it = inputs.find(name);
    return it != inputs.end() ? it->second.View() : TensorView();
  };
}

Status PendingOutputs::Allocate(Arrays* outputs) {
  for (const Pending& output : pending_) {
    int64_t bytes = static_cast<int64_t>(DTypeSize(output.dtype));
    for (int64_t extent : output.shape) bytes = SaturatingMul(bytes, extent);
    if (bytes > PhysicalMemoryBytes()) {
      out_of_memory_ = true;
      return Status::Invalid(output.name, "output of shape " + ShapeText(output.shape) + " needs " +
                                              std::to_string(bytes) +
                                              " bytes, more than this machine has");
    }
    (*outputs)[output.name] = MakeZeroArray(output.dtype, output.shape);
  }
  pending_.clear();
  return Status::Ok();
}

Status PlanAllocateRun(const RunOptions& options, Arrays& inputs, PendingOutputs* pending,
                       Arrays* outputs, const PlanCall& plan_call, const RunCall& run_call) {
  Plan plan;
  DYNATTN_RETURN_IF_ERROR(plan_call(pending->Lookup(inputs), &plan));
  DYNATTN_RETURN_IF_ERROR(pending->Allocate(outputs));
  ContextOptions context_options;
  context_options.num_threads = options.num_threads;
  Context context(context_options);
  return run_call(plan, Lookup(inputs, outputs), &context);
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

std::vector<int64_t> AttentionOutputShape(const NpyArray& query, int head_dim_v) {
  if (query.shape.size() != 3) return {0, 0, 0};
  std::vector<int64_t> shape = query.shape;
  if (head_dim_v > 0) shape[2] = head_dim_v;
  return shape;
}

void AddLseIfAsked(const Attributes& attributes, const NpyArray& query, PendingOutputs* pending) {
  if (attributes.at("return_lse") == 0) return;
  std::vector<int64_t> shape = {0, 0};
  if (query.shape.size() == 3) shape = {query.shape[0], query.shape[1]};
  pending->Add("lse", DType::kF32, shape);
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
