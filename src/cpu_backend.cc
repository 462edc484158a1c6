// Copyright 2026 The libdynattn Authors. SPDX-License-Identifier: Apache-2.0
//
// The CPU backend: the entries of the dispatch table's CPU rows (src/dispatch.h). Each runs the
// row's Highway kernels over the independent pieces of a plan on the Context's threads, with
// per-slot scratch and the Context's partial-state workspace.

#include <algorithm>

#include "core/softmax_state.h"
#include "src/context.h"
#include "src/dispatch.h"

namespace dynattn::internal {
namespace {

/// New tokens per write piece.
constexpr int64_t kWriteChunk = 16;

/// The most query vectors of any item, the most states any merge reads, and the partial-state
/// floats of an attention run.
struct AttentionNeeds {
  int max_vectors = 1;
  size_t max_parts = 0;
  size_t state_floats = 0;
};

AttentionNeeds NeedsOf(const AttentionProblem& p, const RunReservation& r) {
  AttentionNeeds n;
  int64_t states = 0;
  if (r.attention_plan != nullptr) {
    n.max_vectors = MaxQueryVectors(p.group_size, r.attention_plan->items, {});
    for (const MergeTask& m : r.attention_plan->merges) {
      n.max_parts = std::max(n.max_parts, static_cast<size_t>(m.num_splits));
    }
    states = r.attention_plan->num_states;
  }
  if (const UnifiedPlan* u = r.unified_plan; u != nullptr) {
    n.max_vectors = MaxQueryVectors(p.group_size, u->request_items, u->shared_items);
    for (size_t t = 0; t + 1 < u->part_begin.size(); ++t) {
      n.max_parts =
          std::max(n.max_parts, static_cast<size_t>(u->part_begin[t + 1] - u->part_begin[t]));
    }
    states = u->num_states;
  }
  n.state_floats = static_cast<size_t>(states * StateFloats(p.padded_value_dim));
  return n;
}

/// Elements of the cache's longer row (keys or values).
int WiderRow(const CacheDesc& cache) { return std::max(cache.head_dim, ValueDim(cache)); }

Status Reserve(const BackendKernels& row, const RunReservation& r, ContextState* context) {
  size_t floats = 0, parts = 0;
  if (r.write != nullptr) floats = row.cpu.io_scratch_floats(WiderRow(r.write->kv.cache));
  if (r.gather != nullptr) {
    floats = std::max(floats, row.cpu.io_scratch_floats(WiderRow(r.gather->kv.cache)));
  }
  if (r.attention != nullptr) {
    const AttentionNeeds needs = NeedsOf(*r.attention, r);
    floats = std::max(floats, row.cpu.attention_scratch_floats(*r.attention, needs.max_vectors));
    parts = needs.max_parts;
    context->States(needs.state_floats);
  }
  for (Scratch& s : context->scratch) {
    s.Reserve(floats);
    s.ReserveParts(parts);
  }
  return Status::Ok();
}

Status WriteNewTokens(const BackendKernels& row, const WriteProblem& problem,
                      ContextState* context) {
  const int64_t tokens = problem.batch.seqstarts[problem.batch.size];
  context->ParallelFor((tokens + kWriteChunk - 1) / kWriteChunk, [&](int64_t chunk, Scratch* s) {
    row.cpu.write_tokens(problem, chunk * kWriteChunk, std::min(tokens, (chunk + 1) * kWriteChunk),
                         s);
  });
  return Status::Ok();
}

Status GatherContext(const BackendKernels& row, const GatherProblem& problem,
                     const std::vector<GatherPiece>& pieces, ContextState* context) {
  context->ParallelFor(static_cast<int64_t>(pieces.size()), [&](int64_t i, Scratch* scratch) {
    row.cpu.gather_rows(problem, pieces[i].request, pieces[i].begin, pieces[i].end, scratch);
  });
  return Status::Ok();
}

/// Score multiply-adds of a work item (its values cost as much again): query vectors times keys
/// times the head size.
int64_t ItemWork(const AttentionProblem& problem, const WorkItem& item) {
  return int64_t{problem.group_size} * (item.row_end - item.row_begin) *
         (item.key_end - item.key_begin) * problem.head_dim;
}

int64_t ItemWork(const AttentionProblem& problem, const SharedItem& item) {
  return int64_t{problem.group_size} * item.num_readers * (item.key_end - item.key_begin) *
         problem.head_dim;
}

/// The work of `items`, counted only up to kInlineWork: a step is either small or not.
template <typename Item>
int64_t CappedWork(const AttentionProblem& problem, const std::vector<Item>& items,
                   int64_t work = 0) {
  for (const Item& item : items) {
    if (work >= kInlineWork) break;
    work += ItemWork(problem, item);
  }
  return work;
}

/// The partial states of a plan, in the context's workspace (every state is written by its item
/// before a merge reads it).
float* PartialStates(const AttentionProblem& problem, int64_t num_states, ContextState* context) {
  return context->States(static_cast<size_t>(num_states * StateFloats(problem.padded_value_dim)));
}

/// Runs one work item: through the row's fast kernel where it has one that covers the item, else
/// through its exact kernel.
void AttendItem(const CpuKernels& kernels, const AttentionProblem& problem, const WorkItem& item,
                float* states, Scratch* scratch) {
  if (kernels.attend_fast != nullptr && kernels.attend_fast(problem, item, states, scratch)) return;
  kernels.attend(problem, item, states, scratch);
}

Status RunAttention(const BackendKernels& row, const AttentionProblem& problem,
                    const AttentionPlan& plan, ContextState* context) {
  float* states = PartialStates(problem, plan.num_states, context);
  const int64_t work = CappedWork(problem, plan.items);
  context->ParallelFor(
      static_cast<int64_t>(plan.items.size()),
      [&](int64_t i, Scratch* scratch) {
        AttendItem(row.cpu, problem, plan.items[i], states, scratch);
      },
      work);
  context->ParallelFor(
      static_cast<int64_t>(plan.merges.size()),
      [&](int64_t i, Scratch* scratch) { row.cpu.merge(problem, plan.merges[i], states, scratch); },
      work);
  return Status::Ok();
}

Status RunUnified(const BackendKernels& row, const AttentionProblem& problem,
                  const UnifiedPlan& plan, ContextState* context) {
  float* states = PartialStates(problem, plan.num_states, context);
  const int64_t shared = static_cast<int64_t>(plan.shared_items.size());
  const int64_t items = shared + static_cast<int64_t>(plan.request_items.size());
  const int64_t work =
      CappedWork(problem, plan.request_items, CappedWork(problem, plan.shared_items));
  // Shared items first: they are the largest (a segment chunk for up to kSharedReaders tokens).
  const AttendSharedFn attend_shared =
      row.cpu.attend_shared_fast != nullptr ? row.cpu.attend_shared_fast : row.cpu.attend_shared;
  context->ParallelFor(
      items,
      [&](int64_t i, Scratch* scratch) {
        if (i < shared) {
          attend_shared(problem, plan.shared_items[i], states, scratch);
        } else {
          AttendItem(row.cpu, problem, plan.request_items[i - shared], states, scratch);
        }
      },
      work);
  const int64_t tokens = static_cast<int64_t>(plan.part_begin.size()) - 1;
  context->ParallelFor(
      tokens,
      [&](int64_t t, Scratch* scratch) {
        const int64_t begin = plan.part_begin[t], end = plan.part_begin[t + 1];
        if (end == begin) return;  // written directly by its only item
        row.cpu.merge_parts(problem, t, plan.parts.data() + begin, static_cast<int>(end - begin),
                            states, scratch);
      },
      work);
  return Status::Ok();
}

const char* CpuRowName(CacheElem elem) {
  switch (elem) {
#define DYNATTN_CPU_ROW_NAME(elem, tag, name, row, c_suffix) \
  case CacheElem::elem:                                      \
    return "cpu/" row;
    DYNATTN_CACHE_FORMATS(DYNATTN_CPU_ROW_NAME)
#undef DYNATTN_CPU_ROW_NAME
  }
  return "cpu";
}

}  // namespace

BackendKernels CpuRow(CacheElem elem, const CpuKernels& kernels) {
  BackendKernels row;
  row.name = CpuRowName(elem);
  row.device = Device::kCpu;
  row.elem = elem;
  row.cpu = kernels;
  row.reserve = &Reserve;
  row.write_new_tokens = &WriteNewTokens;
  row.gather_context = &GatherContext;
  row.run_attention = &RunAttention;
  row.run_unified = &RunUnified;
  return row;
}

}  // namespace dynattn::internal
