// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0

#include "src/plan_state.h"

#include <cstring>
#include <iterator>
#include <string>

#include "core/cache_rows.h"
#include "src/context.h"
#include "src/validate.h"

namespace dynattn {
namespace internal {
namespace {

const char* OpName(OpKind op) {
  constexpr const char* kNames[] = {"KeyValueCache", "MultiHeadAttention",
                                    "MultiHeadCacheAttention", "UnifiedAttention"};
  static_assert(std::size(kNames) == static_cast<size_t>(OpKind::kUnifiedAttention) + 1);
  const size_t index = static_cast<size_t>(op);
  return index < std::size(kNames) ? kNames[index] : "?";
}

Batch OwnBatch(const Batch& batch, IndexCopies* index) {
  Batch out = batch;
  out.seqstarts = index->Own(batch.seqstarts, batch.size + 1);
  out.kvstarts = index->Own(batch.kvstarts, batch.size + 1);
  out.start_pos = index->Own(batch.start_pos, batch.size);
  out.key_offsets = index->Own(batch.key_offsets, batch.size);
  return out;
}

SlotMap OwnSlots(const SlotMap& map, int64_t batch_size, IndexCopies* index) {
  SlotMap out = map;
  const int64_t entries =
      map.mode == SlotMap::Mode::kOffset ? batch_size : batch_size * map.table_stride;
  out.starts = index->Own(map.starts, entries);
  return out;
}

/// `pointer`, which lies in the planned buffer `planned_base`, moved to the same offset of
/// `run_base`.
void* Rebase(void* pointer, const void* planned_base, void* run_base) {
  if (pointer == nullptr) return nullptr;
  const std::ptrdiff_t offset =
      static_cast<const char*>(pointer) - static_cast<const char*>(planned_base);
  return static_cast<char*>(run_base) + offset;
}

CachePlane RebasePlane(const CachePlane& plane, const PlannedCache& planned,
                       const TensorView& tensor, const TensorView& scale) {
  CachePlane out = plane;
  out.data = Rebase(plane.data, planned.tensor.data, tensor.data);
  out.scale = Rebase(plane.scale, planned.scale.data, scale.data);
  return out;
}

bool SamePlaneGeometry(const CachePlane& a, const CachePlane& b) {
  return a.slot_stride == b.slot_stride && a.head_stride == b.head_stride &&
         internal::DimStride(a) == internal::DimStride(b) && a.slots_per_tile == b.slots_per_tile &&
         a.tile_stride == b.tile_stride && a.scale_slot_stride == b.scale_slot_stride &&
         a.scale_head_stride == b.scale_head_stride && (a.scale == nullptr) == (b.scale == nullptr);
}

bool SameGeometry(const CacheDesc& a, const CacheDesc& b) {
  return a.elem == b.elem && a.scale_type == b.scale_type && a.quant_group == b.quant_group &&
         a.num_kv_heads == b.num_kv_heads && a.head_dim == b.head_dim &&
         internal::ValueDim(a) == internal::ValueDim(b) && a.num_slots == b.num_slots &&
         a.device == b.device && SamePlaneGeometry(a.key, b.key) &&
         SamePlaneGeometry(a.value, b.value);
}

/// Same dtype, shape and device (a Run's row strides are its own).
bool SameMetadata(const TensorView& a, const TensorView& b) {
  if (a.rank != b.rank || a.dtype != b.dtype || a.device != b.device) return false;
  for (int i = 0; i < a.rank; ++i) {
    if (a.shape[i] != b.shape[i]) return false;
  }
  return true;
}

std::string Describe(const TensorView& t) {
  if (!t.present()) return "absent";
  std::string text = std::string(DTypeName(t.dtype)) + " " + ShapeString(t);
  if (!t.IsDense()) text += " with row stride " + std::to_string(RowStride(t));
  return text + " in " + DeviceName(t.device) + " memory";
}

/// `view` must have the planned tensor's presence, dtype, shape and device, and valid storage.
/// The log-sum-exp is the one output a Run may leave out of a plan made with it.
Status CheckAgainstPlanned(const char* name, const TensorView& view, const TensorView& planned) {
  if (!view.present() && planned.present() && std::strcmp(name, "lse") == 0) return Status::Ok();
  if (planned.present() != view.present() || (view.present() && !SameMetadata(planned, view))) {
    return Status::Invalid(
        name, "must match the plan (" + Describe(planned) + "), got " + Describe(view));
  }
  return view.present() ? CheckStorage(name, view) : Status::Ok();
}

}  // namespace

namespace {

void OwnWrite(WriteProblem* write, IndexCopies* index) {
  write->batch = OwnBatch(write->batch, index);
  write->kv.slots = OwnSlots(write->kv.slots, write->batch.size, index);
}

void OwnGather(GatherProblem* gather, IndexCopies* index) {
  gather->batch = OwnBatch(gather->batch, index);
  gather->kv.slots = OwnSlots(gather->kv.slots, gather->batch.size, index);
}

void OwnStep(UnifiedStep* step, IndexCopies* index) {
  step->query_start_loc = index->Own(step->query_start_loc, step->num_requests + 1);
  step->context_lens = index->Own(step->context_lens, step->num_requests);
  step->block_table = index->Own(step->block_table, step->num_requests * step->table_stride);
}

/// The attention problem's index arrays, ALiBi slopes and sinks owned by `state`, and the
/// attributes it was planned with kept as the plan's layer attributes.
void OwnAttention(AttentionProblem* attention, PlanState* state) {
  attention->batch = OwnBatch(attention->batch, &state->index);
  attention->kv.slots = OwnSlots(attention->kv.slots, attention->batch.size, &state->index);
  const int64_t heads = attention->num_heads;
  if (attention->alibi_slopes != nullptr) {
    state->alibi_slopes.assign(attention->alibi_slopes, attention->alibi_slopes + heads);
    attention->alibi_slopes = state->alibi_slopes.data();
  }
  if (attention->sinks != nullptr) {
    state->sinks.assign(attention->sinks, attention->sinks + heads);
    attention->sinks = state->sinks.data();
  }
  LayerAttrs& layer = state->planned_layer;
  layer = LayerAttrs();
  layer.window_left = static_cast<int>(attention->window_left);
  layer.logits_soft_cap = attention->soft_cap;
  layer.softmax_scale = attention->score_scale;
  if (!state->sinks.empty()) {
    layer.sinks = TensorView::Dense(state->sinks.data(), DType::kF32, {heads});
  }
}

}  // namespace

void PlanState::OwnIndexArrays() {
  struct Owner {
    PlanState* state;
    void operator()(KeyValueCacheWork& w) const {
      OwnWrite(&w.write, &state->index);
      OwnGather(&w.gather, &state->index);
    }
    void operator()(AttentionWork& w) const { OwnAttention(&w.attention, state); }
    void operator()(CacheAttentionWork& w) const {
      OwnWrite(&w.write, &state->index);
      OwnAttention(&w.attention, state);
    }
    void operator()(UnifiedWork& w) const {
      OwnWrite(&w.write, &state->index);
      OwnAttention(&w.attention, state);
      OwnStep(&w.step, &state->index);
    }
  };
  std::visit(Owner{this}, work);
}

Status PlanState::CheckTensor(const char* name, const TensorView& view) const {
  for (const PlannedTensor& planned : tensors) {
    if (std::strcmp(planned.name, name) == 0) return CheckAgainstPlanned(name, view, planned.view);
  }
  return Status::Internal(std::string(name) + " was not recorded by the plan");
}

Status PlanState::RunCache(const TensorView& tensor, const TensorView& scale, const CacheDesc* desc,
                           CacheDesc* out) const {
  if (cache.raw) {
    if (desc == nullptr) {
      return Status::Invalid("cache_desc", "is required: the step was planned with one");
    }
    const CacheDesc given =
        cache.values_from_keys > 0 ? ValuesFromKeys(*desc, cache.values_from_keys) : *desc;
    desc = &given;
    if (!SameGeometry(*desc, cache.desc)) {
      return Status::Invalid("cache_desc",
                             "must match the plan's (element type, scales, heads, head_dim, "
                             "num_slots, strides and device)");
    }
    if (desc->num_slots > 0 && (desc->key.data == nullptr || desc->value.data == nullptr)) {
      return Status::Invalid("cache_desc", "key.data and value.data must not be null");
    }
    *out = *desc;
    // fp8 scales are read when the call is planned (k_scale / v_scale replace the desc's).
    out->key.tensor_scale = cache.desc.key.tensor_scale;
    out->value.tensor_scale = cache.desc.value.tensor_scale;
    return Status::Ok();
  }
  if (desc != nullptr) {
    return Status::Invalid("cache_desc", "must be null: the step was planned with cache tensors");
  }
  DYNATTN_RETURN_IF_ERROR(CheckAgainstPlanned("cache", tensor, cache.tensor));
  if (cache.scale.present()) {
    DYNATTN_RETURN_IF_ERROR(CheckAgainstPlanned("scale", scale, cache.scale));
  } else if (scale.present() && scale.NumElements() != 0) {
    return Status::Invalid("scale",
                           "must be absent: the step was planned without one (only "
                           "int8 and int4 caches have group scales)");
  }
  *out = cache.desc;
  out->key = RebasePlane(cache.desc.key, cache, tensor, scale);
  out->value = RebasePlane(cache.desc.value, cache, tensor, scale);
  return Status::Ok();
}

namespace {

/// The kept plan of `window_left` in `plans`, made by `make` when there is none yet.
template <typename Make>
const WindowPlan& FindOrPlan(std::vector<std::unique_ptr<WindowPlan>>* plans, int64_t window_left,
                             Make make) {
  for (const std::unique_ptr<WindowPlan>& p : *plans) {
    if (p->window_left == window_left) return *p;
  }
  auto made = std::make_unique<WindowPlan>();
  made->window_left = window_left;
  make(made.get());
  plans->push_back(std::move(made));
  return *plans->back();
}

/// `planned` when `window_left` is the window its `problem` was planned with; else the plan of
/// `problem` under `window_left`, planned by `plan` on first use and kept in `slot` of s's window
/// plans (layers with their own sliding window on one plan).
template <class Problem, class Planned>
const Planned& PlanUnderWindow(const PlanState& s, const Problem& problem, const Planned& planned,
                               int64_t window_left, Planned WindowPlan::*slot,
                               Planned (*plan)(const Problem&)) {
  if (window_left == problem.window_left) return planned;
  std::lock_guard<std::mutex> lock(s.window_mutex);
  const WindowPlan& kept = FindOrPlan(&s.window_plans, window_left, [&](WindowPlan* p) {
    Problem windowed = problem;
    windowed.window_left = window_left;
    p->*slot = plan(windowed);
  });
  return kept.*slot;
}

}  // namespace

const AttentionPlan& PlanState::AttentionPlanFor(const AttentionWork& work,
                                                 int64_t window_left) const {
  return PlanUnderWindow(*this, work.attention, work.plan, window_left, &WindowPlan::attention,
                         &PlanAttention);
}

const UnifiedPlan& PlanState::UnifiedPlanFor(const UnifiedWork& work, int64_t window_left) const {
  return PlanUnderWindow(*this, work.step, work.plan, window_left, &WindowPlan::unified,
                         &PlanUnified);
}

const AttentionPlan& PlanState::ShardPlanFor(const UnifiedWork& work, int64_t window_left) const {
  return PlanUnderWindow(*this, work.attention, work.shard_plan, window_left,
                         &WindowPlan::attention, &PlanAttention);
}

Status PlanOf(const Plan& plan, OpKind op, const PlanState** state) {
  if (plan.empty()) return Status::Invalid("plan", "is empty (its Plan* call failed or never ran)");
  const PlanState* planned = StateAccess::Of(plan);
  if (planned->op() != op) {
    return Status::Invalid(
        "plan", std::string("is a plan of ") + OpName(planned->op()) + ", not of " + OpName(op));
  }
  *state = planned;
  return Status::Ok();
}

}  // namespace internal

Plan::Plan() = default;
Plan::~Plan() = default;
Plan::Plan(Plan&&) noexcept = default;
Plan& Plan::operator=(Plan&&) noexcept = default;

void internal::StateAccess::Reset(Plan* plan, std::unique_ptr<PlanState> state) {
  plan->state_ = std::move(state);
}

const char* Plan::op() const { return state_ ? internal::OpName(state_->op()) : nullptr; }

const char* Plan::backend() const { return state_ ? state_->kernels->name : nullptr; }

Precision Plan::precision() const {
  return state_ ? state_->kernels->precision : Precision::kExact;
}

size_t Plan::workspace_bytes() const {
  return state_ ? state_->workspace_floats * sizeof(float) : 0;
}

LayerAttrs Plan::layer_attrs() const {
  if (!state_ || state_->op() == internal::OpKind::kKeyValueCache) return LayerAttrs{};
  return state_->planned_layer;
}

const UnifiedStepSummary* Plan::unified_summary() const {
  const auto* unified = state_ ? std::get_if<internal::UnifiedWork>(&state_->work) : nullptr;
  return unified != nullptr ? &unified->summary : nullptr;
}

}  // namespace dynattn
