// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "src/ops/op_pipeline.h"

#include "core/softmax_state.h"
#include "src/validate.h"

namespace dynattn::internal {

Status StartPlan(const CacheDesc& cache, Precision precision, const char* input,
                 std::unique_ptr<PlanState>* state) {
  const BackendKernels* kernels = KernelsFor(cache.device, cache, precision);
  if (kernels == nullptr) return NoBackend(input, cache.device);
  *state = std::make_unique<PlanState>();
  (*state)->kernels = kernels;
  return Status::Ok();
}

void RecordTensors(const DataTensors& tensors, PlanState* state) {
  state->tensors.assign(tensors.tensors.begin(), tensors.tensors.begin() + tensors.count);
}

Status CheckTensors(const PlanState& state, const DataTensors& tensors) {
  for (int i = 0; i < tensors.count; ++i) {
    DYNATTN_RETURN_IF_ERROR(state.CheckTensor(tensors.tensors[i].name, tensors.tensors[i].view));
  }
  return Status::Ok();
}

WriteProblem WriteFor(const WriteProblem& planned, const TensorView& current_key,
                      const TensorView& current_value, const CacheDesc& cache) {
  WriteProblem write = planned;
  write.current_key = current_key.data;
  write.current_value = current_value.data;
  write.key_row_stride = RowStride(current_key);
  write.value_row_stride = RowStride(current_value);
  write.kv.cache = cache;
  return write;
}

namespace {

Status ApplyLayer(const LayerAttrs* layer, AttentionProblem* attention) {
  if (layer == nullptr) return Status::Ok();
  DYNATTN_RETURN_IF_ERROR(
      CheckScoreOptions(layer->window_left, layer->logits_soft_cap, layer->softmax_scale));
  DYNATTN_RETURN_IF_ERROR(CheckSinks(layer->sinks, attention->num_heads));
  attention->window_left = layer->window_left;
  attention->soft_cap = layer->logits_soft_cap;
  attention->score_scale = ScoreScale(layer->softmax_scale, attention->head_dim);
  attention->sinks = layer->sinks.present() ? layer->sinks.As<const float>() : nullptr;
  return Status::Ok();
}

}  // namespace

Status AttentionFor(const AttentionProblem& planned, const RunActivations& tensors,
                    const CacheDesc& cache, const LayerAttrs* layer, AttentionProblem* attention) {
  *attention = planned;
  SetActivations(tensors.query, tensors.output, attention);
  attention->mask = planned.mask != nullptr ? tensors.mask.data : nullptr;
  attention->lse = tensors.lse.present() ? tensors.lse.As<float>() : nullptr;
  attention->kv.cache = cache;
  return ApplyLayer(layer, attention);
}

void RecordCache(const TensorView& tensor, const TensorView& scale, bool quantized,
                 const CacheDesc* raw, const CacheDesc& desc, PlanState* state) {
  state->cache.raw = raw != nullptr;
  if (raw == nullptr) {
    state->cache.tensor = tensor;
    if (quantized) state->cache.scale = scale;
  }
  state->cache.desc = desc;
}

void PlanAttentionWork(AttentionWork* work, PlanState* state) {
  work->plan = PlanAttention(work->attention);
  state->workspace_floats =
      static_cast<size_t>(work->plan.num_states * StateFloats(work->attention.padded_value_dim));
}

TensorView WidenedIndex::operator()(const TensorView& t) {
  if (!t.present() || t.dtype != DType::kI32 || t.device != Device::kCpu ||
      !CheckStorage("index", t).ok()) {
    return t;
  }
  const int32_t* source = t.As<const int32_t>();
  copies_.emplace_back(source, source + t.NumElements());
  return TensorView::Dense(copies_.back().data(), DType::kI64, t.rank, t.shape);
}

Status CheckRun(const Plan& plan, OpKind op, const Context* context, const PlanState** state) {
  DYNATTN_RETURN_IF_ERROR(PlanOf(plan, op, state));
  if (context == nullptr) return Status::Invalid("context", "must not be null");
  return context->status();
}

}  // namespace dynattn::internal
